//! Several `picolease run --json` processes on one SQLite file, with real
//! signals: SIGKILL (crash), SIGTERM (clean stop), SIGSTOP past the ttl then
//! SIGCONT (a paused leader). Checked from the recorded events: never two
//! leaders at once, epochs strictly increasing, takeover within generous
//! bounds, the paused node reports `follower` right after it resumes.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::{alive, len, signal, wait_event, wait_file, Log, Node};

const TTL_MS: u64 = 800;

fn spawn(db: &Path, node: usize, log: &Log, extra: &[&str]) -> Node {
    support::spawn(
        &format!("sqlite://{}", db.display()),
        &[],
        "job",
        &format!("{TTL_MS}ms"),
        node,
        log,
        extra,
    )
}

#[test]
fn kill_term_and_pause_leaders_one_after_another() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let log: Log = Arc::default();
    let mut nodes: Vec<Node> = (0..4).map(|i| spawn(&db, i, &log, &[])).collect();
    // Polling only on SQLite: a clean handover takes up to an interval.
    support::kill_term_and_pause(
        &mut nodes,
        &log,
        Duration::from_millis(TTL_MS),
        Duration::from_secs(5),
    );
}

#[test]
fn the_command_runs_only_while_leader_and_is_gone_after_demotion() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let log: Log = Arc::default();
    let script = format!(
        "echo $$ > {}/child-$PICOLEASE_NODE-$PICOLEASE_EPOCH.tmp && mv {0}/child-$PICOLEASE_NODE-$PICOLEASE_EPOCH.tmp {0}/child-$PICOLEASE_NODE-$PICOLEASE_EPOCH.pid; exec sleep 60",
        dir.path().display()
    );
    let cmd = ["--grace", "200ms", "--", "sh", "-c", &script];
    let mut nodes: Vec<Node> = (0..2).map(|i| spawn(&db, i, &log, &cmd)).collect();
    let leader = wait_event(&log, 0, |e| e.kind() == "leader");
    let pid_file = dir
        .path()
        .join(format!("child-n{}-{}.pid", leader.node, leader.epoch()));
    let pid: i32 = wait_file(&pid_file).trim().parse().unwrap();
    assert!(alive(pid));
    // Only the leader's command runs.
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("child-"))
        .collect();
    assert_eq!(
        files,
        vec![format!("child-n{}-{}.pid", leader.node, leader.epoch())]
    );

    // An administrator takes the lease: the leader is demoted (lost) and its
    // command is terminated.
    let mark = len(&log);
    let out = Command::new(env!("CARGO_BIN_EXE_picolease"))
        .args([
            "--db",
            &format!("sqlite://{}", db.display()),
            "release",
            "--name",
            "job",
            "--force",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let demoted = wait_event(&log, mark, |e| {
        e.node == leader.node && e.kind() == "follower"
    });
    assert_eq!(demoted.json["reason"], "lost");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the command outlived the demotion"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Someone leads again, with its own command at the new epoch.
    let next = wait_event(&log, mark, |e| e.kind() == "leader");
    assert!(next.epoch() > leader.epoch());
    let next_pid: i32 = wait_file(&dir.path().join(format!(
        "child-n{}-{}.pid",
        next.node,
        next.epoch()
    )))
    .trim()
    .parse()
    .unwrap();
    for node in &nodes {
        signal(node, Signal::SIGTERM);
    }
    for node in &mut nodes {
        assert_eq!(node.child.wait().unwrap().code(), Some(0));
    }
    assert!(
        !alive(next_pid),
        "the command is stopped before picolease exits"
    );
}

#[test]
fn when_the_command_exits_the_lease_is_released_with_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let out = Command::new(env!("CARGO_BIN_EXE_picolease"))
        .args(["--db", &format!("sqlite://{}", db.display())])
        .args([
            "run", "--name", "once", "--ttl", "1s", "--json", "--", "sh", "-c", "exit 7",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["leader", "child", "child_exit", "follower"],
        "{lines:?}"
    );
    assert_eq!(lines[1]["pid"], lines[2]["pid"]);
    assert_eq!(lines[2]["code"], 7);
    assert_eq!(lines[3]["reason"], "released");
    let status = Command::new(env!("CARGO_BIN_EXE_picolease"))
        .args([
            "--db",
            &format!("sqlite://{}", db.display()),
            "status",
            "--json",
        ])
        .output()
        .unwrap();
    let rows: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(rows[0]["name"], "once");
    assert_eq!(rows[0]["holder"], Value::Null);
    assert_eq!(rows[0]["expires_in_ms"], Value::Null);
    assert_eq!(rows[0]["epoch"], 1);
}
