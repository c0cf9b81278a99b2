//! A leader paused past its deadline says `follower` as soon as it runs
//! again (DESIGN §4b), on every database, for a lone lease and a set:
//! three `picolease run --ttl 1s --json` processes (and one alone), the
//! leader of the moment SIGSTOPped for a random 1.2–3 s (past its deadline, which is at
//! most a ttl after its last renewal) and SIGCONTed, 12 times (20 until
//! 2026-12-06: CI time). Each lease
//! it held must be reported `follower` (reason `expired` or `lost`, the
//! first thing it says of that lease) within 50 ms of the SIGCONT, by the
//! event's own stamp (`unix_ms`, taken when the driver published it).
//!
//! The bound is what the SQLite regression of fcc7a1a failed: its loop
//! waited in `ppoll`, which the kernel restarts at SIGCONT with the time
//! that was left when the process stopped, so the demotion came up to an
//! interval (250 ms here) after the SIGCONT (`sqlite/inbox.rs`). Four
//! intervals (the old 2 s bound of `kill_term_and_pause`) could not tell.
//!
//! PostgreSQL at 127.0.0.1:5432 and MariaDB at 127.0.0.1:3306 must be up:
//! these tests fail, not skip, without them. Each uses a table of its own.
//! The figures (p50 and max per case) are printed:
//! `cargo test -p picolease-cli --test cli cli_pause:: -- --nocapture`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::{held, len, now_ms, signal, spawn, wait_event, wait_for, Lcg, Log, Node, PATIENCE};

/// The bound after SIGCONT.
const BOUND_MS: u64 = 50;
const PAUSES: usize = 12;
const NODES: usize = 3;

/// Where the processes meet; a server table is dropped when this is.
struct Place {
    url: String,
    global: Vec<String>,
    drop_sql: Option<Box<dyn Fn() + Send>>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(drop_sql) = self.drop_sql.take() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(drop_sql));
        }
    }
}

fn sqlite() -> Place {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("pause.db").display());
    Place {
        url,
        global: Vec::new(),
        drop_sql: None,
        _dir: Some(dir),
    }
}

#[cfg(feature = "postgres")]
fn postgres(case: &str) -> Place {
    let url = "postgres://postgres@127.0.0.1:5432/test".to_string();
    let table = format!("pl_pause_{case}_{}", std::process::id());
    support::pg::sql(&url, &format!("DROP TABLE IF EXISTS {table}"));
    let drop_url = url.clone();
    let drop_table = table.clone();
    Place {
        url,
        global: vec!["--table".into(), table],
        drop_sql: Some(Box::new(move || {
            support::pg::sql(&drop_url, &format!("DROP TABLE IF EXISTS {drop_table}"));
        })),
        _dir: None,
    }
}

#[cfg(feature = "mysql")]
fn mysql(case: &str) -> Place {
    let table = format!("pl_pause_{case}_{}", std::process::id());
    support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
    let drop_table = table.clone();
    Place {
        url: "mysql://root@127.0.0.1:3306/test".into(),
        global: vec!["--table".into(), table],
        drop_sql: Some(Box::new(move || {
            support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {drop_table}"));
        })),
        _dir: None,
    }
}

/// Runs the 20 pauses over `names` (one name: a lone lease; several: a
/// set) among `processes` processes and returns each demotion's delay
/// after SIGCONT, in ms.
fn pauses(case: &str, place: &Place, names: &[&str], processes: usize) -> Vec<u64> {
    let log: Log = Arc::default();
    let global: Vec<&str> = place.global.iter().map(String::as_str).collect();
    let extra: Vec<&str> = names[1..].iter().flat_map(|n| ["--name", *n]).collect();
    let mut nodes: Vec<Node> = (0..processes)
        .map(|i| spawn(&place.url, &global, names[0], "1s", i, &log, &extra))
        .collect();
    let mut rng = Lcg(0x5eed ^ case.len() as u64);
    let all: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    let mut delays = Vec::new();
    for round in 0..PAUSES {
        // Every lease led by someone, then pause one of its leaders.
        let mut now = BTreeMap::new();
        wait_for(&format!("{case}: every lease led"), PATIENCE, || {
            now = held(&log, &BTreeSet::new());
            let covered: BTreeSet<String> = now.values().flatten().cloned().collect();
            covered == all
        });
        let leaders: Vec<usize> = now
            .iter()
            .filter(|(_, leases)| !leases.is_empty())
            .map(|(node, _)| *node)
            .collect();
        let victim = leaders[round % leaders.len()];
        let leases = now[&victim].clone();
        let epochs: BTreeMap<String, u64> = leases
            .iter()
            .map(|lease| (lease.clone(), led_at(&log, victim, lease)))
            .collect();
        let mark = len(&log);
        signal(&nodes[victim], Signal::SIGSTOP);
        let pause = Duration::from_millis(1_200 + rng.below(1_800));
        std::thread::sleep(pause);
        let resumed_ms = now_ms();
        let resumed_at = Instant::now();
        signal(&nodes[victim], Signal::SIGCONT);
        for lease in &leases {
            let said = wait_event(&log, mark, |e| {
                e.node == victim && e.json["name"] == lease.as_str()
            });
            if said.kind() == "follower" && said.unix_ms() < resumed_ms {
                // Stamped before the SIGCONT, so before the process
                // stopped (a stopped process stamps nothing): it had left
                // the lease as the SIGSTOP was sent (a set giving up its
                // surplus; once stamped 2 ms after the signal was sent,
                // on a loaded CI run), and its reader thread logged the
                // line after the mark: not a term the pause ended.
                continue;
            }
            assert_eq!(
                said.kind(),
                "follower",
                "{case}, pause {round} ({pause:?}): the first thing n{victim} says of {lease} after resuming: {said:?}"
            );
            assert!(
                matches!(said.json["reason"].as_str(), Some("expired" | "lost")),
                "{case}: {said:?}"
            );
            assert_eq!(said.epoch(), epochs[lease], "{case}: {said:?}");
            let late = said.unix_ms().saturating_sub(resumed_ms);
            assert!(
                late <= BOUND_MS,
                "{case}, pause {round} of {pause:?}: n{victim} said follower of {lease} {late} ms after SIGCONT (read {:?} after it), more than {BOUND_MS} ms",
                said.read_at - resumed_at
            );
            delays.push(late);
        }
    }
    support::stop_cleanly(&mut nodes);
    delays
}

/// The epoch of `node`'s last `leader` event of `lease`.
fn led_at(log: &Log, node: usize, lease: &str) -> u64 {
    let events = log.lock().unwrap();
    events
        .iter()
        .rev()
        .find(|e| e.node == node && e.json["name"] == lease && e.kind() == "leader")
        .expect("it leads")
        .epoch()
}

fn report(case: &str, mut delays: Vec<u64>) {
    delays.sort_unstable();
    let p50 = delays[delays.len() / 2];
    let max = delays[delays.len() - 1];
    println!(
        "{case}: follower after SIGCONT over {} demotions ({PAUSES} pauses of 1.2-3 s, ttl 1 s): p50 {p50} ms, max {max} ms",
        delays.len()
    );
}

const LONE: &[&str] = &["job"];
const SET: &[&str] = &["s0", "s1", "s2"];

/// One case: its name, where its processes meet, its lease names, how
/// many processes.
type Case = (&'static str, Place, &'static [&'static str], usize);

/// Runs `cases` side by side (each pause takes seconds of real time; one
/// after the other they took 3.5 min) and fails naming every case that
/// failed.
fn side_by_side(cases: Vec<Case>) {
    let running: Vec<_> = cases
        .into_iter()
        .map(|(case, place, names, processes)| {
            let thread = std::thread::spawn(move || {
                let delays = pauses(case, &place, names, processes);
                report(case, delays);
            });
            (case, thread)
        })
        .collect();
    let failed: Vec<&str> = running
        .into_iter()
        .filter_map(|(case, thread)| thread.join().is_err().then_some(case))
        .collect();
    assert!(failed.is_empty(), "failed (see above): {failed:?}");
}

/// Alone: nobody else writes while the leader is stopped, so nothing but
/// its own clock can wake it. With contenders, their commits wake a
/// leader's file watch at SIGCONT, which hides a late timer: the SQLite
/// regression failed the alone cases only, by up to an interval.
#[test]
fn sqlite_a_resumed_leader_says_follower_within_50_ms() {
    side_by_side(vec![
        ("sqlite lone", sqlite(), LONE, NODES),
        ("sqlite set", sqlite(), SET, NODES),
        ("sqlite alone, lone", sqlite(), LONE, 1),
        ("sqlite alone, set", sqlite(), SET, 1),
    ]);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_a_resumed_leader_says_follower_within_50_ms() {
    side_by_side(vec![
        ("postgres lone", postgres("lone"), LONE, NODES),
        ("postgres set", postgres("set"), SET, NODES),
        ("postgres alone, lone", postgres("alone"), LONE, 1),
    ]);
}

#[cfg(feature = "mysql")]
#[test]
fn mariadb_a_resumed_leader_says_follower_within_50_ms() {
    side_by_side(vec![
        ("mariadb lone", mysql("lone"), LONE, NODES),
        ("mariadb set", mysql("set"), SET, NODES),
        ("mariadb alone, lone", mysql("alone"), LONE, 1),
    ]);
}
