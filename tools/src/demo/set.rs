//! `picolease demo --leases N`: N leases shared by the nodes on a fresh
//! SQLite file (DESIGN §9). The share is shown as it moves: the nodes
//! settle on their fair share, a crashed node's leases are taken at their
//! expiry, a node that joins gets its share from the free leases the
//! others give up (never by stealing), and a clean shutdown hands its
//! leases over at once. Each lease's work records who runs it, so the
//! demo can say that no lease ever ran on two nodes at once.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use picolease::set::SetSnapshot;
use picolease::sqlite::{Database, SqliteLeaseSet};
use picolease::{HolderId, LeaseName, SetConfig};

use crate::duration::show;
use crate::failure::CliError;
use crate::output::line;

use super::recording::Recording;

/// The most leases the demo shows (a demo, not a benchmark:
/// `examples/set_scale.rs` goes to 10,000 per node).
pub const MAX_DEMO_LEASES: u32 = 1_000;

/// How often the demo looks at the nodes' shares.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// Which node runs each lease's work right now (more than one entry is an
/// overlap), and how many times a work started while another ran.
#[derive(Default)]
struct Works {
    running: BTreeMap<String, Vec<String>>,
    overlaps: usize,
    started: usize,
}

/// The demo's running state.
struct SetDemo {
    leases: Vec<LeaseName>,
    ttl: Duration,
    interval: Duration,
    /// Holds the temporary folder (and the database in it) until the end.
    _dir: tempfile::TempDir,
    database: Database,
    nodes: Vec<(String, Option<SqliteLeaseSet>)>,
    works: Arc<Mutex<Works>>,
    started: Instant,
    /// The shares last printed.
    shown: Vec<Option<usize>>,
    generous: Duration,
    recording: Recording,
    recorders: Vec<std::thread::JoinHandle<()>>,
}

/// What the demo checked, for the verdict.
struct Checks {
    settled: Duration,
    after_crash: Duration,
    joined_moves: usize,
    joiner_share: usize,
    moved_elsewhere: usize,
    after_release: Duration,
}

/// Runs the lease-set demo; exit 0 when every step settled and no lease
/// ran on two nodes at once.
pub fn run(
    nodes: usize,
    leases: usize,
    ttl: Duration,
    timeline: Option<&std::path::Path>,
) -> Result<ExitCode, CliError> {
    let mut demo = SetDemo::set_up(nodes, leases, ttl)?;
    let outcome = demo.scenario();
    demo.shut_everyone_down();
    let checks = outcome?;
    let verdict = demo.report(&checks);
    if let Some(path) = timeline {
        demo.draw(path)?;
    }
    verdict
}

impl SetDemo {
    fn set_up(nodes: usize, leases: usize, ttl: Duration) -> Result<Self, CliError> {
        let interval = super::setup::interval_for(ttl)?;
        let (dir, path, database) = super::setup::scratch_database()?;
        let leases = (0..leases)
            .map(|i| LeaseName::new(&format!("s{i}")).map_err(CliError::usage))
            .collect::<Result<Vec<_>, _>>()?;
        line(&format!(
            "picolease demo: {nodes} nodes share {} leases (s0 … s{}) on {}",
            leases.len(),
            leases.len() - 1,
            path.display()
        ));
        line(&format!(
            "ttl {}, interval {}. Each node renews all its leases in one batched statement per interval (plus one survey), and",
            show(ttl),
            show(interval)
        ));
        line("aims for its fair share: of N leases and n live nodes, the N mod n first by holder id take ⌈N/n⌉, the others ⌊N/n⌋.");
        line("Shares are printed as they change (one column per node; - = not running).");
        line("");
        let mut demo = SetDemo {
            leases,
            ttl,
            interval,
            _dir: dir,
            database,
            nodes: Vec::new(),
            works: Arc::default(),
            started: Instant::now(),
            shown: Vec::new(),
            generous: ttl * 3 + Duration::from_secs(5),
            recording: Recording::new(ttl, interval),
            recorders: Vec::new(),
        };
        for i in 0..nodes {
            demo.start_node(&format!("node-{}", i + 1))?;
        }
        Ok(demo)
    }

    /// The steps, in order: settle, crash, join, clean shutdown.
    fn scenario(&mut self) -> Result<Checks, CliError> {
        let settled = self.until_settled("at start")? - self.started;
        self.note(&format!(
            "settled: every lease held, every node at its share, {} after start",
            show(settled)
        ));

        let crashed = self.nodes.len() - 1;
        let crash_at = Instant::now();
        self.note(&format!(
            "{} crashes (no release): its leases lapse at their expiry",
            self.nodes[crashed].0
        ));
        if let Some(node) = self.nodes[crashed].1.take() {
            node.abort();
        }
        let name = self.nodes[crashed].0.clone();
        self.recording.push(
            "crash",
            "",
            &name,
            std::time::SystemTime::now(),
            serde_json::json!({}),
        );
        let after_crash = self.until_settled("after the crash")? - crash_at;
        self.note(&format!(
            "taken over and balanced {} after the crash (ttl {}, bound ttl + interval = {})",
            show(after_crash),
            show(self.ttl),
            show(self.ttl + self.interval)
        ));

        let before = self.holders();
        let joiner = format!("node-{}", self.nodes.len() + 1);
        self.note(&format!(
            "{joiner} joins: the others give up their surplus, it takes the freed leases"
        ));
        self.start_node(&joiner)?;
        self.until_settled("after the join")?;
        let after = self.holders();
        let moved: Vec<&String> = before
            .iter()
            .filter(|(lease, holder)| after.get(*lease) != Some(holder))
            .map(|(lease, _)| lease)
            .collect();
        let moved_elsewhere = moved
            .iter()
            .filter(|lease| after.get(**lease) != Some(&joiner))
            .count();
        let joiner_share = after.values().filter(|h| **h == joiner).count();
        self.note(&format!(
            "{} leases moved, all to {joiner} (its share is {joiner_share}); {} moved between the others",
            moved.len(),
            moved_elsewhere
        ));

        let leaving = self
            .nodes
            .iter()
            .position(|(_, n)| n.is_some())
            .unwrap_or(0);
        let name = self.nodes[leaving].0.clone();
        self.note(&format!(
            "{name} shuts down cleanly: it stops its work and releases its leases; the others see them free at their next survey (SQLite has no NOTIFY)"
        ));
        let stop_at = Instant::now();
        if let Some(node) = self.nodes[leaving].1.take() {
            node.shutdown()?;
        }
        let after_release = self.until_settled("after the clean shutdown")? - stop_at;
        self.note(&format!(
            "handed over and balanced {} after the shutdown began",
            show(after_release)
        ));
        Ok(Checks {
            settled,
            after_crash,
            joined_moves: moved.len(),
            joiner_share,
            moved_elsewhere,
            after_release,
        })
    }

    /// Starts a node whose work for each lease records itself in `works`.
    fn start_node(&mut self, name: &str) -> Result<(), CliError> {
        let config = SetConfig::with_ttl(HolderId::new(name).map_err(CliError::usage)?, self.ttl);
        let works = Arc::clone(&self.works);
        let builder = SqliteLeaseSet::builder(config, self.leases.clone(), self.database.clone());
        self.recorders
            .push(self.recording.follow(name.to_string(), builder.subscribe()));
        let node = builder
            .while_leader(move |ctx| {
                let lease = ctx.lease().to_string();
                let me = ctx.holder().to_string();
                {
                    let mut works = works.lock().unwrap_or_else(|p| p.into_inner());
                    works.started += 1;
                    let running = works.running.entry(lease.clone()).or_default();
                    let overlap = !running.is_empty();
                    running.push(me.clone());
                    if overlap {
                        works.overlaps += 1;
                    }
                }
                // The lease's work would run here; the demo only waits for
                // the term's end (stopped, or past its deadline).
                while !ctx.sleep(std::time::Duration::from_secs(60)) {}
                let mut works = works.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(running) = works.running.get_mut(&lease) {
                    running.retain(|h| *h != me);
                }
            })
            .start()?;
        self.nodes.push((name.to_string(), Some(node)));
        Ok(())
    }

    /// Who holds each lease, as the nodes report it.
    fn holders(&self) -> BTreeMap<String, String> {
        let mut holders = BTreeMap::new();
        for (name, node) in &self.nodes {
            if let Some(node) = node {
                for lease in node.snapshot().held.keys() {
                    holders.insert(lease.to_string(), name.clone());
                }
            }
        }
        holders
    }

    /// Waits until every lease is held and every running node holds
    /// exactly its share, printing the shares as they change; returns when
    /// that was first seen.
    fn until_settled(&mut self, what: &str) -> Result<Instant, CliError> {
        let from = Instant::now();
        loop {
            let statuses: Vec<Option<SetSnapshot>> = self
                .nodes
                .iter()
                .map(|(_, node)| node.as_ref().map(|set| set.snapshot()))
                .collect();
            let shares: Vec<Option<usize>> = statuses
                .iter()
                .map(|s| s.as_ref().map(|s| s.held.len()))
                .collect();
            if shares != self.shown {
                self.print_shares(&shares);
                self.shown = shares.clone();
            }
            let running: Vec<&SetSnapshot> = statuses.iter().flatten().collect();
            let total: usize = running.iter().map(|s| s.held.len()).sum();
            let at_share = running
                .iter()
                .all(|s| s.target == Some(s.held.len()) && s.members.len() == running.len());
            if total == self.leases.len() && at_share {
                return Ok(Instant::now());
            }
            if from.elapsed() > self.generous {
                return Err(CliError::runtime(format!(
                    "the shares did not settle {what} within {} (last seen: {})",
                    show(self.generous),
                    self.columns(&shares)
                )));
            }
            std::thread::sleep(LOOK_EVERY);
        }
    }

    fn columns(&self, shares: &[Option<usize>]) -> String {
        shares
            .iter()
            .map(|s| s.map_or("-".to_string(), |n| n.to_string()))
            .map(|s| format!("{s:>8}"))
            .collect::<String>()
    }

    fn print_shares(&self, shares: &[Option<usize>]) {
        if self.shown.len() != shares.len() {
            let names: String = self.nodes.iter().map(|(n, _)| format!("{n:>8}")).collect();
            line(&format!("{:>9}  {names}", "t"));
        }
        line(&format!(
            "{:>9}  {}",
            show(self.started.elapsed()),
            self.columns(shares)
        ));
    }

    fn note(&self, text: &str) {
        line(&format!("{:>9}  -- {text}", show(self.started.elapsed())));
    }

    fn shut_everyone_down(&mut self) {
        for (_, node) in &mut self.nodes {
            if let Some(node) = node.take() {
                let _ = node.shutdown();
            }
        }
        // Every driver has stopped: each recorder has read its last change.
        for recorder in self.recorders.drain(..) {
            let _ = recorder.join();
        }
    }

    /// `demo --leases N --timeline FILE`: the run drawn as `picolease
    /// timeline` draws one (per-lease lanes up to 40 leases, counts per
    /// node beyond); an error if it shows two leaders of a lease.
    fn draw(&self, path: &std::path::Path) -> Result<(), CliError> {
        let title = format!(
            "picolease demo: {} leases, ttl {}, interval {}",
            self.leases.len(),
            show(self.ttl),
            show(self.interval)
        );
        self.recording.draw(path, &title)
    }

    fn report(&self, checks: &Checks) -> Result<ExitCode, CliError> {
        let works = self.works.lock().unwrap_or_else(|p| p.into_inner());
        let still_running = works.running.values().filter(|r| !r.is_empty()).count();
        let bound = self.ttl + self.interval;
        line("");
        line("Summary");
        line(&format!(
            "  settled at start            {:>9}",
            show(checks.settled)
        ));
        line(&format!(
            "  crash taken over, balanced  {:>9}   bound ttl + interval = {}",
            show(checks.after_crash),
            show(bound)
        ));
        line(&format!(
            "  join: leases moved          {:>9}   the joiner's share: {}; moved between the others: {}",
            checks.joined_moves, checks.joiner_share, checks.moved_elsewhere
        ));
        line(&format!(
            "  clean shutdown handed over  {:>9}   bound: one interval = {} (on PostgreSQL a NOTIFY makes it one round trip)",
            show(checks.after_release),
            show(self.interval)
        ));
        line(&format!(
            "  works started: {}; a lease's work on two nodes at once: {}; work left running after shutdown: {}",
            works.started,
            if works.overlaps == 0 {
                "never".to_string()
            } else {
                format!("{} times (bug!)", works.overlaps)
            },
            still_running
        ));
        let ok = works.overlaps == 0
            && still_running == 0
            && checks.moved_elsewhere == 0
            && checks.joined_moves == checks.joiner_share;
        if ok {
            line("Reproduce: picolease demo --leases N [--nodes K] [--ttl D]");
            Ok(ExitCode::SUCCESS)
        } else {
            Err(CliError::runtime(
                "the lease-set demo saw a step it should not have (see the summary)",
            ))
        }
    }
}
