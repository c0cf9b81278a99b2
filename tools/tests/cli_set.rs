//! `picolease run` with several names on SQLite, from outside (DESIGN §9):
//! name ranges and their errors, a fair share between processes with every
//! event naming its lease, one CMD per held lease with that lease's
//! environment, a CMD that exits by itself giving its lease up while run
//! goes on, `/leader` for a set, `status --members`, and exit 0 on SIGTERM.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::http::free_addr;
use support::{picolease, signal, Log, Node, PATIENCE};

fn spawn(db: &Path, node: usize, log: &Log, names: &str, extra: &[&str]) -> Node {
    support::spawn(
        &format!("sqlite://{}", db.display()),
        &[],
        names,
        "1s",
        node,
        log,
        extra,
    )
}

/// Which leases each process leads, replaying its events in order.
fn held(log: &Log) -> BTreeMap<usize, BTreeSet<String>> {
    let mut held: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for event in log.lock().unwrap().iter() {
        let name = event.json["name"].as_str().unwrap().to_string();
        let mine = held.entry(event.node).or_default();
        match event.kind() {
            "leader" => assert!(mine.insert(name), "leader twice without follower"),
            "follower" => {
                mine.remove(&name);
            }
            _ => {}
        }
    }
    held
}

/// GET `path`: the status and the JSON body (`null` when not JSON).
fn get(addr: &str, path: &str) -> (u16, serde_json::Value) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some((status, body)) = support::http::get(addr, path) {
            return (status, serde_json::from_str(&body).unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "{addr}{path} never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: timed out");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn bad_name_specs_exit_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("x.db").display());
    for (names, says) in [
        (vec!["s{5..3}"], "ends before it starts"),
        (vec!["a", "a"], "twice"),
        (vec!["s{0..3}", "s2"], "twice"),
        (vec!["s{0..100000}"], "100000"),
        (vec!["x{a}"], "range"),
        (vec!["x{1..2"], "'{'"),
        (vec!["picolease.member:x", "y"], "reserved"),
    ] {
        let mut args = vec!["--db", db.as_str(), "run", "--ttl", "1s"];
        for name in &names {
            args.extend(["--name", name]);
        }
        let out = picolease(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{names:?}: {stderr}");
        assert!(stderr.contains(says), "{names:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{names:?}: {stderr}");
    }
    assert!(!dir.path().join("x.db").exists(), "nothing was created");
}

#[test]
fn two_processes_share_ten_leases_and_hand_them_over_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let log: Log = Arc::default();
    let addr = free_addr();
    let mut a = spawn(&db, 0, &log, "s{0..9}", &["--listen", &addr]);
    let mut b = spawn(&db, 1, &log, "s{0..9}", &[]);
    wait_for("5 and 5", || {
        let held = held(&log);
        held.get(&0).map(BTreeSet::len) == Some(5) && held.get(&1).map(BTreeSet::len) == Some(5)
    });
    // Every event names one of the ten leases.
    for event in log.lock().unwrap().iter() {
        let name = event.json["name"].as_str().unwrap();
        assert!(
            name.starts_with('s') && name[1..].parse::<u32>().unwrap() < 10,
            "{name}"
        );
    }

    // /leader: the held list, and one lease by name.
    let (status, body) = get(&addr, "/leader");
    assert_eq!(status, 200, "{body}");
    let held_a = held(&log)[&0].clone();
    let listed: BTreeSet<String> = body["held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, held_a);
    let mine = held_a.iter().next().unwrap();
    let (status, one) = get(&addr, &format!("/leader?name={mine}"));
    assert_eq!(
        (status, one["name"].as_str()),
        (200, Some(mine.as_str())),
        "{one}"
    );
    let theirs = held(&log)[&1].iter().next().unwrap().clone();
    let (status, other) = get(&addr, &format!("/leader?name={theirs}"));
    assert_eq!(status, 503, "{other}");
    let (status, _) = get(&addr, "/leader?name=nope");
    assert_eq!(status, 404);
    // /metrics: per-lease series carry the lease label; the share gauges.
    let (status, metrics) = support::http::get(&addr, "/metrics").expect("metrics answer");
    assert_eq!(status, 200);
    assert!(
        metrics.contains(&format!("picolease_leader{{lease=\"{mine}\"}} 1")),
        "{metrics}"
    );
    assert!(metrics.contains("picolease_set_target 5"), "{metrics}");
    assert!(
        metrics.contains("picolease_batch_duration_seconds"),
        "{metrics}"
    );

    // status hides the membership rows; --members lists both processes.
    let out = picolease(&[
        "--db",
        &format!("sqlite://{}", db.display()),
        "status",
        "--json",
    ]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 10, "{rows}");
    let out = picolease(&[
        "--db",
        &format!("sqlite://{}", db.display()),
        "status",
        "--members",
        "--json",
    ]);
    let members: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(members.as_array().unwrap().len(), 2, "{members}");

    // SIGTERM: b releases its five, a takes them, b exits 0.
    let stopped = Instant::now();
    signal(&b, Signal::SIGTERM);
    let code = b.child.wait().unwrap().code();
    assert_eq!(code, Some(0));
    wait_for("10 on a", || {
        held(&log).get(&0).map(BTreeSet::len) == Some(10)
    });
    eprintln!("a held all 10 {:?} after b's SIGTERM", stopped.elapsed());
    support::assert_never_led_twice(&log.lock().unwrap(), None);
    signal(&a, Signal::SIGTERM);
    assert_eq!(a.child.wait().unwrap().code(), Some(0));
}

#[test]
fn one_command_per_held_lease_and_an_exit_gives_the_lease_up() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let seen = dir.path().join("seen");
    let log: Log = Arc::default();
    // Each CMD records its lease and epoch; the one for s1 exits at once
    // (by itself), the others run until stopped.
    let script = format!(
        "echo \"$PICOLEASE_NAME $PICOLEASE_EPOCH $PICOLEASE_HOLDER\" >> {}; [ \"$PICOLEASE_NAME\" = s1 ] && exit 3; exec sleep 30",
        seen.display()
    );
    let mut a = spawn(&db, 0, &log, "s{0..2}", &["--", "sh", "-c", &script]);
    // A CMD writes its line after its `child` event, and s1's CMD comes
    // back after its rest: wait for one line from each lease's CMD.
    wait_for("a CMD for each lease and s1's exit", || {
        let events = log.lock().unwrap();
        let exited = events
            .iter()
            .any(|e| e.kind() == "child_exit" && e.json["name"] == "s1" && e.json["code"] == 3);
        let lines = std::fs::read_to_string(&seen).unwrap_or_default();
        let written: BTreeSet<&str> = lines.lines().filter_map(|l| l.split(' ').next()).collect();
        exited && written.len() == 3
    });
    // s1 was given up (follower, released) while run goes on.
    wait_for("s1 released", || {
        log.lock().unwrap().iter().any(|e| {
            e.kind() == "follower" && e.json["name"] == "s1" && e.json["reason"] == "released"
        })
    });
    let lines = std::fs::read_to_string(&seen).unwrap();
    let names: BTreeSet<&str> = lines
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["s0", "s1", "s2"]), "{lines}");
    assert!(
        lines
            .lines()
            .all(|l| l.split(' ').count() == 3 && l.contains("n0#")),
        "{lines}"
    );
    assert!(
        a.child.try_wait().unwrap().is_none(),
        "run goes on after a CMD's exit"
    );
    signal(&a, Signal::SIGTERM);
    assert_eq!(a.child.wait().unwrap().code(), Some(0));
    let events = log.lock().unwrap();
    let exits = events.iter().filter(|e| e.kind() == "child_exit").count();
    assert!(exits >= 3, "every CMD reported its end");
}
