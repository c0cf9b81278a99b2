//! `picolease demo`: a live election among N nodes on a fresh SQLite file,
//! with two fenced maintenance loops, a crash, a clean handover, and the
//! final account (issue 3; DESIGN §4 for the bounds shown).

mod maintenance;
mod timeline;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use picolease::sql::{Dialect, Statements};
use picolease::sqlite::{Builder, Database, Fence, LeaseTable, SqliteLease};
use picolease::{Config, HolderId, LeaseName, TableName};

use crate::duration::show;
use crate::failure::CliError;
use crate::output::line;
use maintenance::{Loop, Tallies, Tally};
use timeline::Timeline;

/// How often a gated loop takes a batch.
const ROUND: Duration = Duration::from_millis(60);

/// Runs the demo; exit 0 when the account balances and no two leaders
/// overlapped.
pub fn run(nodes: usize, ttl: Duration) -> Result<ExitCode, CliError> {
    let lease = LeaseName::new("maintenance").map_err(CliError::usage)?;
    let probe = Config::with_ttl(
        lease.clone(),
        HolderId::new("probe").map_err(CliError::usage)?,
        ttl,
    );
    probe.validate().map_err(CliError::usage)?;
    if ttl > Duration::from_secs(20) {
        return Err(CliError::usage(format!(
            "--ttl {} is too long for a demo that should finish in seconds: use at most 20s",
            show(ttl)
        )));
    }
    let dir = tempfile::tempdir()
        .map_err(|e| CliError::runtime(format!("cannot create a temporary folder: {e}")))?;
    let path = dir.path().join("demo.db");
    let database = Database::file(&path).table(TableName::default());
    let setup = LeaseTable::open(&database)?;
    let db_error =
        |e: rusqlite::Error| CliError::runtime(format!("demo database {}: {e}", path.display()));
    maintenance::create_tables(setup.connection()).map_err(db_error)?;
    maintenance::enqueue(setup.connection(), 16, 4, 12, 4).map_err(db_error)?;

    line(&format!(
        "picolease demo: {nodes} nodes contend for lease \"maintenance\" on {}",
        path.display()
    ));
    line(&format!(
        "ttl {}, renew/poll interval {} (ttl/4). Each node has its own connection and two loops gated on leadership:",
        show(ttl),
        show(probe.interval)
    ));
    line("  expiry tick    - reclaims upload reservations that expired without being committed");
    line("  object cleaner - deletes objects marked destroyed");
    line("Every command is an idempotent UPDATE fenced by the leader's epoch. New items arrive as it runs.");
    line("");

    let (events_tx, events) = mpsc::channel();
    let mut timeline = Timeline::new(events, database.clone(), Instant::now());
    let tallies: Tallies = Arc::default();
    let mut nodes_running: Vec<Option<SqliteLease>> = Vec::new();
    let mut names = Vec::new();
    for i in 0..nodes {
        let name = format!("node-{}", i + 1);
        let node = start_node(
            &lease, &name, i as u64, ttl, &database, &tallies, &events_tx, i,
        )?;
        nodes_running.push(Some(node));
        names.push(name);
    }
    timeline.set_names(names.clone());

    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let producing = Arc::clone(&producing);
        let database = database.clone();
        std::thread::spawn(move || produce(&database, &producing))
    };

    let generous = ttl * 3 + Duration::from_secs(5);
    // 1. The first election.
    let (first, epoch1, _) = timeline
        .wait_leader(&[], generous)
        .ok_or_else(|| CliError::runtime("no node became leader"))?;
    let first_gap = timeline.since_start();
    timeline.pump(ttl);

    // 2. Crash the leader: no release, its row lapses by the ttl.
    let crashed_name = names[first].clone();
    timeline.note(&format!(
        "CRASH {crashed_name} (epoch {epoch1}): stopped without releasing; its row stays held until the ttl lapses"
    ));
    let crash_at = Instant::now();
    timeline.crashed(first);
    let mut rtts = Vec::new();
    if let Some(node) = nodes_running[first].take() {
        rtts.extend(node.renew_latencies());
        node.abandon();
    }
    let (second, epoch2, at2) = timeline
        .wait_leader(&[first], generous)
        .ok_or_else(|| CliError::runtime("no node took over after the crash"))?;
    let crash_gap = at2.saturating_duration_since(crash_at);
    timeline.note(&format!(
        "takeover after the crash: {} (bound ttl + RTT = {} + RTT)",
        show(crash_gap),
        show(ttl)
    ));

    // The crashed node, as a zombie resuming after its pause, writes with
    // its old epoch: the database refuses it.
    let zombie = zombie_write(&database, &lease, &crashed_name, epoch1)?;
    timeline.note(&format!(
        "a late write from {crashed_name} (as if it had only been paused) with its old epoch {epoch1}: {}",
        if zombie.fenced == 1 { "refused by the fence (nothing changed)" } else { "NOT refused (bug!)" }
    ));
    // And it restarts as a new instance, which joins as a follower.
    let restarted = format!("{crashed_name}-restarted");
    let node = start_node(
        &lease,
        &restarted,
        100,
        ttl,
        &database,
        &tallies,
        &events_tx,
        names.len(),
    )?;
    names.push(restarted.clone());
    timeline.set_names(names.clone());
    nodes_running.push(Some(node));
    timeline.note(&format!(
        "{crashed_name} restarts as {restarted} (a new holder id)"
    ));
    timeline.pump(ttl);

    // 3. Stop the second leader cleanly: work stopped, then released.
    timeline.note(&format!(
        "STOP {} (epoch {epoch2}) cleanly: its loops stop first, then it releases",
        names[second]
    ));
    if let Some(node) = nodes_running[second].take() {
        rtts.extend(node.renew_latencies());
        node.shutdown()?;
    }
    let released_at = Instant::now();
    timeline.stopped(second);
    let (_third, _epoch3, at3) = timeline
        .wait_leader(&[first, second], generous)
        .ok_or_else(|| CliError::runtime("no node took over after the clean release"))?;
    let release_gap = at3.saturating_duration_since(released_at);
    timeline.note(&format!(
        "handover after the release: {} (bound on SQLite: interval = {} + RTT; no notifications)",
        show(release_gap),
        show(probe.interval)
    ));

    // 4. Stop producing and let the leader drain the queues.
    producing.store(false, Ordering::SeqCst);
    let _ = producer.join();
    timeline.note("no more new items; waiting for the queues to drain");
    let drained = timeline.pump_until_drained(generous);

    // 5. Everyone shuts down cleanly.
    for node in nodes_running.iter_mut().filter_map(Option::take) {
        rtts.extend(node.renew_latencies());
        node.shutdown()?;
    }
    timeline.pump(Duration::from_millis(50));
    drop(events_tx);
    timeline.drain();
    rtts.sort();
    let rtt = rtts.get(rtts.len() / 2).copied().unwrap_or_default();

    let account = maintenance::account(setup.connection()).map_err(db_error)?;
    let total = tallies
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

    line("");
    line(&format!(
        "Handover times (RTT here = median renew statement, {:.2}ms)",
        rtt.as_secs_f64() * 1e3
    ));
    line(&format!(
        "  {:<28} {:>9}   {:<30} {}",
        "event", "measured", "DESIGN §4 target", "seed bound"
    ));
    let rows = [
        (
            "first election",
            first_gap,
            "RTT".to_string(),
            format!("interval + RTT = {} + RTT", show(probe.interval)),
        ),
        (
            "takeover after a crash",
            crash_gap,
            format!("ttl + RTT = {} + RTT", show(ttl)),
            format!("ttl + interval = {}", show(ttl + probe.interval)),
        ),
        (
            "takeover after a release",
            release_gap,
            format!("interval = {} (SQLite)", show(probe.interval)),
            format!("interval = {}", show(probe.interval)),
        ),
    ];
    for (event, measured, target, seed) in rows {
        line(&format!(
            "  {event:<28} {:>9}   {target:<30} {seed}",
            show(measured)
        ));
    }
    line("");
    line("Final account");
    line(&format!(
        "  upload reservations reclaimed: {}/{} expired uncommitted; committed ones touched: {}",
        account.reclaimed, account.stale, account.committed_touched
    ));
    line(&format!(
        "  objects deleted:               {}/{} destroyed; live ones touched: {}",
        account.deleted, account.destroyed, account.live_touched
    ));
    line(&format!(
        "  commands: {} applied, {} answered as redundant (already done, re-sent at a term start), {} refused by the fence, {} retried",
        total.done, total.redundant, total.fenced + zombie.fenced, total.failed
    ));
    for (epoch, node, count) in &account.by_term {
        line(&format!("  epoch {epoch}: {node} processed {count} items"));
    }
    let applied = account.reclaimed + account.deleted;
    let balanced = drained
        && account.reclaimed == account.stale
        && account.deleted == account.destroyed
        && account.committed_touched == 0
        && account.live_touched == 0
        && usize::try_from(applied).ok() == Some(total.done);
    let overlaps = timeline.overlaps();
    line(&format!(
        "  every queued item processed: {}; each applied exactly once: {}; nothing lost: {}; two leaders at once: {}",
        yes(account.reclaimed == account.stale && account.deleted == account.destroyed),
        yes(usize::try_from(applied).ok() == Some(total.done)),
        yes(balanced),
        if overlaps == 0 { "never".to_string() } else { format!("{overlaps} times (bug!)") }
    ));
    line(&format!(
        "demo finished in {}",
        show(timeline.since_start())
    ));
    if balanced && overlaps == 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::runtime(
            "the demo's account does not balance (see above)",
        ))
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

#[allow(clippy::too_many_arguments)]
fn start_node(
    lease: &LeaseName,
    name: &str,
    seed: u64,
    ttl: Duration,
    database: &Database,
    tallies: &Tallies,
    events: &mpsc::Sender<(usize, picolease::sqlite::Transition)>,
    index: usize,
) -> Result<SqliteLease, CliError> {
    let mut config = Config::with_ttl(
        lease.clone(),
        HolderId::new(name).map_err(CliError::usage)?,
        ttl,
    );
    config.seed = seed + 1;
    let mut builder = Builder::new(config, database.clone());
    for job in [Loop::ExpiryTick, Loop::ObjectCleaner] {
        builder = builder.while_leader(maintenance::gated_loop(
            database.clone(),
            name.to_string(),
            job,
            ROUND,
            Arc::clone(tallies),
        ));
    }
    let transitions = builder.subscribe();
    let events = events.clone();
    std::thread::spawn(move || {
        for transition in transitions {
            if events.send((index, transition)).is_err() {
                return;
            }
        }
    });
    Ok(builder.start()?)
}

/// The crashed node's late write, fenced with its old epoch.
fn zombie_write(
    database: &Database,
    lease: &LeaseName,
    node: &str,
    epoch: picolease::Epoch,
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
