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
