//! `picolease run --listen ADDR` on SQLite, from outside: `/leader` is 200
//! on the leader and 503 on followers and flips at a handover, `/metrics`
//! shows `picolease_leader` 1 and 0 on the right processes and the renew
//! count grows, `/healthz` turns 503 when the loop is wedged (through the
//! hidden test seam), and bad addresses are refused (exit 2 malformed,
//! exit 1 in use).

use crate::support;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::http::{free_addr, get, sample, wait_get};
use support::{signal, wait_event, Log, Node};

fn spawn(db: &Path, node: usize, log: &Log, addr: &str) -> Node {
    support::spawn(
        &format!("sqlite://{}", db.display()),
        &[],
        "job",
        "1s",
        node,
        log,
        &["--listen", addr],
    )
}

#[test]
fn leader_and_metrics_are_served_and_follow_a_handover() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let log: Log = Arc::default();
    let addrs = [free_addr(), free_addr()];
    let mut nodes: Vec<Node> = (0..2).map(|i| spawn(&db, i, &log, &addrs[i])).collect();

    let leader = wait_event(&log, 0, |e| e.kind() == "leader");
    let (l, f) = (leader.node, 1 - leader.node);
    let holder = leader.json["holder"].as_str().unwrap().to_string();
    // The follower reports the holder it sees.
    wait_event(&log, 0, |e| {
        e.node == f && e.kind() == "observed" && e.json["holder"] == holder.as_str()
    });

    let (status, body) = wait_get(&addrs[l], "/leader", |s, _| s == 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["name"], "job");
    assert_eq!(json["holder"], holder.as_str(), "the stored id in full");
    assert_eq!(json["epoch"], leader.epoch());
    assert_eq!(status, 200);
    let (status, body) = wait_get(&addrs[f], "/leader", |_, b| b.contains(&holder));
    assert_eq!(status, 503, "a follower answers 503: {body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["epoch"], leader.epoch());

    for (i, want) in [(l, 1.0), (f, 0.0)] {
        let (_, body) = wait_get(&addrs[i], "/metrics", |s, _| s == 200);
        assert_eq!(
            sample(&body, "picolease_leader{lease=\"job\"}"),
            Some(want),
            "{body}"
        );
        for series in [
            "picolease_epoch{lease=\"job\"}",
            "picolease_lease_remaining_seconds{lease=\"job\"}",
            "picolease_transitions_total{lease=\"job\",to=\"leader\",reason=\"acquired\"}",
            "picolease_transitions_total{lease=\"job\",to=\"follower\",reason=\"released\"}",
            "picolease_statement_failures_total{lease=\"job\",statement=\"renew\",kind=\"timeout\"}",
            "picolease_statement_duration_seconds_count{lease=\"job\",statement=\"acquire\"}",
        ] {
            assert!(sample(&body, series).is_some(), "{series} missing: {body}");
        }
        let (status, _) = get(&addrs[i], "/healthz").unwrap();
        assert_eq!(status, 200, "a follower is healthy too");
    }
    // Renewals are counted.
    let renews = "picolease_statement_duration_seconds_count{lease=\"job\",statement=\"renew\"}";
    let (_, body) = get(&addrs[l], "/metrics").unwrap();
    let first = sample(&body, renews).unwrap();
    let (_, body) = wait_get(&addrs[l], "/metrics", |_, b| {
        sample(b, renews).is_some_and(|n| n >= first + 2.0)
    });
    println!(
        "renews counted: {first} then {}",
        sample(&body, renews).unwrap()
    );

    // A clean handover: /leader flips on both within a moment.
    let stopped = Instant::now();
    signal(&nodes[l], Signal::SIGTERM);
    wait_get(&addrs[f], "/leader", |s, _| s == 200);
    let flipped = stopped.elapsed();
    assert!(nodes[l].child.wait().unwrap().success());
    let new_leader = wait_event(&log, 0, |e| e.node == f && e.kind() == "leader");
    println!("/leader flipped to 200 on the successor {flipped:?} after SIGTERM to the leader (interval 250ms)");
    assert!(flipped < Duration::from_secs(5), "{flipped:?}");
    let (_, body) = get(&addrs[f], "/metrics").unwrap();
    assert_eq!(sample(&body, "picolease_leader{lease=\"job\"}"), Some(1.0));
    assert_eq!(
        sample(&body, "picolease_epoch{lease=\"job\"}"),
        Some(new_leader.epoch() as f64)
    );
    signal(&nodes[f], Signal::SIGTERM);
    assert!(nodes[f].child.wait().unwrap().success());
    for node in &mut nodes {
        node.reader.take().unwrap().join().unwrap();
    }
}

#[test]
fn healthz_is_503_when_the_loop_is_wedged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let addr = free_addr();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_picolease"))
        .env_remove("PICOLEASE_DB")
        .env("PICOLEASE_TEST_WEDGE_AFTER_MS", "2000")
        .args(["--db", &format!("sqlite://{}", db.display())])
        .args(["run", "--name", "job", "--ttl", "1s", "--listen", &addr])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (first, _) = wait_get(&addr, "/healthz", |_, _| true);
    if started.elapsed() < Duration::from_millis(1500) {
        assert_eq!(first, 200, "healthy before the wedge");
    }
    let (_, body) = wait_get(&addr, "/healthz", |s, _| s == 503);
    println!(
        "/healthz 503 {:?} after start (wedged at 2s): {}",
        started.elapsed(),
        body.trim()
    );
    assert!(body.contains("wedged"), "{body}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn bad_listen_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("leases.db").display());
    let run = |listen: &str| {
        Command::new(env!("CARGO_BIN_EXE_picolease"))
            .env_remove("PICOLEASE_DB")
            .args(["--db", &db, "run", "--name", "job", "--listen", listen])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for bad in [
        "",
        "9464",
        "127.0.0.1",
        "localhost",
        "localhost:http",
        "127.0.0.1:99999",
        "example.com:80",
        "1.2.3:4",
    ] {
        let out = run(bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{bad:?}: {stderr}");
        assert!(stderr.contains("--listen"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run(&addr);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&addr), "{stderr}");
    // Nothing started: no lease was taken.
    let out = Command::new(env!("CARGO_BIN_EXE_picolease"))
        .args(["--db", &db, "status", "--json"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

#[test]
fn healthz_stays_200_while_the_database_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let log: Log = Arc::default();
    let addr = free_addr();
    let mut node = spawn(&db, 0, &log, &addr);
    wait_event(&log, 0, |e| e.kind() == "leader");
    wait_get(&addr, "/healthz", |s, _| s == 200);
    // Another connection holds the write lock for 3 s (ttl 1 s, stall
    // bound 1 s): every statement fails busy, the leader demotes, and the
    // loop is still making progress.
    let blocker = rusqlite::Connection::open(&db).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let locked = Instant::now();
    let mut probes = 0;
    while locked.elapsed() < Duration::from_secs(3) {
        let (status, body) = get(&addr, "/healthz").expect("answers");
        assert_eq!(status, 200, "healthy while locked out: {body}");
        probes += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_event(&log, 0, |e| e.kind() == "follower");
    let (status, _) = get(&addr, "/leader").unwrap();
    assert_eq!(status, 503, "no longer leading");
    let (_, metrics) = get(&addr, "/metrics").unwrap();
    let failed: f64 = ["transient", "fatal", "timeout"]
        .iter()
        .filter_map(|kind| {
            sample(
                &metrics,
                &format!("picolease_statement_failures_total{{lease=\"job\",statement=\"renew\",kind=\"{kind}\"}}"),
            )
        })
        .sum();
    assert!(failed >= 1.0, "renew failures counted: {metrics}");
    let demoted = sample(
        &metrics,
        "picolease_transitions_total{lease=\"job\",to=\"follower\",reason=\"expired\"}",
    )
    .unwrap()
        + sample(
            &metrics,
            "picolease_transitions_total{lease=\"job\",to=\"follower\",reason=\"error\"}",
        )
        .unwrap();
    assert_eq!(demoted, 1.0, "{metrics}");
    blocker.execute_batch("COMMIT").unwrap();
    println!(
        "{probes} /healthz probes during a 3 s lock-out: all 200; {failed} renew failures counted"
    );
    wait_get(&addr, "/leader", |s, _| s == 200);
    signal(&node, Signal::SIGTERM);
    assert!(node.child.wait().unwrap().success());
    node.reader.take().unwrap().join().unwrap();
}
