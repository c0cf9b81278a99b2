//! The end of a term is airtight at the edges of the process (DESIGN §4b):
//! `picolease run -- CMD` processes on one SQLite file, and the same on
//! MariaDB (127.0.0.1:3306, root, database `test`, a table per test;
//! failing, not skipping, when it is down), with real signals.
//!
//! - SIGKILL of the leader's `run`: its CMD and CMD's grandchild are dead
//!   before the successor's CMD starts.
//! - SIGSTOP of the leader's `run`: the same (the guard holds the deadline),
//!   and the stopped `run` resumes as a follower.
//! - Two processes given one `--node` never lead at once.
//! - A `--grace` that does not fit inside the lease is refused.
//! - A CMD that ignores SIGTERM is killed by the deadline when renewals
//!   are blocked (SQLite: another process's write lock; MariaDB: another
//!   session's row lock on the lease row).
//!
//! Each CMD records its pid and its grandchild's pid, and on start checks
//! that no earlier term's process is still alive (a live one writes an
//! `overlap` file). The figures (how long after the signal the old CMD was
//! dead) are printed: `cargo test -p picolease-cli --test cli cli_term_end:: --
//! --nocapture`.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::{alive, len, signal, wait_event, wait_file, Log, Node, PATIENCE};

const TTL: &str = "1s";

/// CMD: records `PID GRANDCHILD` in `pids-NODE-EPOCH`, complains in
/// `overlap` if any earlier term's process lives, then sleeps.
fn script(dir: &Path) -> String {
    format!(
        r#"d={dir}
for f in "$d"/pids-*; do
  [ -e "$f" ] || continue
  for p in $(cat "$f"); do
    if [ -e /proc/$p ] && ! grep -q ') Z ' /proc/$p/stat; then echo "$p from $f" >> "$d/overlap"; fi
  done
done
sleep 60 &
echo "$$ $!" > "$d/tmp-$PICOLEASE_NODE-$PICOLEASE_EPOCH"
mv "$d/tmp-$PICOLEASE_NODE-$PICOLEASE_EPOCH" "$d/pids-$PICOLEASE_NODE-$PICOLEASE_EPOCH"
echo "$PICOLEASE_HOLDER" > "$d/holder-$PICOLEASE_NODE-$PICOLEASE_EPOCH"
exec sleep 60"#,
        dir = dir.display()
    )
}

/// Where the processes meet: a database URL and the global flags naming
/// the table; a MariaDB table is dropped when this is.
struct Place {
    url: String,
    global: Vec<String>,
    mysql_table: Option<String>,
}

impl Place {
    fn sqlite(db: &Path) -> Self {
        Place {
            url: format!("sqlite://{}", db.display()),
            global: Vec::new(),
            mysql_table: None,
        }
    }

    /// A fresh table of test `test`'s own on the MariaDB server.
    #[cfg(feature = "mysql")]
    fn mysql(test: &str) -> Self {
        let table = format!("pl_term_{test}_{}", std::process::id());
        support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
        Place {
            url: "mysql://root@127.0.0.1:3306/test".into(),
            global: vec!["--table".into(), table.clone()],
            mysql_table: Some(table),
        }
    }

    fn spawn(&self, node: usize, log: &Log, extra: &[&str]) -> Node {
        let global: Vec<&str> = self.global.iter().map(String::as_str).collect();
        support::spawn(&self.url, &global, "job", TTL, node, log, extra)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        #[cfg(feature = "mysql")]
        if let Some(table) = &self.mysql_table {
            let drop = format!("DROP TABLE IF EXISTS {table}");
            let _ = std::panic::catch_unwind(|| support::mysql::sql("test", &drop));
        }
    }
}

/// The pids (CMD, grandchild) the leader's CMD recorded.
fn pids_of(dir: &Path, node: usize, epoch: u64) -> Vec<i32> {
    wait_file(&dir.join(format!("pids-n{node}-{epoch}")))
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Waits until none of `pids` is alive; how long that took.
fn until_dead(pids: &[i32], since: Instant) -> Duration {
    let deadline = Instant::now() + PATIENCE;
    while pids.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "{pids:?} still alive");
        std::thread::sleep(Duration::from_millis(2));
    }
    since.elapsed()
}

fn stop_all(nodes: &mut [Node], skip: &[usize]) {
    for (i, node) in nodes.iter().enumerate() {
        if !skip.contains(&i) {
            signal(node, Signal::SIGTERM);
        }
    }
    for (i, node) in nodes.iter_mut().enumerate() {
        let status = node.child.wait().unwrap();
        if !skip.contains(&i) {
            assert_eq!(status.code(), Some(0), "node {i} exits 0 on SIGTERM");
        }
        node.reader.take().unwrap().join().unwrap();
    }
}

#[test]
fn a_killed_or_stopped_run_takes_its_command_and_grandchild_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let place = Place::sqlite(&dir.path().join("leases.db"));
    killed_or_stopped(&place, dir.path());
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_a_killed_or_stopped_run_takes_its_command_and_grandchild_with_it() {
    let dir = tempfile::tempdir().unwrap();
    killed_or_stopped(&Place::mysql("killed"), dir.path());
}

fn killed_or_stopped(place: &Place, dir: &Path) {
    let log: Log = Arc::default();
    let script = script(dir);
    let cmd = ["--", "sh", "-c", script.as_str()];
    let mut nodes: Vec<Node> = (0..3).map(|i| place.spawn(i, &log, &cmd)).collect();

    // SIGKILL: nothing of `run` can act; the guard sees its socket close.
    let first = wait_event(&log, 0, |e| e.kind() == "leader");
    let child = wait_event(&log, 0, |e| e.node == first.node && e.kind() == "child");
    let pids = pids_of(dir, first.node, first.epoch());
    assert_eq!(child.json["pid"].as_i64(), Some(pids[0] as i64));
    assert!(pids.iter().all(|p| alive(*p)));
    let holder = wait_file(&dir.join(format!("holder-n{}-{}", first.node, first.epoch())));
    assert_eq!(
        holder.trim(),
        first.json["holder"].as_str().unwrap(),
        "PICOLEASE_HOLDER is the stored holder id"
    );
    let mark = len(&log);
    let killed = Instant::now();
    signal(&nodes[first.node], Signal::SIGKILL);
    let dead_after_kill = until_dead(&pids, killed);
    let second = wait_event(&log, mark, |e| e.kind() == "leader");
    let second_pids = pids_of(dir, second.node, second.epoch());
    println!(
        "SIGKILL of run: its CMD and grandchild dead after {dead_after_kill:?}; the successor led {:?} after the kill",
        second.read_at - killed
    );

    // SIGSTOP: `run` cannot act, the guard kills by the deadline.
    let mark = len(&log);
    let stopped = Instant::now();
    signal(&nodes[second.node], Signal::SIGSTOP);
    let dead_after_stop = until_dead(&second_pids, stopped);
    let third = wait_event(&log, mark, |e| e.kind() == "leader");
    pids_of(dir, third.node, third.epoch());
    println!(
        "SIGSTOP of run: its CMD and grandchild dead after {dead_after_stop:?} (ttl {TTL}); the successor led {:?} after the stop",
        third.read_at - stopped
    );
    assert!(
        dead_after_stop < Duration::from_secs(1),
        "killed by the deadline (ttl 1 s from the last renew): {dead_after_stop:?}"
    );
    let resumed = len(&log);
    signal(&nodes[second.node], Signal::SIGCONT);
    let first_word = wait_event(&log, resumed, |e| {
        e.node == second.node && matches!(e.kind(), "leader" | "follower")
    });
    assert_eq!(first_word.kind(), "follower", "{first_word:?}");

    stop_all(&mut nodes, &[first.node]);
    let overlap = std::fs::read_to_string(dir.join("overlap")).unwrap_or_default();
    assert!(
        overlap.is_empty(),
        "an earlier term's process was alive when a successor's CMD started: {overlap}"
    );
    let events = log.lock().unwrap().clone();
    let exits: Vec<_> = events
        .iter()
        .filter(|e| e.kind() == "child_exit")
        .map(|e| {
            (
                e.node,
                e.json["pid"].as_i64(),
                e.json.get("signal").cloned(),
            )
        })
        .collect();
    assert!(
        exits
            .iter()
            .any(|(node, pid, _)| *node == second.node && *pid == Some(second_pids[0] as i64)),
        "the stopped run reports its CMD's end after it resumes: {exits:?}"
    );
}

#[test]
fn two_processes_with_one_node_name_never_lead_at_once() {
    let dir = tempfile::tempdir().unwrap();
    twins(&Place::sqlite(&dir.path().join("leases.db")));
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_two_processes_with_one_node_name_never_lead_at_once() {
    twins(&Place::mysql("twins"));
}

fn twins(place: &Place) {
    let log: Log = Arc::default();
    // Both are `--node n0`.
    let mut nodes: Vec<Node> = (0..2).map(|_| place.spawn(0, &log, &[])).collect();
    let first = wait_event(&log, 0, |e| e.kind() == "leader");
    std::thread::sleep(Duration::from_secs(3));
    let events = log.lock().unwrap().clone();
    let leaders: Vec<_> = events.iter().filter(|e| e.kind() == "leader").collect();
    assert_eq!(
        leaders.len(),
        1,
        "one lead, no ping-pong between the twins: {events:#?}"
    );
    let holder = first.json["holder"].as_str().unwrap().to_string();
    assert!(holder.starts_with("n0#"), "{holder}");
    assert_eq!(first.json["node"], "n0");
    // The row holds the full holder id.
    let status = Command::new(env!("CARGO_BIN_EXE_picolease"))
        .args(["--db", &place.url])
        .args(&place.global)
        .args(["status", "--json"])
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(rows[0]["holder"].as_str(), Some(holder.as_str()));
    stop_all(&mut nodes, &[]);
}

#[test]
fn a_grace_that_does_not_fit_inside_the_lease_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_picolease"))
            .args(["--db", &url, "run", "--name", "job", "--ttl", "1s"])
            .args(extra)
            .output()
            .unwrap()
    };
    // ttl 1 s: the bound is 1000 − 10 − 1 − 250 − 250 = 489 ms.
    let out = run(&["--grace", "489ms", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--grace") && stderr.contains("489ms"),
        "{stderr}"
    );
    assert!(!dir.path().join("leases.db").exists(), "nothing written");
    // Within the bound, or 0, it runs (CMD exits 0 at once: so does run).
    for grace in ["488ms", "0"] {
        let out = run(&["--grace", grace, "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "--grace {grace}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_by_the_deadline_when_renewals_are_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let place = Place::sqlite(&db);
    stubborn_command(&place, dir.path(), || {
        // Another process takes the write lock.
        let lock = rusqlite::Connection::open(&db).unwrap();
        lock.execute_batch("BEGIN IMMEDIATE").unwrap();
        Box::new(lock)
    });
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_a_command_that_ignores_sigterm_is_killed_by_the_deadline_when_renewals_are_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let place = Place::mysql("stubborn");
    let table = place.mysql_table.clone().unwrap();
    stubborn_command(&place, dir.path(), || {
        // Another session locks the lease row and keeps its transaction
        // open.
        Box::new(support::mysql::RowLock::take(&table, "job"))
    });
}

/// `run` with a CMD that ignores SIGTERM leads; `block` (what it returns
/// is held until the end) stops its renewals; the CMD must be SIGKILLed by
/// the deadline.
fn stubborn_command(place: &Place, dir: &Path, block: impl FnOnce() -> Box<dyn std::any::Any>) {
    let log: Log = Arc::default();
    let pid_file = dir.join("stubborn.pid");
    // SIGTERM is ignored, and stays ignored across exec.
    let script = format!(
        "trap '' TERM; echo $$ > {0}.tmp && mv {0}.tmp {0}; exec sleep 60",
        pid_file.display()
    );
    let cmd = ["--grace", "200ms", "--", "sh", "-c", script.as_str()];
    let mut nodes = vec![place.spawn(0, &log, &cmd)];
    wait_event(&log, 0, |e| e.kind() == "leader");
    let pid: i32 = wait_file(&pid_file).trim().parse().unwrap();
    assert!(alive(pid));

    // Renewals block; the deadline (at most ttl·(1 − ρ) after the last
    // renew was sent) passes.
    let mark = len(&log);
    let lock = block();
    let locked = Instant::now();
    let dead_after = until_dead(&[pid], locked);
    println!(
        "a CMD ignoring SIGTERM, renewals blocked by a lock: dead {dead_after:?} after the lock (ttl {TTL})"
    );
    assert!(
        dead_after < Duration::from_millis(1_500),
        "SIGKILL at the deadline, at most ttl after the lock: {dead_after:?}"
    );
    let demoted = wait_event(&log, mark, |e| e.kind() == "follower");
    assert_eq!(demoted.json["reason"], "expired", "{demoted:?}");
    let exit = wait_event(&log, mark, |e| e.kind() == "child_exit");
    assert_eq!(exit.json["signal"], "SIGKILL", "{exit:?}");
    drop(lock);
    stop_all(&mut nodes, &[]);
}
