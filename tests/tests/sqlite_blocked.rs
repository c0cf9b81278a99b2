//! The deadline wins over a blocked SQLite statement (DESIGN §4b, issue 8):
//! while another process holds the database's write lock, the leader's
//! renewals wait in SQLite's busy handler; the driver cuts that wait (and
//! the watchdog) at the leader's deadline, so the node publishes follower
//! at its deadline rather than when the statement gives up.
//!
//! Real time: the bounds are generous and the figures are printed.
//!
//! `cargo test -p picolease-tests --test integration sqlite_blocked:: -- --nocapture`

use std::sync::mpsc;
use std::time::{Duration, Instant};

use picolease::sqlite::{Database, SqliteLease};
use picolease::{Config, Demotion, HolderId, Leadership, LeaseName};

/// How late the follower publication and the end of the work may be.
const MARGIN: Duration = Duration::from_millis(50);

#[test]
fn a_leader_blocked_by_another_writer_demotes_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    // The timings of the measurement before: ttl 2 s, interval 600 ms
    // (busy timeout 450 ms). A renewal sent 180 ms before the deadline used
    // to wait its whole busy timeout: demoted 0.27 s late.
    let config = Config::with_ttl(
        LeaseName::new("blocked").unwrap(),
        HolderId::new("a").unwrap(),
        Duration::from_secs(2),
    )
    .interval(Duration::from_millis(600));
    // The work reports when it returned. The follower publication does not
    // wait for the work (the deadline wins over it), so the test waits for
    // this report rather than reading it when the publication arrives.
    let (ended, work_ended) = mpsc::channel::<Instant>();
    let builder = SqliteLease::builder(config, Database::file(&path)).while_leader(move |ctx| {
        while !ctx.sleep(Duration::from_millis(20)) {}
        let _ = ended.send(Instant::now());
    });
    let mut transitions = builder.subscribe();
    let a = builder.start().unwrap();
    a.wait_for(Duration::from_secs(5), Leadership::is_leader)
        .expect("becomes leader");

    // Another process takes the write lock and sits on it.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let locked_at = Instant::now();

    // The deadline as last published (it stops moving once renewals fail),
    // sampled until the follower publication arrives.
    let mut deadline = None;
    let demoted = loop {
        if let Some(left) = a.time_left() {
            if !left.is_zero() {
                deadline = Some(Instant::now() + left);
            }
        }
        match transitions.recv_timeout(Duration::from_millis(1)) {
            Ok(t) if !t.leadership.is_leader() && t.leadership.reason.is_some() => break t,
            Ok(_) => {}
            Err(picolease::RecvError::Timeout) => {}
            Err(e) => panic!("{e:?}"),
        }
        assert!(
            locked_at.elapsed() < Duration::from_secs(10),
            "still leading 10 s after the lock was taken"
        );
    };
    let deadline = deadline.expect("a deadline was published");
    assert_eq!(demoted.leadership.reason, Some(Demotion::Expired));
    let late = demoted.instant.saturating_duration_since(deadline);
    let early = deadline.saturating_duration_since(demoted.instant);
    eprintln!(
        "demoted {:+.1} ms after its deadline (before: +270 ms); lock taken {:.0} ms before the deadline",
        late.as_secs_f64() * 1e3 - early.as_secs_f64() * 1e3,
        deadline.saturating_duration_since(locked_at).as_secs_f64() * 1e3,
    );
    assert!(
        deadline > locked_at + Duration::from_millis(600),
        "the lock must be held past the next renew"
    );
    assert!(late <= MARGIN, "demoted {late:?} after its deadline");
    assert!(
        early < Duration::from_millis(5),
        "demoted {early:?} before its deadline"
    );

    // The gated work had stopped by the deadline.
    let stopped = work_ended
        .recv_timeout(Duration::from_secs(5))
        .expect("the work of the term ended");
    let work_late = stopped.saturating_duration_since(deadline);
    eprintln!(
        "gated work ended {:.1} ms after the deadline",
        work_late.as_secs_f64() * 1e3
    );
    assert!(
        work_late <= MARGIN,
        "work ended {work_late:?} after the deadline"
    );

    // The lock goes away: the node leads again.
    blocker.execute_batch("ROLLBACK").unwrap();
    let released_at = Instant::now();
    a.wait_for(Duration::from_secs(6), Leadership::is_leader)
        .expect("leads again once the lock is released");
    eprintln!(
        "led again {:.0} ms after the lock was released",
        released_at.elapsed().as_secs_f64() * 1e3
    );
    a.shutdown().unwrap();
}
