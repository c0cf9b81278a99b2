//! The end of a term on SQLite, for every kind of gated work and every way
//! a statement can hang, for a single lease and for a lease set (DESIGN
//! §4b: the deadline wins over I/O).
//!
//! - Work that sleeps with `ctx.sleep` and work that polls
//!   `ctx.is_cancelled()` in a busy loop, never sleeping, both stop by the
//!   term's deadline, which they read themselves.
//! - A statement that waits on another process's write lock, and one that
//!   is slow for a reason of its own (a trigger that computes for minutes,
//!   standing in for a long read or a slow disk), are cut at the deadline
//!   (the busy wait and the watchdog), so the node is back to end the
//!   term, and leads again once the obstacle is gone.
//!
//! Real time: the bounds are generous (`MARGIN`) and the figures are
//! printed. More rounds for the worst case: `PICOLEASE_ROUNDS=20 cargo
//! test -p picolease-tests --test integration sqlite_term_end:: -- --nocapture
//! --test-threads 1`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use picolease::sqlite::{Database, SqliteLease, SqliteLeaseSet};
use picolease::{boottime, Config, HolderId, LeaseName};

/// How late a work may end past its deadline on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_millis(50);
const PATIENCE: Duration = Duration::from_secs(10);

/// How a work waits between rounds.
#[derive(Clone, Copy, Debug)]
enum Style {
    /// `while !ctx.sleep(20 ms) {}`
    Sleeps,
    /// `while !ctx.is_cancelled() {}`: never sleeps, never yields.
    Polls,
}

/// What stands in the way of the leader's statements.
#[derive(Clone, Copy, Debug)]
enum Obstacle {
    /// Another connection holds the write lock (`BEGIN IMMEDIATE`).
    WriteLock,
    /// A trigger makes every update of the lease table compute for
    /// minutes: not a lock, the statement itself is slow.
    SlowStatement,
}

/// Per work: the last deadline it read (boot-time clock) and when it ended.
type Ends = Arc<Mutex<BTreeMap<String, (Option<Duration>, Duration)>>>;

fn rounds() -> usize {
    std::env::var("PICOLEASE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
}

fn config(lease: &str) -> Config {
    // ttl 2 s, interval 600 ms (busy timeout 450 ms): the timings of
    // `sqlite_blocked`.
    Config::with_ttl(
        LeaseName::new(lease).unwrap(),
        HolderId::new("a").unwrap(),
        Duration::from_secs(2),
    )
    .interval(Duration::from_millis(600))
}

/// What the works below read of their term: the same three calls on a
/// single lease's and on a set's context.
trait TermContext {
    fn deadline(&self) -> Option<Duration>;
    fn is_cancelled(&self) -> bool;
    fn sleep(&self, timeout: Duration) -> bool;
}

impl TermContext for picolease::sqlite::LeaderContext {
    fn deadline(&self) -> Option<Duration> {
        picolease::sqlite::LeaderContext::deadline(self)
    }
    fn is_cancelled(&self) -> bool {
        picolease::sqlite::LeaderContext::is_cancelled(self)
    }
    fn sleep(&self, timeout: Duration) -> bool {
        picolease::sqlite::LeaderContext::sleep(self, timeout)
    }
}

/// A gated work of `style`, recording under `key` its last deadline and
/// its end.
fn work(style: Style, key: String, ends: &Ends, ctx: &dyn TermContext) {
    let mut last = ctx.deadline();
    match style {
        Style::Sleeps => {
            while !ctx.sleep(Duration::from_millis(20)) {
                last = ctx.deadline().or(last);
            }
        }
        Style::Polls => {
            while !ctx.is_cancelled() {
                last = ctx.deadline().or(last);
            }
        }
    }
    ends.lock().unwrap().insert(key, (last, boottime()));
}

/// Puts the obstacle up; the returned closure takes it down.
fn obstruct(path: &Path, obstacle: Obstacle) -> Box<dyn FnOnce()> {
    let blocker = rusqlite::Connection::open(path).unwrap();
    blocker.busy_timeout(Duration::from_secs(30)).unwrap();
    match obstacle {
        Obstacle::WriteLock => {
            blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
            Box::new(move || blocker.execute_batch("ROLLBACK").unwrap())
        }
        Obstacle::SlowStatement => {
            blocker
                .execute_batch(
                    "CREATE TRIGGER slow_lease_update BEFORE UPDATE ON picolease_leases BEGIN
                       SELECT count(*) FROM (
                         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)
                         SELECT x FROM c LIMIT 10000000000);
                     END;",
                )
                .unwrap();
            // Dropping it waits for the slow statement in progress, which
            // the watchdog interrupts.
            Box::new(move || {
                blocker
                    .execute_batch("DROP TRIGGER slow_lease_update")
                    .unwrap()
            })
        }
    }
}

/// Checks every recorded work: it had a deadline, and ended by it (within
/// `MARGIN`); returns the latest end relative to its deadline, in ms.
fn check_ends(ends: &Ends, expected: usize, what: &str) -> f64 {
    let ends = ends.lock().unwrap();
    assert_eq!(ends.len(), expected, "{what}: works ended: {ends:?}");
    let mut worst = f64::MIN;
    for (key, (deadline, ended)) in ends.iter() {
        let deadline = deadline.unwrap_or_else(|| panic!("{what}: {key} never read a deadline"));
        let late_ms = ended.as_secs_f64() * 1e3 - deadline.as_secs_f64() * 1e3;
        eprintln!("{what}: {key} ended {late_ms:+.2} ms after its deadline");
        assert!(
            *ended <= deadline + MARGIN,
            "{what}: {key} ended {late_ms:.1} ms after its deadline"
        );
        worst = worst.max(late_ms);
    }
    worst
}

/// Waits until `ended()` (the node no longer counts itself leader) and
/// checks that it happened by the latest work's deadline (within
/// `MARGIN`): the statement was cut, so the node's own loop was back to
/// end the term, not only the work that reads its deadline itself.
fn check_demoted(ends: &Ends, what: &str, mut ended: impl FnMut() -> bool) {
    wait_until(what, &mut ended);
    let at = boottime();
    let deadline = ends
        .lock()
        .unwrap()
        .values()
        .filter_map(|(deadline, _)| *deadline)
        .max()
        .expect("a deadline was read");
    let late_ms = at.as_secs_f64() * 1e3 - deadline.as_secs_f64() * 1e3;
    eprintln!("{what}: the node ended its term(s) {late_ms:+.2} ms after the deadline");
    assert!(
        at <= deadline + MARGIN,
        "{what}: the node ended its term {late_ms:.1} ms after the deadline: its statement was not cut"
    );
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < PATIENCE,
            "{what}: not after {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn single_lease(style: Style, obstacle: Obstacle) {
    let mut worst = f64::MIN;
    for round in 0..rounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        let ends = Ends::default();
        let recorded = Arc::clone(&ends);
        let lease = SqliteLease::builder(config("L"), Database::file(&path))
            .while_leader(move |ctx| work(style, "L".to_string(), &recorded, &ctx))
            .start()
            .unwrap();
        lease
            .wait_for(PATIENCE, |l| l.is_leader())
            .expect("a lone contender leads");
        let clear = obstruct(&path, obstacle);
        wait_until("the work ends", || !ends.lock().unwrap().is_empty());
        let what = format!("single lease, {style:?}, {obstacle:?}, round {round}");
        check_demoted(&ends, &what, || !lease.leadership().is_leader());
        worst = worst.max(check_ends(&ends, 1, &what));
        clear();
        lease
            .wait_for(PATIENCE, |l| l.is_leader())
            .expect("leads again once the obstacle is gone");
        lease.shutdown().unwrap();
    }
    eprintln!(
        "single lease, {style:?}, {obstacle:?}: worst {worst:+.2} ms over {} rounds",
        rounds()
    );
}

fn lease_set(style: Style, obstacle: Obstacle) {
    let mut worst = f64::MIN;
    let names: Vec<LeaseName> = ["s0", "s1", "s2"]
        .iter()
        .map(|n| LeaseName::new(n).unwrap())
        .collect();
    for round in 0..rounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        let ends = Ends::default();
        let recorded = Arc::clone(&ends);
        let set = SqliteLeaseSet::builder(
            config("s0").without_lease(),
            names.clone(),
            Database::file(&path),
        )
        .while_leader(move |ctx| {
            // One busy poller at most: the machine has two cores.
            let style = match (style, ctx.lease().as_str()) {
                (Style::Polls, "s0") => Style::Polls,
                _ => Style::Sleeps,
            };
            work(style, ctx.lease().to_string(), &recorded, &ctx);
        })
        .start()
        .unwrap();
        wait_until("the set holds its three leases", || {
            set.snapshot().held.len() == 3
        });
        let clear = obstruct(&path, obstacle);
        wait_until("every work ends", || ends.lock().unwrap().len() == 3);
        let what = format!("lease set, {style:?}, {obstacle:?}, round {round}");
        check_demoted(&ends, &what, || set.snapshot().held.is_empty());
        worst = worst.max(check_ends(&ends, 3, &what));
        clear();
        wait_until("the set leads again once the obstacle is gone", || {
            set.snapshot().held.len() == 3
        });
        set.shutdown().unwrap();
    }
    eprintln!(
        "lease set, {style:?}, {obstacle:?}: worst {worst:+.2} ms over {} rounds",
        rounds()
    );
}

#[test]
fn single_lease_work_that_polls_stops_by_the_deadline_under_a_write_lock() {
    single_lease(Style::Polls, Obstacle::WriteLock);
}

#[test]
fn single_lease_work_stops_by_the_deadline_when_a_statement_is_slow() {
    single_lease(Style::Sleeps, Obstacle::SlowStatement);
}

#[test]
fn set_work_that_sleeps_or_polls_stops_by_the_deadline_under_a_write_lock() {
    lease_set(Style::Polls, Obstacle::WriteLock);
}

#[test]
fn set_work_stops_by_the_deadline_when_a_batch_is_slow() {
    lease_set(Style::Sleeps, Obstacle::SlowStatement);
}
