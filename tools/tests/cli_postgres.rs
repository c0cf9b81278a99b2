//! The `picolease` binary on PostgreSQL (`--db postgres://…`), against the
//! real server at 127.0.0.1:5432 (user `postgres`, database `test`). These
//! tests FAIL, not skip, when the server is unreachable. Each uses its own
//! table, dropped at the end.

#![cfg(feature = "postgres")]

use crate::support;

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::{alive, len, signal, wait_event, wait_file, Log, Node};

const URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A table name unique to this test and process.
fn table(test: &str) -> String {
    format!("pl_cli_{test}_{}", std::process::id())
}

/// Runs `sql` on the server (panics, failing the test, when unreachable)
/// and returns every row as text.
fn sql(sql: &str) -> Vec<String> {
    support::pg::sql(URL, sql)
}

/// Drops the table when the test ends, passed or failed.
struct Table(String);

impl Table {
    fn new(test: &str) -> Self {
        let name = table(test);
        sql(&format!("DROP TABLE IF EXISTS {name}"));
        Table(name)
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| sql(&format!("DROP TABLE IF EXISTS {}", self.0)));
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
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "{stderr}"
    );
    for name in names {
        assert!(stderr.contains(name), "{name:?} not named in {stderr:?}");
    }
}

fn exists(table: &str) -> bool {
    sql(&format!("SELECT to_regclass('{table}') IS NOT NULL")) == ["t"]
}

#[test]
fn init_and_status_json_on_a_fresh_table() {
    let t = Table::new("status");
    // A missing table reads as no leases, and status creates nothing.
    let out = picolease(URL, &t.0, &["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    assert!(!exists(&t.0));

    let out = picolease(URL, &t.0, &["init"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(exists(&t.0));
    let out = picolease(URL, &t.0, &["init"]);
    assert_eq!(out.status.code(), Some(0), "init twice is fine: {out:?}");
    let out = picolease(URL, &t.0, &["status", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");

    // CMD exits by itself: the lease is released, picolease exits with its
    // status, and status shows the free lease with the exact keys.
    let out = picolease(
        URL,
        &t.0,
        &[
            "run",
            "--name",
            "once",
            "--ttl",
            "1s",
            "--json",
            "--",
            "sh",
            "-c",
            "test \"$PICOLEASE_NAME/$PICOLEASE_EPOCH\" = once/1 && exit 7",
        ],
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");
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
    assert_eq!(lines[0]["epoch"], 1);
    assert_eq!(lines[2]["code"], 7);
    assert_eq!(lines[3]["reason"], "released");

    let out = picolease(URL, &t.0, &["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().expect("one JSON array");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let mut keys: Vec<&str> = rows[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(keys, ["epoch", "expires_in_ms", "holder", "name"]);
    assert_eq!(rows[0]["name"], "once");
    assert_eq!(rows[0]["holder"], Value::Null);
    assert_eq!(rows[0]["epoch"], 1);
    assert_eq!(rows[0]["expires_in_ms"], Value::Null);
    let out = picolease(URL, &t.0, &["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("once") && text.contains("free"), "{text}");
}

fn spawn(table: &str, lease: &str, ttl: &str, node: usize, log: &Log, extra: &[&str]) -> Node {
    support::spawn(URL, &["--table", table], lease, ttl, node, log, extra)
}

#[test]
fn release_force_bumps_the_epoch_and_demotes_the_leader_and_its_command() {
    let t = Table::new("release");
    let dir = tempfile::tempdir().unwrap();
    let log: Log = Arc::default();
    let script = format!(
        "echo $$ > {0}/child-$PICOLEASE_NODE-$PICOLEASE_EPOCH.tmp && mv {0}/child-$PICOLEASE_NODE-$PICOLEASE_EPOCH.tmp {0}/child-$PICOLEASE_NODE-$PICOLEASE_EPOCH.pid; exec sleep 60",
        dir.path().display()
    );
    let cmd = ["--grace", "200ms", "--", "sh", "-c", &script];
    let mut nodes: Vec<Node> = (0..2)
        .map(|i| spawn(&t.0, "job", "1s", i, &log, &cmd))
        .collect();
    let leader = wait_event(&log, 0, |e| e.kind() == "leader");
    let pid: i32 = wait_file(&dir.path().join(format!(
        "child-n{}-{}.pid",
        leader.node,
        leader.epoch()
    )))
    .trim()
    .parse()
    .unwrap();
    assert!(alive(pid));

    let mark = len(&log);
    let out = picolease(URL, &t.0, &["release", "--name", "job", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let forced = leader.epoch() + 1;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("epoch is now {forced}")),
        "{out:?}"
    );
    let demoted = wait_event(&log, mark, |e| {
        e.node == leader.node && e.kind() == "follower"
    });
    assert_eq!(demoted.json["reason"], "lost");
    assert_eq!(demoted.epoch(), leader.epoch());
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the command outlived the demotion"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let next = wait_event(&log, mark, |e| e.kind() == "leader");
    assert!(next.epoch() > forced, "{next:?}");
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
        node.reader.take().unwrap().join().unwrap();
    }
    assert!(
        !alive(next_pid),
        "the command is stopped before picolease exits"
    );
    let events = log.lock().unwrap().clone();
    // The last leader's last line: after a forced release either node may
    // lead next (the old holder, told at once, tries again as fast as the
    // other), and if it is the old holder its first `follower` is the
    // demotion.
    let released = events
        .iter()
        .rev()
        .find(|e| e.node == next.node && e.kind() == "follower")
        .expect("the last leader reports its release");
    assert_eq!(released.json["reason"], "released");
    // A forced release takes the lease from a live holder, which learns of
    // it only at its next renewal: terms may overlap briefly (the new epoch
    // fences the old holder's writes), so only the epochs are checked.
    let mut epochs: Vec<(u64, u64)> = events
        .iter()
        .filter(|e| e.kind() == "leader")
        .map(|e| (e.unix_ms(), e.epoch()))
        .collect();
    epochs.sort();
    assert!(
        epochs.windows(2).all(|w| w[0].1 < w[1].1),
        "epochs strictly increase: {epochs:?}"
    );
    // A lease that does not exist: a runtime error naming it.
    assert_error(
        &picolease(URL, &t.0, &["release", "--name", "nope", "--force"]),
        1,
        &["nope"],
    );
}

#[test]
fn bad_urls_unreachable_servers_and_malformed_rows() {
    let t = Table::new("bad");
    let commands: [&[&str]; 4] = [
        &["init"],
        &["status", "--json"],
        &["run", "--name", "job", "--ttl", "1s"],
        &["release", "--name", "job", "--force"],
    ];
    for args in commands {
        // Malformed: a configuration error, the password hidden.
        let out = picolease(
            "postgres://postgres:hunter2@127.0.0.1:notaport/test",
            &t.0,
            args,
        );
        assert_error(&out, 2, &["invalid PostgreSQL URL", "127.0.0.1"]);
        assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));
        // Nothing listens there: a runtime error naming the server.
        let out = picolease("postgres://postgres@127.0.0.1:1/test", &t.0, args);
        assert_error(&out, 1, &["could not connect", "127.0.0.1:1"]);
        // Refused login: a configuration error naming the role.
        let out = picolease("postgres://no_such_role@127.0.0.1:5432/test", &t.0, args);
        assert_error(&out, 2, &["no_such_role"]);
    }
    assert!(!exists(&t.0), "nothing created");
    // A missing table with release (which never creates one): as on SQLite.
    assert_error(
        &picolease(URL, &t.0, &["release", "--name", "job", "--force"]),
        2,
        &[&t.0],
    );

    // A hand-made table without NOT NULL, holding a NULL-epoch row.
    sql(&format!(
        // With the incarnation column the library adds (DESIGN §3
        // "Failover"), so that only the row could change.
        "CREATE TABLE {0} (name text PRIMARY KEY, holder text, epoch bigint, expires_at bigint, \
         incarnation bigint);
         INSERT INTO {0} VALUES ('job', 'someone', NULL, 0, 7)",
        t.0
    ));
    let dump = || sql(&format!("SELECT * FROM {} ORDER BY name", t.0));
    let before = dump();
    assert_eq!(before, ["job|someone|NULL|0|7"]);
    for args in commands.iter().skip(1).copied().chain([&["status"][..]]) {
        let out = picolease(URL, &t.0, args);
        let code = out.status.code();
        assert!(matches!(code, Some(1 | 2)), "{args:?}: {out:?}");
        assert_error(&out, code.unwrap(), &["epoch"]);
        assert_eq!(dump(), before, "{args:?} changed the row");
    }
}

#[test]
fn five_processes_kill_term_and_pause_leaders_one_after_another() {
    let t = Table::new("five");
    let log: Log = Arc::default();
    let mut nodes: Vec<Node> = (0..5)
        .map(|i| spawn(&t.0, "L", "1s", i, &log, &[]))
        .collect();
    // Releases notify on PostgreSQL: a clean handover is near-instant.
    support::kill_term_and_pause(
        &mut nodes,
        &log,
        Duration::from_secs(1),
        Duration::from_secs(2),
    );
}

/// A read-only server (what an address still pointing at a demoted primary
/// looks like), seen from outside: `run` on its own database loses the lease
/// by its deadline (`follower`, reason `expired`), keeps running and
/// competing, and leads again at a higher epoch within a few intervals once
/// the database is writable, because every read-only session was retired.
#[test]
fn a_read_only_server_demotes_run_and_it_leads_again_once_writable() {
    let db = format!("picolease_cli_ro_{}", std::process::id());
    let terminate = |db: &str| {
        sql(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{db}' AND pid <> pg_backend_pid()"
        ))
        .len()
    };
    terminate(&db);
    sql(&format!("DROP DATABASE IF EXISTS {db}"));
    sql(&format!("CREATE DATABASE {db}"));
    let url = format!("postgres://postgres@127.0.0.1:5432/{db}?connect_timeout=2");
    let log: Log = Arc::default();
    let mut node = support::spawn(&url, &[], "ro", "1s", 0, &log, &[]);
    let first = wait_event(&log, 0, |e| e.kind() == "leader");

    sql(&format!(
        "ALTER DATABASE {db} SET default_transaction_read_only = on"
    ));
    assert!(terminate(&db) >= 1, "no backend of {db} to terminate");
    let from = len(&log);
    let lost = wait_event(&log, from, |e| e.kind() == "follower");
    assert_eq!(lost.json["reason"], "expired", "{:?}", lost.json);
    // Still running, still competing: a read-only database is not fatal.
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        alive(node.child.id() as i32),
        "run gave up on a read-only server"
    );
    assert!(
        log.lock().unwrap()[from..]
            .iter()
            .all(|e| e.kind() != "leader"),
        "led on a read-only server"
    );

    // Counted before the change: the leader line may follow it at once.
    let from = len(&log);
    sql(&format!(
        "ALTER DATABASE {db} RESET default_transaction_read_only"
    ));
    let writable = Instant::now();
    let again = wait_event(&log, from, |e| e.kind() == "leader");
    let took = writable.elapsed();
    eprintln!("figure: `run` led again {took:?} after the database became writable (ttl 1s, interval 250ms)");
    assert!(again.epoch() > first.epoch(), "{:?}", again.json);
    assert!(took < Duration::from_secs(4), "took {took:?}");

    signal(&node, Signal::SIGTERM);
    let status = node.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    if let Some(reader) = node.reader.take() {
        reader.join().unwrap();
    }
    terminate(&db);
    sql(&format!("DROP DATABASE IF EXISTS {db}"));
}
