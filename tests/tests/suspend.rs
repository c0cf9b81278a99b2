//! A suspend, as the drivers' clock sees it: the suspend-aware clock jumps
//! past the leader's deadline. The gated work must stop at once, on its
//! own reading of the deadline (the lease thread is asleep), and the node
//! must demote with reason `expired` (DESIGN §4b).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use picolease::sqlite::{Database, SqliteLease};
use picolease::{boottime, Clock, Config, Demotion, HolderId, LeaseName, Role, SetConfig};

/// The system's clock plus a jump the test chooses.
#[derive(Clone, Default)]
struct JumpingClock {
    jumped_nanos: Arc<AtomicU64>,
}

impl JumpingClock {
    fn jump(&self, by: Duration) {
        self.jumped_nanos
            .fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for JumpingClock {
    fn now(&self) -> Duration {
        boottime() + Duration::from_nanos(self.jumped_nanos.load(Ordering::SeqCst))
    }
}

#[test]
fn a_jump_past_the_deadline_stops_the_work_before_the_lease_thread_wakes() {
    let dir = tempfile::tempdir().unwrap();
    let ttl = Duration::from_secs(10);
    let config = Config::with_ttl(
        LeaseName::new("job").unwrap(),
        HolderId::new("sleeper").unwrap(),
        ttl,
    );
    let clock = JumpingClock::default();
    let stopped_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let working = Arc::new(AtomicBool::new(false));
    let builder = SqliteLease::builder(config, Database::file(dir.path().join("l.db")))
        .clock(clock.clone())
        .while_leader({
            let stopped_at = Arc::clone(&stopped_at);
            let working = Arc::clone(&working);
            move |ctx| {
                working.store(true, Ordering::SeqCst);
                assert!(ctx.time_left() > Duration::ZERO);
                while !ctx.sleep(Duration::from_millis(5)) {}
                stopped_at.lock().unwrap().get_or_insert(Instant::now());
                working.store(false, Ordering::SeqCst);
            }
        });
    let mut transitions = builder.subscribe();
    let lease = builder.start().unwrap();
    lease
        .wait_for(Duration::from_secs(15), |l| l.is_leader())
        .expect("a lone contender leads");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !working.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the work never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(lease.time_left().is_some_and(|left| left > Duration::ZERO));

    // Right after a renewal, the lease thread sleeps for a second (its
    // longest wait; the next renew is 2.5 s away). The machine now sleeps
    // for two ttls.
    let renewals = lease.renew_latencies().len();
    while lease.renew_latencies().len() == renewals {
        assert!(Instant::now() < deadline, "no renewal");
        std::thread::sleep(Duration::from_millis(1));
    }
    let jumped_at = Instant::now();
    clock.jump(ttl * 2);
    let stop_deadline = Instant::now() + Duration::from_secs(15);
    let stopped = loop {
        if let Some(at) = *stopped_at.lock().unwrap() {
            break at;
        }
        assert!(Instant::now() < stop_deadline, "the work never stopped");
        std::thread::sleep(Duration::from_millis(1));
    };
    let reaction = stopped.saturating_duration_since(jumped_at);
    // The lease thread is still asleep: the work stopped long before it
    // woke, on its own reading of the clock.
    assert!(
        reaction < Duration::from_millis(500),
        "the work went on for {reaction:?} after the deadline"
    );

    // And the node demotes with `expired` before anything else.
    let demotion = loop {
        let t = transitions
            .recv_timeout(Duration::from_secs(15))
            .expect("transitions keep coming");
        if t.leadership.role == Role::Follower && t.leadership.reason.is_some() {
            break t.leadership.reason;
        }
    };
    assert_eq!(demotion, Some(Demotion::Expired));
    lease.shutdown().unwrap();
}

/// The same for a lease set: each held lease's work reads its own
/// deadline on the set's clock, so a jump past it stops every lease's work
/// while the set's thread sleeps, and every lease demotes with `expired`.
#[test]
fn a_jump_past_the_deadline_stops_every_lease_of_a_set() {
    use picolease::sqlite::SqliteLeaseSet;
    use picolease::Epoch;
    use std::collections::BTreeMap;

    let dir = tempfile::tempdir().unwrap();
    let ttl = Duration::from_secs(10);
    let template = SetConfig::with_ttl(HolderId::new("sleeper").unwrap(), ttl);
    let names: Vec<LeaseName> = ["a", "b"]
        .iter()
        .map(|n| LeaseName::new(n).unwrap())
        .collect();
    let clock = JumpingClock::default();
    /// Each term's work as it went: (lease, epoch) → when it stopped, if
    /// it has (later terms of the same lease get their own entries).
    type Works = Arc<std::sync::Mutex<BTreeMap<(String, Epoch), Option<Instant>>>>;
    let works: Works = Arc::default();
    let builder = SqliteLeaseSet::builder(
        template,
        names.clone(),
        Database::file(dir.path().join("l.db")),
    )
    .clock(clock.clone())
    .while_leader({
        let works = Arc::clone(&works);
        move |ctx| {
            assert!(ctx.time_left() > Duration::ZERO);
            let term = (ctx.lease().to_string(), ctx.epoch());
            works.lock().unwrap().insert(term.clone(), None);
            while !ctx.sleep(Duration::from_millis(5)) {}
            works.lock().unwrap().insert(term, Some(Instant::now()));
        }
    });
    let mut transitions = builder.subscribe();
    let set = builder.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while works.lock().unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "the works never both started");
        std::thread::sleep(Duration::from_millis(5));
    }
    for lease in &names {
        assert!(set.time_left(lease).is_some_and(|l| l > Duration::ZERO));
        assert!(set.fence(lease).is_some(), "a held lease has a fence");
    }
    // The watch of the held leases is sent once the step that started the
    // works is carried out, which may end after the works began.
    let mut watch = set.watch();
    let held = loop {
        let held = watch.borrow_and_update().clone();
        if held.len() == 2 {
            break held;
        }
        assert!(
            Instant::now() < deadline,
            "the watch never held both: {held:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };

    // Right after a batch the set's thread waits (at most a second); the
    // machine now sleeps for two ttls.
    let statements = set.snapshot().statements;
    while set.snapshot().statements == statements {
        assert!(Instant::now() < deadline, "no batch");
        std::thread::sleep(Duration::from_millis(1));
    }
    let jumped_at = Instant::now();
    clock.jump(ttl * 2);
    let stop_deadline = Instant::now() + Duration::from_secs(15);
    let stopped: Vec<Instant> = loop {
        let works = works.lock().unwrap();
        let seen: Vec<Instant> = held
            .iter()
            .filter_map(|(lease, epoch)| works.get(&(lease.to_string(), *epoch)).copied().flatten())
            .collect();
        if seen.len() == 2 {
            break seen;
        }
        assert!(
            Instant::now() < stop_deadline,
            "a work never stopped: {works:?}"
        );
        drop(works);
        std::thread::sleep(Duration::from_millis(1));
    };
    for at in stopped {
        let reaction = at.saturating_duration_since(jumped_at);
        assert!(
            reaction < Duration::from_millis(500),
            "a work went on for {reaction:?} after the deadline"
        );
    }

    // Every lease demotes with `expired`.
    let mut demoted = BTreeMap::new();
    while demoted.len() < 2 {
        let t = transitions
            .recv_timeout(Duration::from_secs(15))
            .expect("transitions keep coming");
        if t.leadership.role == Role::Follower && t.leadership.reason.is_some() {
            demoted
                .entry(t.lease.to_string())
                .or_insert(t.leadership.reason);
        }
    }
    assert!(
        demoted.values().all(|r| *r == Some(Demotion::Expired)),
        "{demoted:?}"
    );
    set.shutdown().unwrap();
}
