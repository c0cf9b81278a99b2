//! `picolease status --watch [--json]` on SQLite: every row once at start,
//! again whenever its holder, epoch or free/held state changes, and exit 0
//! on SIGINT or SIGTERM.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use support::PATIENCE;

fn picolease(db: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_picolease"));
    command.env_remove("PICOLEASE_DB").args(["--db", db]);
    command
}

/// Starts `status --watch ARGS` with its stdout lines on a channel.
fn watch(db: &str, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = picolease(db)
        .args(["status", "--watch"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// The next line that `done` accepts (lines before it are returned too).
fn until(lines: &mpsc::Receiver<String>, done: impl Fn(&str) -> bool) -> Vec<String> {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        let left = PATIENCE.saturating_sub(start.elapsed());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no such line; saw {seen:?}"));
        let last = done(&line);
        seen.push(line);
        if last {
            return seen;
        }
    }
}

fn stop(child: &mut Child, signal: Signal) {
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn json_rows_at_start_and_on_each_change_then_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("leases.db").display());
    assert!(picolease(&db)
        .arg("init")
        .output()
        .unwrap()
        .status
        .success());
    let (mut watcher, lines) = watch(&db, &["--json"]);
    let (mut text, text_lines) = watch(&db, &[]);
    until(&text_lines, |l| l.starts_with("no leases"));

    let mut runner = picolease(&db)
        .args(["run", "--name", "job", "--ttl", "1s", "--node", "a"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let held = until(&lines, |l| l.contains("\"holder\":\"a"));
    let row: Value = serde_json::from_str(held.last().unwrap()).unwrap();
    let keys: Vec<&str> = row
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["epoch", "expires_in_ms", "holder", "name"]);
    assert_eq!(row["name"], "job");
    assert_eq!(row["epoch"], 1);
    until(&text_lines, |l| l.starts_with("job ") && l.contains("held"));

    // Renewals change no key: no line until the release.
    kill(Pid::from_raw(runner.id() as i32), Signal::SIGTERM).unwrap();
    runner.wait().unwrap();
    let released = until(&lines, |l| l.contains("\"holder\":null"));
    assert_eq!(released.len(), 1, "renewals printed nothing: {released:?}");
    let row: Value = serde_json::from_str(&released[0]).unwrap();
    assert_eq!(row["epoch"], 1);
    assert_eq!(row["expires_in_ms"], Value::Null);
    until(&text_lines, |l| {
        l.starts_with("job ") && l.ends_with("free")
    });

    // A late watcher prints every row once at start.
    let (mut late, late_lines) = watch(&db, &["--json"]);
    let first = until(&late_lines, |l| l.contains("\"name\":\"job\""));
    assert_eq!(first.len(), 1);

    stop(&mut watcher, Signal::SIGINT);
    stop(&mut text, Signal::SIGTERM);
    stop(&mut late, Signal::SIGTERM);
}
