//! `picolease demo`: a live election among N nodes on a fresh SQLite file,
//! with two fenced maintenance loops, a crash, a clean handover, and the
//! final account (DESIGN §4 for the bounds shown).
//!
//! [`run`] reads as the scenario: each step is one method of [`Demo`];
//! [`report`] prints the measured gaps and the account.

mod maintenance;
mod recording;
mod report;
pub mod set;
mod setup;
mod timeline;

pub use set::MAX_DEMO_LEASES;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use picolease::sql::{Dialect, Statements};
use picolease::sqlite::{Database, Fence, LeaseTable, SqliteLease};
use picolease::{Config, Epoch, HolderId, LeaseName, Transition};

use crate::duration::show;
use crate::failure::CliError;
use crate::output::line;
use maintenance::{Loop, Tallies, Tally};
use report::Gaps;
use timeline::Timeline;

/// How often a gated loop takes a batch.
const ROUND: Duration = Duration::from_millis(60);

/// Runs the demo; exit 0 when the account balances and no two leaders
/// overlapped.
pub fn run(
    nodes: usize,
    ttl: Duration,
    timeline: Option<&std::path::Path>,
) -> Result<ExitCode, CliError> {
    // Before any node starts, so their series register.
    let metrics = report::install_metrics();
    let mut demo = Demo::set_up(nodes, ttl)?;
    let first_election = demo.first_election()?;
    let (crashed, after_crash) = demo.crash_the_leader()?;
    demo.restart(crashed)?;
    let after_release = demo.stop_the_leader_cleanly()?;
    let drained = demo.drain_the_queues();
    let rtt = demo.shut_everyone_down()?;
    let gaps = Gaps {
        first_election,
        after_crash,
        after_release,
        rtt,
    };
    demo.report(&gaps, drained, metrics.as_ref(), timeline)
}

/// The demo's running state.
struct Demo {
    lease: LeaseName,
    ttl: Duration,
    interval: Duration,
    /// Holds the temporary folder (and the database in it) until the end.
    _dir: tempfile::TempDir,
    database: Database,
    setup: LeaseTable,
    timeline: Timeline,
    events: mpsc::Sender<(usize, Transition)>,
    tallies: Tallies,
    nodes: Vec<Option<SqliteLease>>,
    names: Vec<String>,
    producing: Arc<AtomicBool>,
    producer: Option<JoinHandle<()>>,
    /// Renew latencies of the nodes stopped so far.
    rtts: Vec<Duration>,
    /// Writes of the crashed node refused by the fence.
    zombie_fenced: usize,
    /// Nodes that already led, with their epochs (excluded when waiting
    /// for the next leader).
    led: Vec<(usize, Epoch)>,
    generous: Duration,
}

impl Demo {
    /// A fresh database with queued work, N nodes started, a producer of
    /// new work running.
    fn set_up(nodes: usize, ttl: Duration) -> Result<Self, CliError> {
        let lease = LeaseName::new("maintenance").map_err(CliError::usage)?;
        let interval = setup::interval_for(ttl)?;
        let (dir, path, database) = setup::scratch_database()?;
        let setup = LeaseTable::open(&database)?;
        let db_error = |e: rusqlite::Error| {
            CliError::runtime(format!("demo database {}: {e}", path.display()))
        };
        maintenance::create_tables(setup.connection()).map_err(db_error)?;
        maintenance::enqueue(setup.connection(), 16, 4, 12, 4).map_err(db_error)?;
        introduce(nodes, &path, ttl, interval);

        let (events, received) = mpsc::channel();
        let producing = Arc::new(AtomicBool::new(true));
        let mut demo = Demo {
            timeline: {
                let mut timeline = Timeline::new(received, database.clone(), Instant::now());
                timeline.record_as(lease.as_str(), ttl, interval);
                timeline
            },
            lease,
            ttl,
            interval,
            _dir: dir,
            database,
            setup,
            events,
            tallies: Arc::default(),
            nodes: Vec::new(),
            names: Vec::new(),
            producer: None,
            producing,
            rtts: Vec::new(),
            zombie_fenced: 0,
            led: Vec::new(),
            generous: ttl * 3 + Duration::from_secs(5),
        };
        for i in 0..nodes {
            demo.start_node(&format!("node-{}", i + 1), i as u64)?;
        }
        let producing = Arc::clone(&demo.producing);
        let database = demo.database.clone();
        demo.producer = Some(std::thread::spawn(move || produce(&database, &producing)));
        Ok(demo)
    }

    /// Starts a node with the two gated loops; its transitions go to the
    /// timeline.
    fn start_node(&mut self, name: &str, seed: u64) -> Result<(), CliError> {
        let index = self.nodes.len();
        let mut config = Config::with_ttl(
            self.lease.clone(),
            HolderId::new(name).map_err(CliError::usage)?,
            self.ttl,
        );
        config.seed = seed + 1;
        let mut builder = SqliteLease::builder(config, self.database.clone());
        for job in [Loop::ExpiryTick, Loop::ObjectCleaner] {
            builder = builder.while_leader(maintenance::gated_loop(
                self.database.clone(),
                name.to_string(),
                job,
                ROUND,
                Arc::clone(&self.tallies),
            ));
        }
        let transitions = builder.subscribe();
        let events = self.events.clone();
        std::thread::spawn(move || {
            for transition in transitions.filter_map(Result::ok) {
                if events.send((index, transition)).is_err() {
                    return;
                }
            }
        });
        self.nodes.push(Some(builder.start()?));
        self.names.push(name.to_string());
        self.timeline.set_names(self.names.clone());
        Ok(())
    }

    /// Waits for a node that has not led yet to lead.
    fn next_leader(&mut self, what: &str) -> Result<(usize, Epoch, Instant), CliError> {
        let exclude: Vec<usize> = self.led.iter().map(|(node, _)| *node).collect();
        let found = self
            .timeline
            .wait_leader(&exclude, self.generous)
            .ok_or_else(|| CliError::runtime(format!("no node became leader {what}")))?;
        self.led.push((found.0, found.1));
        Ok(found)
    }

    /// Stops node `index` (cleanly, or as a crash), keeping its latencies.
    fn stop_node(&mut self, index: usize, clean: bool) -> Result<(), CliError> {
        if let Some(node) = self.nodes[index].take() {
            self.rtts.extend(node.renew_latencies());
            if clean {
                node.shutdown()?;
            } else {
                node.abort();
            }
        }
        Ok(())
    }

    /// Step 1: the first election.
    fn first_election(&mut self) -> Result<Duration, CliError> {
        self.next_leader("at start")?;
        let gap = self.timeline.since_start();
        self.timeline.pump(self.ttl);
        Ok(gap)
    }

    /// Step 2: crash the leader (no release: its row lapses by the ttl),
    /// then replay its late write with the old epoch: the fence refuses it.
    fn crash_the_leader(&mut self) -> Result<(usize, Duration), CliError> {
        let (leader, epoch) = self.led[0];
        let name = self.names[leader].clone();
        self.timeline.note(&format!(
            "CRASH {name} (epoch {epoch}): stopped without releasing; its row stays held until the ttl lapses"
        ));
        let crash_at = Instant::now();
        self.timeline.crashed(leader);
        self.stop_node(leader, false)?;
        let (_, _, at) = self.next_leader("after the crash")?;
        let gap = at.saturating_duration_since(crash_at);
        self.timeline.note(&format!(
            "takeover after the crash: {} (bound ttl + RTT = {} + RTT)",
            show(gap),
            show(self.ttl)
        ));
        let zombie = zombie_write(&self.database, &self.lease, &name, epoch)?;
        self.zombie_fenced = zombie.fenced;
        self.timeline.note(&format!(
            "a late write from {name} (as if it had only been paused) with its old epoch {epoch}: {}",
            if zombie.fenced == 1 { "refused by the fence (nothing changed)" } else { "NOT refused (bug!)" }
        ));
        Ok((leader, gap))
    }

    /// Step 3: the crashed node restarts as a new instance (a new holder
    /// id) and joins as a follower.
    fn restart(&mut self, crashed: usize) -> Result<(), CliError> {
        let old = self.names[crashed].clone();
        let restarted = format!("{old}-restarted");
        self.start_node(&restarted, 100)?;
        self.timeline
            .note(&format!("{old} restarts as {restarted} (a new holder id)"));
        self.timeline.pump(self.ttl);
        Ok(())
    }

    /// Step 4: stop the current leader cleanly (work stopped, then
    /// released) and time the handover.
    fn stop_the_leader_cleanly(&mut self) -> Result<Duration, CliError> {
        let (leader, epoch) = self.led[1];
        self.timeline.note(&format!(
            "STOP {} (epoch {epoch}) cleanly: its loops stop first, then it releases",
            self.names[leader]
        ));
        self.stop_node(leader, true)?;
        let released_at = Instant::now();
        let (_, _, at) = self.next_leader("after the clean release")?;
        let gap = at.saturating_duration_since(released_at);
        self.timeline.note(&format!(
            "handover after the release: {} (the followers are told of the release by the file watch: bound RTT; without it, interval = {} + RTT)",
            show(gap),
            show(self.interval)
        ));
        Ok(gap)
    }

    /// Step 5: no more new work; the leader drains the queues.
    fn drain_the_queues(&mut self) -> bool {
        self.producing.store(false, Ordering::SeqCst);
        if let Some(producer) = self.producer.take() {
            let _ = producer.join();
        }
        self.timeline
            .note("no more new items; waiting for the queues to drain");
        self.timeline.pump_until_drained(self.generous)
    }

    /// Step 6: everyone shuts down cleanly; returns the median renew.
    fn shut_everyone_down(&mut self) -> Result<Duration, CliError> {
        for index in 0..self.nodes.len() {
            self.stop_node(index, true)?;
        }
        self.timeline.pump(Duration::from_millis(50));
        // The forwarding threads end with their subscriptions; the last
        // sender here goes now, so `drain` sees the end.
        let (closed, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.events, closed));
        self.timeline.drain();
        self.rtts.sort();
        Ok(self
            .rtts
            .get(self.rtts.len() / 2)
            .copied()
            .unwrap_or_default())
    }

    /// The report, and the exit status.
    fn report(
        self,
        gaps: &Gaps,
        drained: bool,
        metrics: Option<&report::Metrics>,
        timeline: Option<&std::path::Path>,
    ) -> Result<ExitCode, CliError> {
        report::handovers(gaps, self.ttl, self.interval);
        let account = maintenance::account(self.setup.connection())
            .map_err(|e| CliError::runtime(format!("demo database: {e}")))?;
        let total = self
            .tallies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .fold(Tally::default(), |mut sum, (_, _, t)| {
                sum.done += t.done;
                sum.redundant += t.redundant;
                sum.fenced += t.fenced;
                sum.failed += t.failed;
                sum
            });
        let balanced = report::account(&account, &total, self.zombie_fenced, drained);
        let overlaps = self.timeline.overlaps();
        report::verdict(&account, &total, balanced, overlaps);
        if let Some(metrics) = metrics {
            report::metrics(metrics);
        }
        line(&format!(
            "demo finished in {}",
            show(self.timeline.since_start())
        ));
        if let Some(path) = timeline {
            self.timeline.draw(path, self.ttl, self.interval)?;
        }
        if balanced && overlaps == 0 {
            Ok(ExitCode::SUCCESS)
        } else {
            Err(CliError::runtime(
                "the demo's account does not balance (see above)",
            ))
        }
    }
}

/// The opening lines.
fn introduce(nodes: usize, path: &std::path::Path, ttl: Duration, interval: Duration) {
    line(&format!(
        "picolease demo: {nodes} nodes contend for lease \"maintenance\" on {}",
        path.display()
    ));
    line(&format!(
        "ttl {}, renew/poll interval {} (ttl/4). Each node has its own connection and two loops gated on leadership:",
        show(ttl),
        show(interval)
    ));
    line("  expiry tick    - reclaims upload reservations that expired without being committed");
    line("  object cleaner - deletes objects marked destroyed");
    line("Every command is an idempotent UPDATE fenced by the leader's epoch. New items arrive as it runs.");
    line("");
}

/// The crashed node's late write, fenced with its old epoch.
fn zombie_write(
    database: &Database,
    lease: &LeaseName,
    node: &str,
    epoch: Epoch,
) -> Result<Tally, CliError> {
    let conn = picolease::sqlite::open_connection(database)?;
    let statements = Statements::new(Dialect::Sqlite, &database.table);
    let holder = HolderId::new(node).map_err(CliError::usage)?;
    let fence = Fence::new(&statements, lease, &holder, epoch);
    let item: i64 = conn
        .query_row(
            "SELECT coalesce(max(id), 1) FROM upload_reservations WHERE committed = 0",
            [],
            |row| row.get(0),
        )
        .unwrap_or(1);
    let mut tally = Tally::default();
    maintenance::apply(
        &conn,
        Loop::ExpiryTick,
        &fence,
        epoch.to_i64(),
        node,
        item,
        &mut tally,
    );
    Ok(tally)
}

/// New work arriving while the demo runs.
fn produce(database: &Database, producing: &AtomicBool) {
    let Ok(conn) = picolease::sqlite::open_connection(database) else {
        return;
    };
    while producing.load(Ordering::SeqCst) {
        let _ = maintenance::enqueue(&conn, 1, 0, 1, 0);
        std::thread::sleep(Duration::from_millis(250));
    }
}
