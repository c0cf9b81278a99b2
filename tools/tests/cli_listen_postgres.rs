//! `run --listen` and `status --watch` on PostgreSQL (the server at
//! 127.0.0.1:5432, user `postgres`, database `test`; these tests FAIL, not
//! skip, when it is unreachable). Each test has its own table, dropped at
//! the end. The contenders run `-- CMD`, so `--listen` is checked with a
//! command too.

#![cfg(feature = "postgres")]

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::http::{free_addr, get, sample, wait_get};
use support::{signal, wait_event, Log, Node, PATIENCE};

const URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn sql(sql: &str) {
    support::pg::sql(URL, sql);
}

/// Drops the table when the test ends, passed or failed.
struct Table(String);

impl Table {
    fn new(test: &str) -> Self {
        let name = format!("pl_listen_{test}_{}", std::process::id());
        sql(&format!("DROP TABLE IF EXISTS {name}"));
        Table(name)
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| sql(&format!("DROP TABLE IF EXISTS {}", self.0)));
    }
}

#[test]
fn listen_and_watch_on_postgres_with_a_command() {
    let t = Table::new("handover");
    let init = Command::new(env!("CARGO_BIN_EXE_picolease"))
        .env_remove("PICOLEASE_DB")
        .args(["--db", URL, "--table", &t.0, "init"])
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");

    // status --watch --json: its lines on a channel.
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_picolease"))
        .env_remove("PICOLEASE_DB")
        .args(["--db", URL, "--table", &t.0, "status", "--watch", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rows) = mpsc::channel::<String>();
    let stdout = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });

    let log: Log = Arc::default();
    let addrs = [free_addr(), free_addr()];
    let table_arg = ["--table", t.0.as_str()];
    let mut nodes: Vec<Node> = (0..2)
        .map(|i| {
            support::spawn(
                URL,
                &table_arg,
                "job",
                "2s",
                i,
                &log,
                &["--listen", &addrs[i], "--", "sleep", "60"],
            )
        })
        .collect();
    let leader = wait_event(&log, 0, |e| e.kind() == "leader");
    let (l, f) = (leader.node, 1 - leader.node);
    let holder = leader.json["holder"].as_str().unwrap().to_string();
    wait_event(&log, 0, |e| e.node == f && e.kind() == "observed");

    let (_, body) = wait_get(&addrs[l], "/leader", |s, _| s == 200);
    assert!(body.contains(&holder), "{body}");
    let (_, body) = wait_get(&addrs[f], "/leader", |s, b| s == 503 && b.contains(&holder));
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["name"], "job");
    assert_eq!(json["epoch"], leader.epoch());
    for (i, want) in [(l, 1.0), (f, 0.0)] {
        let (_, body) = wait_get(&addrs[i], "/metrics", |s, _| s == 200);
        assert_eq!(sample(&body, "picolease_leader{lease=\"job\"}"), Some(want));
        assert_eq!(get(&addrs[i], "/healthz").unwrap().0, 200);
    }
    let renews = "picolease_statement_duration_seconds_count{lease=\"job\",statement=\"renew\"}";
    let first = sample(&get(&addrs[l], "/metrics").unwrap().1, renews).unwrap();
    wait_get(&addrs[l], "/metrics", |_, b| {
        sample(b, renews).is_some_and(|n| n >= first + 2.0)
    });

    // The watcher printed the held row.
    let start = Instant::now();
    loop {
        let line = rows.recv_timeout(PATIENCE).expect("a held row");
        if line.contains(&holder) {
            break;
        }
        assert!(start.elapsed() < PATIENCE);
    }

    // A clean handover (the release notifies the follower at once).
    let stopped = Instant::now();
    signal(&nodes[l], Signal::SIGTERM);
    wait_get(&addrs[f], "/leader", |s, _| s == 200);
    println!(
        "PostgreSQL: /leader flipped to 200 on the successor {:?} after SIGTERM to the leader",
        stopped.elapsed()
    );
    assert!(nodes[l].child.wait().unwrap().success());
    let successor = wait_event(&log, 0, |e| e.node == f && e.kind() == "leader");
    let successor_holder = successor.json["holder"].as_str().unwrap().to_string();
    let start = Instant::now();
    loop {
        let line = rows.recv_timeout(PATIENCE).expect("the successor's row");
        if line.contains(&successor_holder) {
            break;
        }
        assert!(start.elapsed() < PATIENCE);
    }
    signal(&nodes[f], Signal::SIGTERM);
    assert!(nodes[f].child.wait().unwrap().success());
    for node in &mut nodes {
        node.reader.take().unwrap().join().unwrap();
    }
    kill(Pid::from_raw(watcher.id() as i32), Signal::SIGINT).unwrap();
    assert_eq!(watcher.wait().unwrap().code(), Some(0));
}
