//! One driver conformance suite, written once and run for every database
//! (`conformance_sqlite.rs`, `conformance_postgres.rs`).
//!
//! The cases are generic functions over two small traits, in blocking
//! form, so each case is plain sequential code:
//!
//! - [`Backend`]: one database set aside for one test (SQLite: a file in a
//!   temporary directory of its own; PostgreSQL: tables with names unique
//!   to the test, dropped afterwards) and its administration: start a
//!   contender, read the lease rows, force a release, create malformed or
//!   foreign tables, snapshot what the test owns, fenced writes.
//! - [`Contender`]: one running lease, whatever its driver: leadership,
//!   watch, subscriptions, fence, renew latencies, gated work, shutdown,
//!   abort. The PostgreSQL implementation owns a handle to the backend's
//!   multi-thread tokio runtime and blocks on the async driver.
//!
//! Gated work is given as a [`Work`]: a `started` hook run when a term's
//! work starts, and a blocking `stopping` hook run after the term's
//! cancellation was observed (through the driver's own mechanism:
//! `ctx.cancellation().wait()` on SQLite, `ctx.cancelled().await` on
//! PostgreSQL, the hook then on a blocking thread).
//!
//! The cases, numbered as in the old per-driver suites (1–8), plus what
//! only one of them used to check and applies to both (9–11):
//!
//! 1. a single contender leads at epoch 1 on a fresh database, table
//!    created, watch and subscription agree, renewals are measured, and
//!    shutdown releases;
//! 2. of N contenders exactly one leads, the others see its holder and
//!    epoch;
//! 3. a clean shutdown hands over to a successor with a higher epoch;
//! 4. an abandoned (crashed) leader is replaced after its ttl, not before;
//! 5. an administrator's forced release demotes the leader with `lost`;
//! 6. gated work runs only while leader with the term's epoch, is cancelled
//!    on demotion, joined before the next term, stopped before the release;
//! 7. a fenced write succeeds at the current epoch and is refused after a
//!    takeover;
//! 8. malformed rows (NULL or negative epoch) are typed errors; the driver
//!    and a forced release leave them untouched;
//! 9. a missing table with auto-create off is a typed error, nothing is
//!    created; `init` (twice) creates it;
//! 10. bad table names and impossible timings are refused before anything
//!     is written;
//! 11. work added to a running leader starts at once in the current term
//!     and is stopped on shutdown.
//!
//! What applies to one database only stays beside its driver, in its test
//! file (SQLite: locked database, drop without shutdown, missing file,
//! directories and foreign files, `with_connection`; PostgreSQL: wrong
//! column types, URLs and logins, dropping the handle and the runtime).
//!
//! `conformance_tests!` expands to one `#[test]` per case for a backend;
//! `conformance_tests!(set: Backend)` runs every case again over lease sets
//! of 1 and of 3 leases on the same database (`set.rs`: one lease of a
//! set must behave as a lone lease).

pub mod set;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use picolease::sql::LeaseRow;
use picolease::{
    Config, ConfigError, Demotion, Epoch, HolderId, Leadership, LeaseName, RecvError, Role,
    RowError, Subscription, TableName, Transition,
};
use tokio::sync::watch;

/// Generous: the machine running the tests may be loaded (2 cores).
pub const PATIENCE: Duration = Duration::from_secs(15);

/// The lease every shared case competes for.
pub const LEASE: &str = "job";

/// The lease name of the shared cases.
pub fn lease_name() -> LeaseName {
    LeaseName::new(LEASE).expect("a valid lease name")
}

/// A holder id from a literal.
pub fn holder(id: &str) -> HolderId {
    HolderId::new(id).expect("a valid holder id")
}

/// What a backend reports as an error, sorted into what the cases compare.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultKind {
    /// The configuration was refused.
    Config(ConfigError),
    /// The lease table is missing (and may not be created).
    MissingTable {
        /// The table, as the driver names it.
        table: String,
    },
    /// A lease row is malformed.
    Row {
        /// The table, as the driver names it.
        table: String,
        /// What is wrong with the row.
        source: RowError,
    },
    /// Anything else.
    Other,
}

/// A driver's error: its kind and its message.
#[derive(Clone, Debug)]
pub struct Fault {
    /// What the cases compare (boxed: errors stay small).
    pub kind: Box<FaultKind>,
    /// The driver's message (`Display`).
    pub message: String,
}

/// What gated work is told about its term, read from the driver's own
/// `LeaderContext`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkTerm {
    /// `ctx.lease()`.
    pub lease: LeaseName,
    /// `ctx.holder()`.
    pub holder: HolderId,
    /// `ctx.epoch()`.
    pub epoch: Epoch,
    /// `ctx.fence().epoch()`.
    pub fence_epoch: Epoch,
    /// `ctx.is_cancelled()` when the hook runs.
    pub cancelled: bool,
}

/// A hook of gated work.
pub type Hook = Arc<dyn Fn(&WorkTerm) + Send + Sync>;

/// Gated work, in the form both drivers can run.
#[derive(Clone)]
pub struct Work {
    /// Runs when the term's work starts; must not block (on PostgreSQL it
    /// runs on the driver's runtime).
    pub started: Hook,
    /// Runs once the work has seen its cancellation; may block (sleep,
    /// read the table).
    pub stopping: Hook,
}

/// How a contender is started.
#[derive(Clone)]
pub struct Options {
    /// Create the table when missing.
    pub auto_create: bool,
    /// Gated work registered on the builder.
    pub work: Vec<Work>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            auto_create: true,
            work: Vec::new(),
        }
    }
}

/// Reads the lease rows from any thread (gated work uses it).
pub type StatusReader = Arc<dyn Fn() -> Vec<LeaseRow> + Send + Sync>;

/// One running contender, driven from blocking code.
pub trait Contender: Sized {
    /// The driver's fence.
    type Fence: Clone;

    /// This contender's holder id.
    fn holder(&self) -> &HolderId;
    /// `leadership()`.
    fn leadership(&self) -> Leadership;
    /// `watch()`.
    fn watch(&self) -> watch::Receiver<Leadership>;
    /// `subscribe()` on the running handle.
    fn subscribe(&self) -> Subscription;
    /// The subscription taken on the builder before `start()` (once).
    fn take_start_subscription(&mut self) -> Subscription;
    /// Blocks until the leadership satisfies `done`; `None` on timeout or
    /// when the driver stopped.
    fn wait_for(
        &self,
        timeout: Duration,
        done: impl FnMut(&Leadership) -> bool,
    ) -> Option<Leadership>;
    /// Whether this contender has seen `term` (a leader's holder and
    /// epoch), which a lone lease's follower reads off the row. (A set's
    /// node whose share is full reads no row of the leases it does not
    /// compete for: it has seen the term once it has planned its share
    /// with that leader among the live members; see `set.rs`.)
    fn has_seen(&self, term: &Leadership) -> bool {
        let now = self.leadership();
        now.holder == term.holder && now.epoch == term.epoch
    }
    /// `fence()`.
    fn fence(&self) -> Option<Self::Fence>;
    /// The epoch a fence holds for.
    fn fence_epoch(fence: &Self::Fence) -> Epoch;
    /// `renew_latencies()`.
    fn renew_latencies(&self) -> Vec<Duration>;
    /// `while_leader(..)` on the running handle.
    fn add_work(&self, work: Work);
    /// `is_finished()`.
    fn is_finished(&self) -> bool;
    /// `shutdown()`, waited for.
    fn shutdown(self) -> Result<(), Fault>;
    /// `abort()`: stops without releasing, like a crash.
    fn abort(self);
    /// For a driver that stopped by itself: the error it stopped with,
    /// checking that the driver reports it once and only once.
    fn into_fatal(self) -> Fault;

    /// Waits until the driver has stopped: its subscriptions close and
    /// `is_finished()` says so. (The publisher closes the subscriptions a
    /// moment before it marks itself finished, so the second is waited
    /// for too.)
    fn wait_finished(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut changes = self.subscribe();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match changes.recv_timeout(left) {
                Err(RecvError::Closed) => break,
                Err(RecvError::Timeout) => return self.is_finished(),
                _ => {}
            }
        }
        while !self.is_finished() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

/// One database set aside for one test, and its administration.
pub trait Backend: Sized {
    /// A running contender on this database.
    type Lease: Contender;
    /// The ttl of the shared cases on this database.
    const TTL: Duration;
    /// How much earlier than `ttl − interval` after a crash a takeover may
    /// be measured (the test's own scheduling).
    const CRASH_EARLY: Duration;
    /// How much later than the ttl after a crash a takeover must happen.
    const CRASH_LATE: Duration;
    /// How much later than the ttl after a clean shutdown began the
    /// successor must lead.
    const HANDOVER_LATE: Duration;
    /// Whether `start()` itself checks the table (SQLite) or the driver
    /// finds out on its first statement (PostgreSQL).
    const CHECKS_TABLE_AT_START: bool;
    /// Whether reading the status of a missing table is an error
    /// (PostgreSQL) or no leases (SQLite).
    const MISSING_TABLE_STATUS_IS_ERROR: bool;

    /// A database of this test's own; `test` names it.
    fn fresh(test: &str) -> Self;
    /// The lease table as the driver names it in errors.
    fn table_name(&self) -> String;
    /// The configuration of `holder` on [`LEASE`] with [`Backend::TTL`].
    fn config(&self, holder: &str) -> Config;
    /// Starts a contender.
    fn start_with(&self, config: Config, options: Options) -> Result<Self::Lease, Fault>;
    /// Every lease row.
    fn status(&self) -> Result<Vec<LeaseRow>, Fault>;
    /// [`Backend::status`] for other threads (panics on error).
    fn status_reader(&self) -> StatusReader;
    /// The administrator's forced release of `lease`.
    fn force_release(&self, lease: &str) -> Result<Option<Epoch>, Fault>;
    /// Creates the lease table (`init`).
    fn init(&self) -> Result<(), Fault>;
    /// True if the lease table exists.
    fn table_exists(&self) -> bool;
    /// True if nothing of this test exists in the database yet (SQLite: no
    /// file; PostgreSQL: none of the test's tables).
    fn untouched(&self) -> bool;
    /// Creates the lease table without constraints, holding the row
    /// `(LEASE, 'someone', <epoch_sql>, 0)`.
    fn create_malformed(&self, epoch_sql: &str);
    /// `(holder, epoch, expires_at)` of [`LEASE`]'s row, read raw.
    fn raw_row(&self) -> (Option<String>, Option<i64>, Option<i64>);
    /// Creates another table of the application's, with a row.
    fn create_other_table(&self);
    /// Every table of this test and its rows, as text.
    fn snapshot(&self) -> Vec<String>;
    /// Creates the application's `jobs` table with jobs 1 and 2 undone.
    fn create_jobs(&self);
    /// Marks job `id` done by `by` at `epoch`, fenced by `fence`; returns
    /// the number of rows changed.
    fn fenced_write(
        &self,
        fence: &<Self::Lease as Contender>::Fence,
        id: i64,
        by: &str,
        epoch: Epoch,
    ) -> u64;
    /// Every job: `(id, done_by, done_at_epoch)`, by id.
    fn jobs(&self) -> Vec<(i64, Option<String>, Option<i64>)>;

    /// Starts `holder` with default options.
    fn start(&self, holder: &str) -> Self::Lease {
        match self.start_with(self.config(holder), Options::default()) {
            Ok(lease) => lease,
            Err(fault) => panic!("the driver starts: {fault:?}"),
        }
    }
}

/// Waits until `lease` has seen `term` ([`Contender::has_seen`]).
pub fn wait_seen<C: Contender>(lease: &C, term: &Leadership, what: &str) {
    wait_until(what, || lease.has_seen(term));
}

/// Waits on `lease` until it leads.
pub fn leader_of<C: Contender>(lease: &C) -> Leadership {
    lease
        .wait_for(PATIENCE, Leadership::is_leader)
        .unwrap_or_else(|| panic!("becomes leader; last state {:?}", lease.leadership()))
}

/// Waits on a subscription for a transition matching `pred`.
pub fn wait_transition(rx: &mut Subscription, pred: impl Fn(&Leadership) -> bool) -> Transition {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let t = rx
            .recv_timeout(left)
            .expect("the expected transition comes");
        if pred(&t.leadership) {
            return t;
        }
    }
}

/// Polls `done` until true, or panics after [`PATIENCE`] naming `what`.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The row of [`LEASE`] in `rows`.
fn lease_row(rows: &[LeaseRow]) -> &LeaseRow {
    rows.iter()
        .find(|r| r.name == LEASE)
        .unwrap_or_else(|| panic!("no row for {LEASE:?} in {rows:?}"))
}

/// The start of a contender that must fail: from `start()` itself or from
/// the driver stopping by itself (see [`Backend::CHECKS_TABLE_AT_START`]).
fn failed_start<C: Contender>(outcome: Result<C, Fault>) -> Fault {
    match outcome {
        Err(fault) => fault,
        Ok(lease) => {
            assert!(
                lease.wait_finished(PATIENCE),
                "the driver stops by itself; last state {:?}",
                lease.leadership()
            );
            assert!(lease.is_finished());
            assert!(!lease.leadership().is_leader());
            lease.into_fatal()
        }
    }
}

/// (1) A single contender on a fresh database leads at epoch 1; the table
/// is created; watch, leadership and the builder's subscription agree;
/// renewals are measured; shutdown releases.
pub fn case_1_a_single_contender_leads_at_epoch_1_on_a_fresh_database<B: Backend>() {
    let db = B::fresh("single");
    assert!(db.untouched(), "a fresh database");
    assert!(!db.table_exists());
    let mut a = db.start("a");
    let mut from_start = a.take_start_subscription();
    let leading = leader_of(&a);
    assert_eq!(leading.epoch, Some(Epoch::new(1)));
    assert_eq!(leading.holder, Some(holder("a")));
    assert_eq!(
        *a.watch().borrow(),
        leading,
        "the watch channel carries the same state"
    );
    assert_eq!(a.leadership(), leading);
    let first = wait_transition(&mut from_start, Leadership::is_leader);
    assert_eq!(
        first.leadership, leading,
        "the builder's subscription saw the term"
    );
    assert!(db.table_exists(), "the table was created");
    let rows = db.status().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].holder.as_deref(), Some("a"));
    assert_eq!(rows[0].epoch, Epoch::new(1));
    // Renewals are timed, each well within the ttl.
    wait_until("a renewal is measured", || !a.renew_latencies().is_empty());
    for latency in a.renew_latencies() {
        assert!(latency < B::TTL, "renew took {latency:?}");
    }
    a.shutdown().unwrap();
    let rows = db.status().unwrap();
    assert_eq!(rows[0].holder, None, "shutdown releases the lease");
}

/// (2) Of N contenders exactly one leads (never two at once); the others
/// see its holder id and epoch.
pub fn case_2_exactly_one_of_n_contenders_leads_and_the_others_see_it<B: Backend>() {
    let db = B::fresh("n");
    let leases: Vec<B::Lease> = ["a", "b", "c", "d"].iter().map(|h| db.start(h)).collect();
    let deadline = Instant::now() + PATIENCE;
    let leader = loop {
        let views: Vec<Leadership> = leases.iter().map(|l| l.watch().borrow().clone()).collect();
        let leaders: Vec<&Leadership> = views.iter().filter(|v| v.is_leader()).collect();
        assert!(leaders.len() <= 1, "two leaders at once: {views:?}");
        if let [leader] = leaders.as_slice() {
            let agreed = leases.iter().all(|l| l.has_seen(leader));
            if agreed {
                break (*leader).clone();
            }
        }
        assert!(Instant::now() < deadline, "no agreement: {views:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(leader.epoch, Some(Epoch::new(1)));
    let leader_id = leader.holder.clone().expect("a leader names itself");
    for lease in &leases {
        wait_seen(
            lease,
            &leader,
            "every contender learns the holder and epoch",
        );
        assert_eq!(lease.leadership().is_leader(), lease.holder() == &leader_id);
    }
    for _ in 0..5 {
        let leaders = leases.iter().filter(|l| l.leadership().is_leader()).count();
        assert_eq!(leaders, 1);
        std::thread::sleep(B::TTL / 4);
    }
    let rows = db.status().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].holder.as_deref(), Some(leader_id.as_str()));
    for lease in leases {
        lease.shutdown().unwrap();
    }
}

/// (3) After a clean shutdown a successor leads at a higher epoch, soon.
pub fn case_3_a_clean_shutdown_hands_over_with_a_higher_epoch<B: Backend>() {
    let db = B::fresh("clean");
    let a = db.start("a");
    let first = leader_of(&a);
    let b = db.start("b");
    wait_seen(&b, &first, "b sees a's term");
    let (a, b) = leader_first(a, b);
    let first = a.leadership();
    let released_at = Instant::now();
    a.shutdown().unwrap();
    let second = leader_of(&b);
    let took = released_at.elapsed();
    assert!(second.epoch > first.epoch, "{second:?} after {first:?}");
    assert_eq!(second.holder.as_ref(), Some(b.holder()));
    assert!(took < B::TTL + B::HANDOVER_LATE, "{took:?}");
    b.shutdown().unwrap();
}

/// The contender leading [`LEASE`] now, then the other. A lone lease's
/// follower never takes over from a live leader; a set may have moved the
/// lease to the newcomer's share by the time it has seen the leader.
fn leader_first<C: Contender>(a: C, b: C) -> (C, C) {
    let (a, b) = if b.leadership().is_leader() {
        (b, a)
    } else {
        (a, b)
    };
    assert!(a.leadership().is_leader(), "one of the two leads");
    (a, b)
}

/// (4) A holder that crashes (no release) is replaced once its ttl lapses,
/// not before.
pub fn case_4_an_abandoned_leader_is_replaced_after_the_ttl<B: Backend>() {
    let db = B::fresh("crash");
    let a = db.start("a");
    let first = leader_of(&a);
    let b = db.start("b");
    wait_seen(&b, &first, "b sees a's term");
    let (a, b) = leader_first(a, b);
    let first = a.leadership();
    let crashed_at = Instant::now();
    a.abort();
    let second = leader_of(&b);
    let gap = crashed_at.elapsed();
    assert!(second.epoch > first.epoch);
    // No release: the row must lapse first (renewed at most an interval
    // before the crash).
    assert!(
        gap >= B::TTL - B::TTL / 4 - B::CRASH_EARLY,
        "took over too early: {gap:?}"
    );
    assert!(gap < B::TTL + B::CRASH_LATE, "took over too late: {gap:?}");
    b.shutdown().unwrap();
}

/// (5) An administrator's forced release bumps the epoch and makes the
/// leader demote itself with reason `lost`; the free row is then won
/// again at a later epoch. An unknown lease is `None`.
pub fn case_5_a_forced_release_demotes_the_leader_with_reason_lost<B: Backend>() {
    let db = B::fresh("force");
    let mut a = db.start("a");
    let mut transitions = a.take_start_subscription();
    let first = leader_of(&a);
    assert_eq!(first.epoch, Some(Epoch::new(1)));
    let bumped = db.force_release(LEASE).unwrap();
    assert_eq!(bumped, Some(Epoch::new(2)));
    assert!(bumped > first.epoch);
    let lost = wait_transition(&mut transitions, |l| !l.is_leader() && l.reason.is_some());
    assert_eq!(lost.leadership.role, Role::Follower);
    assert_eq!(lost.leadership.reason, Some(Demotion::Lost));
    assert_eq!(lost.leadership.epoch, first.epoch);
    // The row is free, so it competes again and wins a later term.
    let again = wait_transition(&mut transitions, Leadership::is_leader);
    assert!(again.leadership.epoch > Some(Epoch::new(2)));
    assert_eq!(db.force_release("nope").unwrap(), None);
    a.shutdown().unwrap();
}

/// What the gated work of case 6 records.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Gated {
    Started {
        task: u8,
        epoch: u64,
    },
    /// Stopped, with the lease row as it was then.
    Stopped {
        task: u8,
        epoch: u64,
        /// The row was still ours at this epoch.
        row_ours: bool,
        row_holder: Option<String>,
        cancelled: bool,
    },
}

/// (6) Gated work (two closures) runs only while leading, with the term's
/// epoch, holder and fence; it is cancelled on demotion and joined before
/// the next term starts; on shutdown it is stopped before the lease is
/// released.
pub fn case_6_gated_work_runs_only_while_leader_and_stops_before_the_release<B: Backend>() {
    let db = B::fresh("gated");
    let events: Arc<Mutex<Vec<(Instant, Gated)>>> = Arc::default();
    // Epoch -> closures of that term running now.
    let running: Arc<Mutex<BTreeMap<u64, u32>>> = Arc::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let reader = db.status_reader();
    let work = |task: u8| {
        let started = {
            let (events, running, violations) =
                (events.clone(), running.clone(), violations.clone());
            Arc::new(move |t: &WorkTerm| {
                let epoch = t.epoch.get();
                {
                    let mut running = running.lock().unwrap();
                    *running.entry(epoch).or_default() += 1;
                    if running.len() > 1 {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("two terms' work at once: {running:?}"));
                    }
                }
                if t.lease != lease_name()
                    || t.holder != holder("a")
                    || t.fence_epoch != t.epoch
                    || t.cancelled
                {
                    violations
                        .lock()
                        .unwrap()
                        .push(format!("task {task} started with {t:?}"));
                }
                let mut events = events.lock().unwrap();
                events.push((Instant::now(), Gated::Started { task, epoch }));
            }) as Hook
        };
        let stopping = {
            let (events, running, reader) = (events.clone(), running.clone(), reader.clone());
            Arc::new(move |t: &WorkTerm| {
                // Slow to stop: the driver must wait for us before
                // releasing, and before the next term.
                std::thread::sleep(Duration::from_millis(150));
                let rows = reader();
                let row = lease_row(&rows);
                let row_ours =
                    row.holder.as_deref() == Some(t.holder.as_str()) && row.epoch == t.epoch;
                let stopped = Gated::Stopped {
                    task,
                    epoch: t.epoch.get(),
                    row_ours,
                    row_holder: row.holder.clone(),
                    cancelled: t.cancelled,
                };
                {
                    let mut running = running.lock().unwrap();
                    let n = running.entry(t.epoch.get()).or_default();
                    *n -= 1;
                    if *n == 0 {
                        running.remove(&t.epoch.get());
                    }
                }
                events.lock().unwrap().push((Instant::now(), stopped));
            }) as Hook
        };
        Work { started, stopping }
    };
    let options = Options {
        work: vec![work(1), work(2)],
        ..Options::default()
    };
    let mut a = match db.start_with(db.config("a"), options) {
        Ok(lease) => lease,
        Err(fault) => panic!("the driver starts: {fault:?}"),
    };
    let mut transitions = a.take_start_subscription();
    let first = leader_of(&a);
    let e1 = first.epoch.unwrap().get();
    let starts_at = |epoch: u64| {
        events
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, e)| matches!(e, Gated::Started { epoch: x, .. } if *x == epoch))
            .count()
    };
    wait_until("the first term's work starts", || starts_at(e1) == 2);
    // Demotion by an administrator: the work is cancelled; the next term's
    // work starts only after it has finished.
    db.force_release(LEASE).unwrap();
    let lost = wait_transition(&mut transitions, |l| l.reason == Some(Demotion::Lost));
    assert_eq!(lost.leadership.epoch, first.epoch);
    let second = wait_transition(&mut transitions, Leadership::is_leader).leadership;
    assert!(second.epoch > first.epoch);
    let e2 = second.epoch.unwrap().get();
    wait_until("the second term's work starts", || starts_at(e2) == 2);
    a.shutdown().unwrap();

    let violations = violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
    let mut events = events.lock().unwrap().clone();
    events.sort_by_key(|(at, _)| *at);
    for task in [1u8, 2] {
        let of_task: Vec<Gated> = events
            .iter()
            .map(|(_, e)| e.clone())
            .filter(|e| matches!(e, Gated::Started { task: t, .. } | Gated::Stopped { task: t, .. } if *t == task))
            .collect();
        assert_eq!(
            of_task,
            vec![
                Gated::Started { task, epoch: e1 },
                Gated::Stopped {
                    task,
                    epoch: e1,
                    row_ours: false,
                    row_holder: None,
                    cancelled: true
                },
                Gated::Started { task, epoch: e2 },
                Gated::Stopped {
                    task,
                    epoch: e2,
                    row_ours: true,
                    row_holder: Some("a".into()),
                    cancelled: true
                },
            ],
            "alternating; the first term was lost (row free, not ours), the last \
             stopped before its release; all events: {events:?}"
        );
    }
    let starts: Vec<&(Instant, Gated)> = events
        .iter()
        .filter(|(_, e)| matches!(e, Gated::Started { .. }))
        .collect();
    let ends: Vec<&(Instant, Gated)> = events
        .iter()
        .filter(|(_, e)| matches!(e, Gated::Stopped { .. }))
        .collect();
    assert_eq!(starts.len(), 4, "{events:?}");
    assert_eq!(ends.len(), 4, "{events:?}");
    for (_, e) in &starts[..2] {
        assert!(
            matches!(e, Gated::Started { epoch, .. } if *epoch == e1),
            "{events:?}"
        );
    }
    for (_, e) in &starts[2..] {
        assert!(
            matches!(e, Gated::Started { epoch, .. } if *epoch == e2),
            "{events:?}"
        );
    }
    // The second term started only after the first term's work ended.
    let first_ended = ends
        .iter()
        .filter(|(_, e)| matches!(e, Gated::Stopped { epoch, .. } if *epoch == e1))
        .map(|(t, _)| *t)
        .max()
        .unwrap();
    let second_started = starts[2..].iter().map(|(t, _)| *t).min().unwrap();
    assert!(first_ended <= second_started, "{events:?}");
    let rows = db.status().unwrap();
    assert_eq!(rows[0].holder, None, "released after the work stopped");
}

/// (7) A fenced write succeeds at the current epoch and is refused once a
/// successor took over (the ex-leader was "paused": it never learnt); the
/// successor's fenced writes go through.
pub fn case_7_a_fenced_write_is_refused_after_a_takeover<B: Backend>() {
    let db = B::fresh("fence");
    db.create_jobs();
    let a = db.start("a");
    let first = leader_of(&a).epoch.unwrap();
    let stale = a.fence().expect("a leads");
    assert_eq!(B::Lease::fence_epoch(&stale), first);
    assert_eq!(
        db.fenced_write(&stale, 1, "a", first),
        1,
        "the leader's write goes through"
    );
    // a's term is read before b starts: a set of leases may hand this
    // lease to b as soon as it sees b (its fair share shrinks), so a need
    // not lead it any more once b runs.
    let a_term = leader_of(&a);
    let b = db.start("b");
    wait_seen(&b, &a_term, "b sees a's term");
    // "Pause" a: it stops renewing without knowing; b takes over after the
    // ttl (or already holds the lease, handed over by a's share).
    a.abort();
    let second = leader_of(&b).epoch.unwrap();
    assert!(second > first);
    assert_eq!(
        db.fenced_write(&stale, 2, "a-late", first),
        0,
        "the old leader's write is refused"
    );
    assert_eq!(
        db.fenced_write(&stale, 1, "a-late", first),
        0,
        "the old leader cannot overwrite its own earlier write either"
    );
    let fresh = b.fence().expect("b leads");
    assert_eq!(B::Lease::fence_epoch(&fresh), second);
    assert_eq!(
        db.fenced_write(&fresh, 2, "b", second),
        1,
        "the new leader's write goes through"
    );
    let (e1, e2) = (first.get() as i64, second.get() as i64);
    assert_eq!(
        db.jobs(),
        vec![
            (1, Some("a".to_string()), Some(e1)),
            (2, Some("b".to_string()), Some(e2))
        ]
    );
    assert_eq!(db.fenced_write(&fresh, 1, "b", second), 1);
    assert_eq!(db.jobs()[0].1.as_deref(), Some("b"));
    b.shutdown().unwrap();
}

/// (8) A malformed row (NULL or negative epoch, in a table created without
/// constraints) stops the driver with a typed error naming the table, the
/// lease and the column; nothing is written, neither by the driver nor by
/// a forced release, which reports the same error.
pub fn case_8_malformed_rows_are_typed_errors_and_left_untouched<B: Backend>() {
    for (epoch_sql, epoch, expected, text) in [
        (
            "NULL",
            None,
            RowError::Null {
                lease: LEASE.into(),
                column: "epoch",
            },
            format!("lease \"{LEASE}\": column epoch is NULL"),
        ),
        (
            "-3",
            Some(-3),
            RowError::NegativeEpoch {
                lease: LEASE.into(),
                epoch: -3,
            },
            format!("lease \"{LEASE}\": epoch -3 is negative"),
        ),
    ] {
        let db = B::fresh("malformed");
        db.create_malformed(epoch_sql);
        let raw = (Some("someone".to_string()), epoch, Some(0));
        assert_eq!(db.raw_row(), raw);
        let before = db.snapshot();
        let lease = db.start("a");
        assert!(
            lease.wait_finished(PATIENCE),
            "a malformed row stops the driver"
        );
        assert!(lease.is_finished());
        assert!(!lease.leadership().is_leader());
        let fault = lease.into_fatal();
        assert_eq!(
            *fault.kind,
            FaultKind::Row {
                table: db.table_name(),
                source: expected.clone()
            },
            "{fault:?}"
        );
        assert!(fault.message.contains(&text), "{}", fault.message);
        assert_eq!(db.snapshot(), before, "nothing written");
        assert_eq!(db.raw_row(), raw);
        let status = db.status().unwrap_err();
        assert!(
            matches!(&*status.kind, FaultKind::Row { table, .. } if *table == db.table_name()),
            "{status:?}"
        );
        // A forced release, through the library, leaves the row as it is
        // (the statement itself refuses it) and names what is wrong.
        let fault = db.force_release(LEASE).unwrap_err();
        assert_eq!(
            *fault.kind,
            FaultKind::Row {
                table: db.table_name(),
                source: expected.clone()
            },
            "{fault:?}"
        );
        assert_eq!(db.snapshot(), before, "the forced release wrote nothing");
        assert_eq!(db.raw_row(), raw);
    }
}

/// (9) A missing table with auto-create off is a typed error naming the
/// table, and nothing is created; `init` creates it (idempotently).
pub fn case_9_a_missing_table_with_auto_create_off_is_a_typed_error<B: Backend>() {
    let db = B::fresh("missing");
    db.create_other_table();
    let before = db.snapshot();
    let outcome = db.start_with(
        db.config("a"),
        Options {
            auto_create: false,
            ..Options::default()
        },
    );
    assert_eq!(
        outcome.is_err(),
        B::CHECKS_TABLE_AT_START,
        "where the missing table is reported"
    );
    let fault = failed_start(outcome);
    assert_eq!(
        *fault.kind,
        FaultKind::MissingTable {
            table: db.table_name()
        },
        "{fault:?}"
    );
    assert!(
        fault.message.contains(db.table_name().trim_matches('"')),
        "{}",
        fault.message
    );
    assert_eq!(db.snapshot(), before, "nothing created");
    assert!(!db.table_exists());
    if B::MISSING_TABLE_STATUS_IS_ERROR {
        assert_eq!(
            *db.status().unwrap_err().kind,
            FaultKind::MissingTable {
                table: db.table_name()
            }
        );
    } else {
        assert_eq!(db.status().unwrap(), vec![]);
    }
    db.init().unwrap();
    db.init().unwrap();
    assert!(db.table_exists());
    assert_eq!(db.status().unwrap(), vec![]);
}

/// (10) Bad table names and impossible timings are refused before anything
/// is written.
pub fn case_10_bad_names_and_timings_are_refused_before_anything_is_written<B: Backend>() {
    for bad in ["x\"; DROP TABLE y; --", "a;b", "it's", ""] {
        assert!(
            matches!(TableName::new(bad), Err(ConfigError::BadTableName { .. })),
            "{bad:?}"
        );
    }
    let db = B::fresh("config");
    let mut c = db.config("a");
    c.ttl = Duration::ZERO;
    match db.start_with(c, Options::default()) {
        Err(fault) => assert!(
            matches!(
                *fault.kind,
                FaultKind::Config(ConfigError::TtlTooShort { .. })
            ),
            "{fault:?}"
        ),
        Ok(_) => panic!("a zero ttl is refused"),
    }
    let mut c = db.config("a");
    c.interval = c.ttl / 2;
    match db.start_with(c, Options::default()) {
        Err(fault) => {
            assert!(matches!(*fault.kind, FaultKind::Config(_)), "{fault:?}");
            assert!(fault.message.contains("interval"), "{}", fault.message);
        }
        Ok(_) => panic!("an interval of half the ttl is refused"),
    }
    assert!(db.untouched(), "nothing was created");
    assert!(!db.table_exists());
}

/// (11) Work registered on the running handle starts at once in the
/// current term, with that term's epoch, and is stopped on shutdown.
pub fn case_11_work_added_while_leading_starts_in_the_current_term<B: Backend>() {
    let db = B::fresh("addwork");
    let a = db.start("a");
    let leading = leader_of(&a);
    let epoch = leading.epoch.unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<(&'static str, WorkTerm)>();
    let tx = Arc::new(Mutex::new(tx));
    let (on_start, on_stop) = (tx.clone(), tx);
    a.add_work(Work {
        started: Arc::new(move |t: &WorkTerm| {
            let _ = on_start.lock().unwrap().send(("start", t.clone()));
        }),
        stopping: Arc::new(move |t: &WorkTerm| {
            let _ = on_stop.lock().unwrap().send(("stop", t.clone()));
        }),
    });
    let (what, started) = rx.recv_timeout(PATIENCE).expect("the work starts");
    assert_eq!((what, started.epoch), ("start", epoch));
    assert_eq!(started.fence_epoch, epoch);
    assert!(!started.cancelled);
    assert_eq!(a.leadership().leader_epoch(), Some(epoch), "same term");
    a.shutdown().unwrap();
    let (what, stopped) = rx.recv_timeout(PATIENCE).expect("the work stops");
    assert_eq!((what, stopped.epoch), ("stop", epoch));
    assert!(stopped.cancelled);
    let rows = db.status().unwrap();
    assert_eq!(rows[0].holder, None);
}

/// One `#[test]` per shared case for `$backend`, a type in scope where the
/// macro is called (`conformance` is `#[macro_use]` in `main.rs`).
macro_rules! conformance_tests {
    ($backend:ty) => {
        conformance_tests!(@all $backend);
    };
    (set: $backend:ident) => {
        mod set_of_1 {
            conformance_tests!(@all crate::conformance::set::AsSet<super::$backend, 1>);
        }
        mod set_of_3 {
            conformance_tests!(@all crate::conformance::set::AsSet<super::$backend, 3>);
        }
        #[test]
        fn a_set_lease_handed_over_goes_to_the_named_node() {
            crate::conformance::set::a_set_lease_handed_over_goes_to_the_named_node::<$backend>(
                stringify!($backend),
            );
        }
        #[test]
        fn a_preferred_member_is_handed_every_lease() {
            crate::conformance::set::a_preferred_member_is_handed_every_lease::<$backend>(
                stringify!($backend),
            );
        }
    };
    (@all $backend:ty) => {
        conformance_tests!(@cases $backend;
            case_1_a_single_contender_leads_at_epoch_1_on_a_fresh_database,
            case_2_exactly_one_of_n_contenders_leads_and_the_others_see_it,
            case_3_a_clean_shutdown_hands_over_with_a_higher_epoch,
            case_4_an_abandoned_leader_is_replaced_after_the_ttl,
            case_5_a_forced_release_demotes_the_leader_with_reason_lost,
            case_6_gated_work_runs_only_while_leader_and_stops_before_the_release,
            case_7_a_fenced_write_is_refused_after_a_takeover,
            case_8_malformed_rows_are_typed_errors_and_left_untouched,
            case_9_a_missing_table_with_auto_create_off_is_a_typed_error,
            case_10_bad_names_and_timings_are_refused_before_anything_is_written,
            case_11_work_added_while_leading_starts_in_the_current_term,
        );
    };
    (@cases $backend:ty; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                crate::conformance::$case::<$backend>();
            }
        )*
    };
}
