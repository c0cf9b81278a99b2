//! DESIGN §4b, clocks: on SQLite the database clock is the host's wall
//! clock. A test cannot step the machine's clock, so it steps the
//! database's: `julianday()` is overridden on the driver thread's own
//! connection (application functions take precedence over built-ins) to
//! read a minute ahead. The leader must demote with reason `clock` at its
//! next statement, then compete again and lead a new term.
//!
//! The same for a lease set (`SqliteLeaseSet::with_connection` reaches the
//! set thread's connection): one wall-clock reading after a batch stands
//! for every lease, so a step must demote EVERY held lease with `clock`
//! (not only the one whose renewal saw it, nor none because the set's
//! batches carry on renewing through the shifted clock), cancel each
//! lease's work before its term's deadline (the demotion ends the work,
//! not the lapse), and the set must then hold every lease again at a
//! higher epoch.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use picolease::sqlite::{Cancellation, Database, SqliteLease, SqliteLeaseSet};
use picolease::{boottime, Config, Demotion, Epoch, HolderId, LeaseName, Role, SetConfig};
use rusqlite::functions::FunctionFlags;

const TTL: Duration = Duration::from_millis(800);
const PATIENCE: Duration = Duration::from_secs(10);

/// `julianday('now')` shifted by `offset` milliseconds.
fn shifted_julianday(offset: &AtomicI64) -> f64 {
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
        + offset.load(Ordering::SeqCst) as f64;
    unix_ms / 86_400_000.0 + 2_440_587.5
}

/// Installs the override of `julianday()` reading `offset` on `conn`.
fn install_shifted_julianday(
    conn: &rusqlite::Connection,
    offset: Arc<AtomicI64>,
) -> rusqlite::Result<()> {
    let installed =
        conn.create_scalar_function("julianday", 1, FunctionFlags::SQLITE_UTF8, move |_ctx| {
            Ok(shifted_julianday(&offset))
        });
    // Statements prepared earlier keep the built-in function.
    conn.flush_prepared_statement_cache();
    installed
}

#[test]
fn a_stepped_wall_clock_demotes_the_sqlite_leader_with_clock() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::with_ttl(
        LeaseName::new("stepped").unwrap(),
        HolderId::new("a").unwrap(),
        TTL,
    );
    let lease = SqliteLease::builder(config, Database::file(dir.path().join("leases.db")))
        .start()
        .unwrap();
    let mut changes = lease.subscribe();
    let first = lease
        .wait_for(PATIENCE, |l| l.is_leader())
        .expect("a lone contender leads");

    // An unshifted override first: the clock it reads is the real one, so
    // nothing may happen for a few renewals.
    let offset = Arc::new(AtomicI64::new(0));
    let installed = lease
        .with_connection({
            let offset = Arc::clone(&offset);
            move |conn| install_shifted_julianday(conn, offset)
        })
        .expect("the lease thread runs");
    installed.unwrap();
    std::thread::sleep(TTL);
    assert_eq!(
        lease.leadership().epoch,
        first.epoch,
        "no demotion without a step"
    );

    offset.store(60_000, Ordering::SeqCst);
    let demoted = loop {
        let t = changes.recv_timeout(PATIENCE).expect("a transition");
        if let Some(reason) = t.leadership.reason {
            break reason;
        }
    };
    assert_eq!(demoted, Demotion::Clock);
    // It competes again at once and leads a new term (the row is its own).
    let again = lease
        .wait_for(PATIENCE, |l| l.role == Role::Leader)
        .expect("leads again");
    assert!(again.epoch > first.epoch, "{again:?}");
    lease.shutdown().unwrap();
}

/// One term's work of a set, as it went.
struct Term {
    /// The term's cancellation (set by the gate when the set stops the
    /// work, not by the deadline passing).
    cancellation: Cancellation,
    /// The last deadline the work read (boot-time clock).
    deadline: Option<Duration>,
    /// When it returned (boot-time clock).
    ended: Option<Duration>,
}

type Terms = Arc<Mutex<BTreeMap<(LeaseName, Epoch), Term>>>;

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

#[test]
fn a_stepped_wall_clock_demotes_every_lease_of_a_sqlite_set_with_clock() {
    let dir = tempfile::tempdir().unwrap();
    // ttl 2 s: a term has more than a second left when the step is seen
    // (at most an interval, 500 ms, after it), so a work that ends only
    // at its deadline is told apart from one the demotion stopped.
    let ttl = Duration::from_secs(2);
    let template = SetConfig::with_ttl(HolderId::new("a").unwrap(), ttl);
    let names: Vec<LeaseName> = ["s0", "s1", "s2"]
        .iter()
        .map(|n| LeaseName::new(n).unwrap())
        .collect();
    let terms: Terms = Arc::default();
    let builder = SqliteLeaseSet::builder(
        template,
        names.clone(),
        Database::file(dir.path().join("leases.db")),
    )
    .while_leader({
        let terms = Arc::clone(&terms);
        move |ctx| {
            let key = (ctx.lease().clone(), ctx.epoch());
            let mut deadline = ctx.deadline();
            terms.lock().unwrap().insert(
                key.clone(),
                Term {
                    cancellation: ctx.cancellation().clone(),
                    deadline,
                    ended: None,
                },
            );
            while !ctx.sleep(Duration::from_millis(5)) {
                deadline = ctx.deadline().or(deadline);
            }
            let mut terms = terms.lock().unwrap();
            let term = terms.get_mut(&key).expect("recorded at the start");
            term.deadline = deadline;
            term.ended = Some(boottime());
        }
    });
    let mut transitions = builder.subscribe();
    let set = builder.start().unwrap();
    wait_until("the set holds its three leases", || {
        set.snapshot().held.len() == 3
    });
    let held = set.snapshot().held;
    wait_until("every held lease's work runs", || {
        let terms = terms.lock().unwrap();
        held.iter()
            .all(|(lease, epoch)| terms.contains_key(&(lease.clone(), *epoch)))
    });

    // An unshifted override first: the clock it reads is the real one, so
    // a few batches (each followed by a clock reading) change nothing.
    let offset = Arc::new(AtomicI64::new(0));
    let installed = set
        .with_connection({
            let offset = Arc::clone(&offset);
            move |conn| install_shifted_julianday(conn, offset)
        })
        .expect("the set thread runs");
    installed.unwrap();
    let statements = set.snapshot().statements;
    wait_until("three more batches", || {
        set.snapshot().statements >= statements + 3
    });
    assert_eq!(set.snapshot().held, held, "no demotion without a step");
    while let Ok(t) = transitions.try_recv() {
        assert_eq!(
            t.leadership.reason, None,
            "no demotion without a step: {t:?}"
        );
    }

    offset.store(60_000, Ordering::SeqCst);
    // Every held lease demotes, each with `clock` as its first reason.
    let mut demoted: BTreeMap<LeaseName, (Option<Epoch>, Demotion)> = BTreeMap::new();
    while demoted.len() < held.len() {
        let t = transitions
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|e| panic!("a demotion of each lease (got {demoted:?}): {e:?}"));
        if let Some(reason) = t.leadership.reason {
            demoted
                .entry(t.lease.clone())
                .or_insert((t.leadership.epoch, reason));
        }
    }
    for (lease, epoch) in &held {
        assert_eq!(
            demoted.get(lease),
            Some(&(Some(*epoch), Demotion::Clock)),
            "{lease}: {demoted:?}"
        );
    }

    // Each demoted term's work was cancelled by the set, and ended before
    // its deadline: the demotion stopped it, not the lapse.
    wait_until("every demoted term's work ends", || {
        let terms = terms.lock().unwrap();
        held.iter().all(|(lease, epoch)| {
            terms
                .get(&(lease.clone(), *epoch))
                .is_some_and(|t| t.ended.is_some())
        })
    });
    {
        let terms = terms.lock().unwrap();
        for (lease, epoch) in &held {
            let term = &terms[&(lease.clone(), *epoch)];
            assert!(
                term.cancellation.is_cancelled(),
                "{lease} epoch {epoch}: the set never cancelled its work"
            );
            let (ended, deadline) = (term.ended.unwrap(), term.deadline.unwrap());
            assert!(
                ended < deadline,
                "{lease} epoch {epoch}: the work ran to its deadline ({:.1} ms after it)",
                (ended.as_secs_f64() - deadline.as_secs_f64()) * 1e3
            );
        }
    }

    // It competes again at once and leads every lease in a new term (the
    // rows are its own).
    wait_until("the set holds every lease again at a higher epoch", || {
        let now = set.snapshot().held;
        held.iter()
            .all(|(lease, epoch)| now.get(lease).is_some_and(|e| e > epoch))
    });
    set.shutdown().unwrap();
}
