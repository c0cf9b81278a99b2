//! A suspend, as the drivers' clock sees it: the suspend-aware clock jumps
//! past the leader's deadline. The gated work must stop at once, on its
//! own reading of the deadline (the lease thread is asleep), and the node
//! must demote with reason `expired` (DESIGN §4b).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use picolease::sqlite::{Database, SqliteLease};
use picolease::{boottime, Clock, Config, Demotion, HolderId, LeaseName, Role};

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
