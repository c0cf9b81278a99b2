//! A lease set's health on a real SQLite file: a live set's loop keeps
//! stepping (its `last_step` advances) and is never wedged, on the node
//! that holds the lease and on the one that holds nothing alike; the bound
//! is the single lease's for the same timings. (A wedged loop is shown by
//! the unit tests of `picolease::set` and the CLI's `cli_set_health`.)

use std::time::{Duration, Instant};

use picolease::set::SetSnapshot;
use picolease::sqlite::{Database, SqliteLease, SqliteLeaseSet};
use picolease::{Config, HolderId, LeaseName, SetConfig};

const PATIENCE: Duration = Duration::from_secs(10);

fn template(holder: &str) -> SetConfig {
    SetConfig::with_ttl(HolderId::new(holder).unwrap(), Duration::from_millis(1_000))
        .interval(Duration::from_millis(200))
}

fn start(path: &std::path::Path, holder: &str) -> SqliteLeaseSet {
    SqliteLeaseSet::builder(
        template(holder),
        vec![LeaseName::new("only").unwrap()],
        Database::file(path),
    )
    .start()
    .expect("start")
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_live_sets_loop_keeps_stepping_and_is_never_wedged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let a = start(&path, "a");
    wait_for("a holds the lease", || a.snapshot().held.len() == 1);
    let b = start(&path, "b");
    wait_for("b sees both members", || b.snapshot().members.len() == 2);

    // The single lease's bound for the same timings: interval 200 ms +
    // 2 × request timeout + the backoff cap.
    let config = Config::with_ttl(
        LeaseName::new("single").unwrap(),
        HolderId::new("c").unwrap(),
        Duration::from_millis(1_000),
    )
    .interval(Duration::from_millis(200));
    let single = SqliteLease::builder(config, Database::file(&path))
        .start()
        .unwrap();
    let stall_after = single.snapshots().snapshot().stall_after;
    drop(single);

    let views = [a.snapshots(), b.snapshots()];
    let mut last: Vec<Instant> = views
        .iter()
        .map(|v| v.snapshot().last_step.expect("a driver stamps it"))
        .collect();
    // Over five intervals and more: every look finds a fresh step, and
    // each node's last step moves on (the leader renews, the follower
    // surveys at the interval).
    let until = Instant::now() + Duration::from_millis(1_200);
    let mut advanced = [0usize; 2];
    while Instant::now() < until {
        for (i, view) in views.iter().enumerate() {
            let status: SetSnapshot = view.snapshot();
            assert_eq!(status.stall_after, stall_after);
            assert!(!status.is_wedged(), "{i}: {status:?}");
            assert!(status.since_progress() < stall_after, "{i}: {status:?}");
            let step = status.last_step.unwrap();
            assert!(step >= last[i]);
            if step > last[i] {
                advanced[i] += 1;
                last[i] = step;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(advanced.iter().all(|&n| n >= 3), "{advanced:?}");
    assert_eq!(a.snapshot().held.len(), 1, "a kept the lease");
    assert!(
        b.snapshot().held.is_empty(),
        "b holds nothing and is healthy"
    );

    // A finished set is stopped, not wedged.
    let view = b.snapshots();
    b.shutdown().unwrap();
    let status = view.snapshot();
    assert!(status.finished && !status.is_wedged(), "{status:?}");
    a.shutdown().unwrap();
}

/// A set's readings turn by each lease's deadline with its loop held (the
/// wedge seam): the set's and the lease view's `leadership`, the
/// snapshot's held leases (so `run --listen`'s `/leader`) and a blocking
/// `wait_for`, none of which waits for the loop to publish (DESIGN §4b).
/// The watch of held leases, the loop's word, still lists them.
#[test]
fn a_held_sets_readings_turn_by_the_deadline_while_its_loop_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let set = SqliteLeaseSet::builder(
        template("held"),
        vec![LeaseName::new("x").unwrap(), LeaseName::new("y").unwrap()],
        Database::file(&path),
    )
    .start()
    .expect("start");
    wait_for("both leases held", || set.snapshot().held.len() == 2);
    let x = LeaseName::new("x").unwrap();
    let snapshots = set.snapshots();
    snapshots.wedge_loop_for_tests();
    // The loop blocks at its next step; a deadline it published holds.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        set.leadership(&x).unwrap().is_leader(),
        "before the deadline"
    );
    let left = set.time_left(&x).expect("leading x");
    let until = set
        .lease_view(&x)
        .unwrap()
        .leader_until()
        .expect("leading x");
    let waited = Instant::now();
    let ended = set
        .wait_for(&x, Duration::from_secs(30), |l| !l.is_leader())
        .expect("wait_for wakes at the deadline");
    assert!(
        waited.elapsed() < left + Duration::from_millis(500),
        "woke {:?} after a deadline {left:?} away",
        waited.elapsed()
    );
    assert!(Instant::now() >= until, "not before the deadline");
    assert_eq!(ended.reason, Some(picolease::Demotion::Expired));
    // Past every lease's deadline (y's is within an interval of x's).
    std::thread::sleep(Duration::from_millis(300));
    for lease in ["x", "y"] {
        let lease = LeaseName::new(lease).unwrap();
        assert!(!set.leadership(&lease).unwrap().is_leader(), "{lease}");
        assert!(
            !snapshots.leadership(&lease).unwrap().is_leader(),
            "{lease}"
        );
        assert!(
            !set.lease_view(&lease).unwrap().snapshot().is_leader(),
            "{lease}"
        );
    }
    assert!(snapshots.snapshot().held.is_empty(), "no lease held");
    assert_eq!(set.watch().borrow().len(), 2, "the loop's last word");
    // The held loop never returns: leave its thread to the process's end.
    std::mem::forget(set);
}
