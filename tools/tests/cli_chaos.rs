//! Random chaos among five `picolease run --ttl 2s --interval 500ms
//! --json` processes on one SQLite file: SIGKILLs, clean stops (SIGTERM)
//! and pauses (SIGSTOP for 0.2–3 s, then SIGCONT), one every 0.2–1 s, a
//! killed or stopped process replaced by a new one. At the end no two
//! processes' claims of the lease overlap: a term runs from its `leader`
//! line to its `follower` line, cut at its process's SIGKILL, and a paused
//! process claims nothing from its SIGSTOP until 50 ms after its SIGCONT
//! (its work is stopped by its guard meanwhile, and a resumed leader whose
//! deadline passed must say `follower` within that: DESIGN §4b). The
//! SQLite regression of fcc7a1a (a resumed leader said `follower` up to an
//! interval late) showed 0.30–0.49 s overlaps several times per run.
//!
//! CI runs 30 s; the long run is ignored:
//! `cargo test -p picolease-cli --test cli cli_chaos:: -- --ignored --nocapture`
//! (180 s). The seed is printed; `PICOLEASE_CHAOS_SEED=N` repeats one.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::{now_ms, signal, spawn, Event, Lcg, Log, Node};

const PROCESSES: usize = 5;
/// How long after SIGCONT a resumed process may still claim the lease.
const RESUME_MS: u64 = 50;

/// What happened to a process, on the wall clock the events are stamped
/// with.
#[derive(Debug, Default)]
struct Fate {
    killed_at: Option<u64>,
    /// `[stop, cont)` windows.
    frozen: Vec<(u64, u64)>,
}

fn chaos(duration: Duration) {
    let seed = std::env::var("PICOLEASE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(now_ms);
    println!("chaos seed {seed} (PICOLEASE_CHAOS_SEED={seed} repeats it)");
    let mut rng = Lcg(seed);
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("chaos.db").display());
    let log: Log = Arc::default();
    let start = |index: usize| spawn(&db, &[], "job", "2s", index, &log, &["--interval", "500ms"]);
    let mut nodes: BTreeMap<usize, Node> = (0..PROCESSES).map(|i| (i, start(i))).collect();
    // When each process was started: a SIGTERM before `run` has set up its
    // signal handling would kill it, not stop it.
    let mut born: BTreeMap<usize, Instant> = nodes.keys().map(|&i| (i, Instant::now())).collect();
    let mut fates: BTreeMap<usize, Fate> = BTreeMap::new();
    let mut next = PROCESSES;
    let (mut kills, mut stops, mut pauses) = (0, 0, 0);
    let began = Instant::now();
    while began.elapsed() < duration {
        std::thread::sleep(rng.millis(200, 1_000));
        let live: Vec<usize> = nodes.keys().copied().collect();
        // Half the time the process that last said `leader`, so that the
        // leader is hit often.
        let leader = log
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|e| e.kind() == "leader")
            .map(|e| e.node)
            .filter(|n| nodes.contains_key(n));
        let victim = match leader {
            Some(node) if rng.below(2) == 0 => node,
            _ => live[rng.below(live.len() as u64) as usize],
        };
        let settled = born[&victim].elapsed() > Duration::from_millis(500);
        match rng.below(3) {
            1 if !settled => {}
            0 => {
                fates.entry(victim).or_default().killed_at = Some(now_ms());
                signal(&nodes[&victim], Signal::SIGKILL);
                let mut node = nodes.remove(&victim).unwrap();
                node.child.wait().unwrap();
                node.reader.take().unwrap().join().unwrap();
                kills += 1;
            }
            1 => {
                signal(&nodes[&victim], Signal::SIGTERM);
                let mut node = nodes.remove(&victim).unwrap();
                let status = node.child.wait().unwrap();
                assert_eq!(status.code(), Some(0), "n{victim}: SIGTERM exits 0");
                node.reader.take().unwrap().join().unwrap();
                stops += 1;
            }
            _ => {
                let stopped = now_ms();
                signal(&nodes[&victim], Signal::SIGSTOP);
                std::thread::sleep(rng.millis(200, 3_000));
                let cont = now_ms();
                signal(&nodes[&victim], Signal::SIGCONT);
                fates
                    .entry(victim)
                    .or_default()
                    .frozen
                    .push((stopped, cont));
                pauses += 1;
            }
        }
        if nodes.len() < PROCESSES {
            nodes.insert(next, start(next));
            born.insert(next, Instant::now());
            next += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut left: Vec<Node> = nodes.into_values().collect();
    support::stop_cleanly(&mut left);
    let events = log.lock().unwrap().clone();
    let terms = claims(&events, &fates);
    let led = terms.len();
    println!(
        "{:?} of chaos: {kills} kills, {stops} clean stops, {pauses} pauses, {led} terms, {} processes",
        duration, next
    );
    assert!(led > 5, "the lease moved: {terms:?}");
    for (i, a) in terms.iter().enumerate() {
        for b in &terms[i + 1..] {
            assert!(
                !(a.2 < b.3 && b.2 < a.3),
                "two claims at once (seed {seed}): n{} epoch {} [{}, {}) and n{} epoch {} [{}, {})",
                a.0,
                a.1,
                a.2,
                a.3,
                b.0,
                b.1,
                b.2,
                b.3
            );
        }
    }
}

/// Each claim as `(node, epoch, from, to)`: a term from its `leader` line
/// to its `follower` line or its process's SIGKILL, less the windows in
/// which its process was frozen (and the first [`RESUME_MS`] after each).
fn claims(events: &[Event], fates: &BTreeMap<usize, Fate>) -> Vec<(usize, u64, u64, u64)> {
    let mut claims = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if e.kind() != "leader" {
            continue;
        }
        let fate = fates.get(&e.node);
        let follower = events[i + 1..]
            .iter()
            .find(|f| f.node == e.node && f.kind() == "follower")
            .map(Event::unix_ms);
        let killed = fate.and_then(|f| f.killed_at);
        let end = [follower, killed]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(u64::MAX);
        let mut from = e.unix_ms();
        let mut windows: Vec<(u64, u64)> = fate.map(|f| f.frozen.clone()).unwrap_or_default();
        windows.sort_unstable();
        for (stop, cont) in windows {
            let until = cont + RESUME_MS;
            if until <= from || stop >= end {
                continue;
            }
            if stop > from {
                claims.push((e.node, e.epoch(), from, stop));
            }
            from = from.max(until);
        }
        if from < end {
            claims.push((e.node, e.epoch(), from, end));
        }
    }
    claims
}

#[test]
fn thirty_seconds_of_chaos_on_sqlite_never_show_two_claims_at_once() {
    chaos(Duration::from_secs(30));
}

#[test]
#[ignore = "180 s: run with --ignored"]
fn three_minutes_of_chaos_on_sqlite_never_show_two_claims_at_once() {
    chaos(Duration::from_secs(180));
}
