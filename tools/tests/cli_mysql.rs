//! The `picolease` binary on MySQL/MariaDB (`--db mysql://…`), against the
//! real server at 127.0.0.1:3306 (root, database `test`). These tests
//! FAIL, not skip, when the server is unreachable. Each uses a table or a
//! database of its own, dropped at the end.

#![cfg(feature = "mysql")]

use crate::support;

use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::mysql::sql;
use support::{counts, held, now_ms, signal, wait_for, Log, Node};

const URL: &str = "mysql://root@127.0.0.1:3306/test";

/// Drops the table when the test ends, passed or failed.
struct Table(String);

impl Table {
    fn new(test: &str) -> Self {
        let name = format!("pl_cli_{test}_{}", std::process::id());
        sql("test", &format!("DROP TABLE IF EXISTS {name}"));
        Table(name)
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let _ =
            std::panic::catch_unwind(|| sql("test", &format!("DROP TABLE IF EXISTS {}", self.0)));
    }
}

fn picolease(db: &str, table: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_picolease"))
        .env_remove("PICOLEASE_DB")
        .args(["--db", db, "--table", table])
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Exit `code`, one `error:` line on stderr naming every one of `names`.
fn assert_error(out: &Output, code: i32, names: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr:?}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for name in names {
        assert!(stderr.contains(name), "{name:?} not named in {stderr:?}");
    }
}

fn exists(table: &str) -> bool {
    sql(
        "test",
        &format!("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'test' AND table_name = '{table}'"),
    ) == ["1"]
}

#[test]
fn init_status_run_and_release_on_a_fresh_table() {
    let t = Table::new("status");
    let out = picolease(URL, &t.0, &["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    assert!(!exists(&t.0), "status creates nothing");

    for _ in 0..2 {
        let out = picolease(URL, &t.0, &["init"]);
        assert_eq!(out.status.code(), Some(0), "init, twice: {out:?}");
    }
    assert!(exists(&t.0));

    // CMD exits by itself: released, picolease exits with its status.
    let out = picolease(
        URL,
        &t.0,
        &[
            "run", "--name", "once", "--ttl", "1s", "--", "sh", "-c", "exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = picolease(URL, &t.0, &["status", "--json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["name"], "once");
    assert_eq!(rows[0]["holder"], Value::Null);
    assert_eq!(rows[0]["epoch"], 1);

    // A forced release of a free lease still bumps the epoch.
    let out = picolease(URL, &t.0, &["release", "--name", "once", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = picolease(URL, &t.0, &["status", "--json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rows[0]["epoch"].as_u64().unwrap() >= 1, "{rows:?}");
}

#[test]
fn bad_urls_unreachable_servers_and_refused_logins() {
    let t = Table::new("bad");
    let commands: [&[&str]; 4] = [
        &["init"],
        &["status", "--json"],
        &["run", "--name", "job", "--ttl", "1s"],
        &["release", "--name", "job", "--force"],
    ];
    for args in commands {
        let out = picolease("mysql://root:hunter2@127.0.0.1:notaport/test", &t.0, args);
        assert_error(&out, 2, &["invalid MySQL URL", "127.0.0.1"]);
        assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));
        let out = picolease("mysql://root@127.0.0.1:1/test", &t.0, args);
        assert_error(&out, 1, &["could not connect", "127.0.0.1:1"]);
        let out = picolease("mysql://no_such_user:pw@127.0.0.1:3306/test", &t.0, args);
        assert_error(&out, 2, &["refused the login", "no_such_user"]);
        let out = picolease(
            "mariadb://root@127.0.0.1:3306/no_such_database_here",
            &t.0,
            args,
        );
        assert_error(&out, 2, &["refused the login", "no_such_database_here"]);
    }
    assert!(!exists(&t.0), "nothing created");
}

#[test]
fn five_processes_kill_term_and_pause_leaders_one_after_another() {
    let t = Table::new("five");
    let log: Log = Arc::default();
    let mut nodes: Vec<Node> = (0..5)
        .map(|i| support::spawn(URL, &["--table", &t.0], "L", "1s", i, &log, &[]))
        .collect();
    // A clean handover wakes the successor through the leader's user
    // lock; the bound is the polling fallback's, an interval (250 ms) and
    // a round trip, so a refused lock would pass too.
    support::kill_term_and_pause(
        &mut nodes,
        &log,
        Duration::from_secs(1),
        Duration::from_secs(2),
    );
}

/// A database of this test's own, dropped at the end.
struct Database(String);

impl Drop for Database {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            sql("test", &format!("DROP DATABASE IF EXISTS {}", self.0))
        });
    }
}

#[test]
fn four_processes_share_200_leases_and_take_a_killed_ones_at_expiry() {
    let db = Database(format!("pl_cli_set_{}", std::process::id()));
    sql(
        "test",
        &format!("DROP DATABASE IF EXISTS {0}; CREATE DATABASE {0}", db.0),
    );
    let url = format!("mysql://root@127.0.0.1:3306/{}", db.0);
    let log: Log = Arc::default();
    let mut nodes: Vec<Node> = (0..4)
        .map(|i| support::spawn(&url, &[], "s{0..199}", "2s", i, &log, &[]))
        .collect();
    let none = BTreeSet::new();
    let took = wait_for("50 each", Duration::from_secs(30), || {
        counts(&log, &none) == vec![50, 50, 50, 50]
    });
    eprintln!("200 leases balanced 50/50/50/50 {took:?} after the start");

    // One statement connection per process, named picolease.
    let connections = sql(
        "test",
        &format!(
            "SELECT count(*) FROM information_schema.processlist WHERE db = '{}'",
            db.0
        ),
    );
    let connections: usize = connections[0].parse().unwrap();
    eprintln!("{connections} connections for 4 processes");
    assert!(connections <= 8, "{connections} connections");

    let victim = held(&log, &none)[&3].clone();
    let killed_at = now_ms();
    let killed_index = log.lock().unwrap().len();
    signal(&nodes[3], Signal::SIGKILL);
    let _ = nodes[3].child.wait();
    let reaped_at = now_ms();
    let dead = BTreeSet::from([3]);
    let took = wait_for("67/67/66", Duration::from_secs(30), || {
        counts(&log, &dead) == vec![66, 67, 67]
    });
    eprintln!("rebalanced 66/67/67 {took:?} after the SIGKILL (ttl 2s)");
    let events = log.lock().unwrap().clone();
    for name in &victim {
        let taken = events[killed_index..]
            .iter()
            .find(|e| e.kind() == "leader" && e.json["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} never taken over"));
        let after = taken.unix_ms().saturating_sub(killed_at);
        // Not before the row could have lapsed, and within ttl + 2 intervals
        // (and a margin for a loaded machine).
        assert!(after >= 1_400, "{name} taken {after} ms after the kill");
        assert!(after <= 4_000, "{name} taken {after} ms after the kill");
    }

    // Nobody led a lease another process led.
    support::assert_never_led_twice(&events, Some((reaped_at, 3)));
    for node in &mut nodes[..3] {
        signal(node, Signal::SIGTERM);
        assert_eq!(node.child.wait().unwrap().code(), Some(0));
    }
}
