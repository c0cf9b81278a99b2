//! Helpers shared by the multi-process CLI tests (SQLite and PostgreSQL):
//! spawning `picolease run --json` processes, recording their events,
//! waiting for one, and checking the recorded terms.

#![allow(dead_code)]

pub mod http;
pub mod mysql;
pub mod pg;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// Generous for a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// One event line, with the index of the process that printed it and when
/// the test read it.
#[derive(Clone, Debug)]
pub struct Event {
    pub node: usize,
    pub json: Value,
    pub read_at: Instant,
}

impl Event {
    pub fn kind(&self) -> &str {
        self.json["event"].as_str().unwrap_or("")
    }
    pub fn epoch(&self) -> u64 {
        self.json["epoch"].as_u64().expect("epoch is a number")
    }
    pub fn unix_ms(&self) -> u64 {
        self.json["unix_ms"].as_u64().expect("unix_ms is a number")
    }
}

pub type Log = Arc<Mutex<Vec<Event>>>;

pub struct Node {
    pub child: Child,
    pub reader: Option<std::thread::JoinHandle<()>>,
}

/// A test that fails midway leaves no `run` behind (an orphan would go on
/// starting CMDs in a deleted directory); after a normal end the process
/// has exited already and this changes nothing.
impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `picolease --db DB [ARGS…] run --name LEASE --ttl TTL --json
/// --node n<node> [EXTRA…]` and records its events in `log`.
pub fn spawn(
    db: &str,
    global: &[&str],
    lease: &str,
    ttl: &str,
    node: usize,
    log: &Log,
    extra: &[&str],
) -> Node {
    let binary = Command::new(env!("CARGO_BIN_EXE_picolease"));
    spawn_command(binary, db, global, (lease, ttl), node, log, extra)
}

/// [`spawn`] through `binary`: the picolease binary, or a command that
/// runs it (in a network namespace, say).
pub fn spawn_command(
    mut binary: Command,
    db: &str,
    global: &[&str],
    (lease, ttl): (&str, &str),
    node: usize,
    log: &Log,
    extra: &[&str],
) -> Node {
    let mut child = binary
        .env_remove("PICOLEASE_DB")
        .args(["--db", db])
        .args(global)
        .args(["run", "--name", lease, "--ttl", ttl, "--json"])
        .args(["--node", &format!("n{node}")])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("picolease starts");
    let stdout = child.stdout.take().unwrap();
    let log = Arc::clone(log);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let json: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"));
            for key in ["event", "name", "node", "epoch", "unix_ms"] {
                assert!(json.get(key).is_some(), "{key} missing in {line}");
            }
            log.lock().unwrap().push(Event {
                node,
                json,
                read_at: Instant::now(),
            });
        }
    });
    Node {
        child,
        reader: Some(reader),
    }
}

/// Runs `picolease ARGS…` to completion (without `PICOLEASE_DB` from the
/// environment) and returns what it printed and its status.
pub fn picolease(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_picolease"))
        .args(args)
        .env_remove("PICOLEASE_DB")
        .output()
        .expect("the binary runs")
}

pub fn signal(node: &Node, signal: Signal) {
    kill(Pid::from_raw(node.child.id() as i32), signal).unwrap();
}

/// Stops `nodes` with SIGTERM (every one signalled first, so their
/// releases overlap as in a rolling stop), checks that each exits 0, and
/// joins their readers: every line they printed is in the log after this.
pub fn stop_cleanly(nodes: &mut [Node]) {
    for node in nodes.iter() {
        signal(node, Signal::SIGTERM);
    }
    for node in nodes.iter_mut() {
        assert_eq!(node.child.wait().unwrap().code(), Some(0));
        node.reader.take().unwrap().join().unwrap();
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Waits for an event matching `pred` among those after index `from`.
pub fn wait_event(log: &Log, from: usize, pred: impl Fn(&Event) -> bool) -> Event {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let events = log.lock().unwrap().clone();
        if let Some(e) = events[from.min(events.len())..].iter().find(|e| pred(e)) {
            return e.clone();
        }
        assert!(Instant::now() < deadline, "timed out; events: {events:#?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn len(log: &Log) -> usize {
    log.lock().unwrap().len()
}

/// Leadership intervals from the events: a term ends at the node's
/// follower event, or at `ends[node]` (the instant it was killed or
/// frozen), whichever comes first.
pub fn check_terms(events: &[Event], ends: &[(usize, u64)]) {
    let mut terms: Vec<(usize, u64, u64, u64)> = Vec::new();
    let mut epochs = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if e.kind() != "leader" {
            continue;
        }
        epochs.push((e.unix_ms(), e.epoch()));
        let follower = events[i + 1..]
            .iter()
            .find(|f| f.node == e.node && f.kind() == "follower")
            .map(|f| {
                assert_eq!(
                    f.epoch(),
                    e.epoch(),
                    "a follower event names the epoch it left"
                );
                f.unix_ms()
            });
        let cut = ends
            .iter()
            .filter(|(n, at)| *n == e.node && *at >= e.unix_ms())
            .map(|(_, at)| *at)
            .min();
        let end = [follower, cut]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(u64::MAX);
        terms.push((e.node, e.epoch(), e.unix_ms(), end));
    }
    epochs.sort();
    for pair in epochs.windows(2) {
        assert!(
            pair[0].1 < pair[1].1,
            "epochs strictly increase in time: {epochs:?}"
        );
    }
    for (i, a) in terms.iter().enumerate() {
        for b in &terms[i + 1..] {
            assert!(
                !(a.2 < b.3 && b.2 < a.3),
                "two leaders at once: {a:?} and {b:?}\nall terms: {terms:?}"
            );
        }
    }
}

pub fn alive(pid: i32) -> bool {
    // A reaped child has no /proc entry; a zombie would show state Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

pub fn wait_file(path: &Path) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The scenario both backends run: with `nodes` contending for one lease,
/// SIGKILL the first leader (a successor within ttl + margin), SIGTERM the
/// second (`follower`/`released`, exit 0, a successor within
/// `clean_handover`), SIGSTOP the third past its ttl then SIGCONT (another
/// leads meanwhile; the paused node's first word is `follower`, at once, and
/// it never leads again at its old epoch); then stop everyone and check the
/// recorded terms: never two leaders at once, epochs strictly increasing.
pub fn kill_term_and_pause(
    nodes: &mut [Node],
    log: &Log,
    ttl: Duration,
    clean_handover: Duration,
) -> Handovers {
    let mut ends = Vec::new();
    let first = wait_event(log, 0, |e| e.kind() == "leader");
    assert_eq!(first.epoch(), 1);

    let mark = len(log);
    ends.push((first.node, now_ms()));
    let killed_at = Instant::now();
    signal(&nodes[first.node], Signal::SIGKILL);
    let second = wait_event(log, mark, |e| e.kind() == "leader");
    assert_ne!(second.node, first.node);
    let gap = second.read_at - killed_at;
    assert!(
        gap < ttl + Duration::from_secs(3),
        "takeover after a crash took {gap:?}"
    );
    assert!(second.epoch() > first.epoch());

    let mark = len(log);
    signal(&nodes[second.node], Signal::SIGTERM);
    let released = wait_event(log, mark, |e| {
        e.node == second.node && e.kind() == "follower"
    });
    assert_eq!(released.json["reason"], "released");
    assert_eq!(released.epoch(), second.epoch());
    assert_eq!(
        nodes[second.node].child.wait().unwrap().code(),
        Some(0),
        "SIGTERM exits 0"
    );
    let third = wait_event(log, mark, |e| e.kind() == "leader");
    assert!(third.epoch() > second.epoch());
    let handover = third.read_at - released.read_at;
    assert!(
        handover < clean_handover,
        "handover after a clean stop took {handover:?}"
    );

    let mark = len(log);
    ends.push((third.node, now_ms()));
    signal(&nodes[third.node], Signal::SIGSTOP);
    let fourth = wait_event(log, mark, |e| e.kind() == "leader");
    assert_ne!(fourth.node, third.node);
    assert!(fourth.epoch() > third.epoch());
    std::thread::sleep(ttl / 2);
    let resumed_at = Instant::now();
    let resumed_ms = now_ms();
    signal(&nodes[third.node], Signal::SIGCONT);
    let demoted = wait_event(log, mark, |e| e.node == third.node);
    assert_eq!(
        demoted.kind(),
        "follower",
        "the first thing it says after resuming"
    );
    assert!(
        matches!(demoted.json["reason"].as_str(), Some("expired" | "lost")),
        "{demoted:?}"
    );
    assert_eq!(demoted.epoch(), third.epoch());
    // By its own stamp: a resumed leader says it at once (DESIGN §4b),
    // not at its next wake-up (an interval: the SQLite regression of
    // fcc7a1a, which a bound of four intervals let through).
    let late = demoted.unix_ms().saturating_sub(resumed_ms);
    assert!(
        late <= 50,
        "reported {late} ms after SIGCONT (read {:?} after it)",
        demoted.read_at - resumed_at
    );

    // Let it run a little, then stop everyone cleanly.
    std::thread::sleep(ttl);
    for (i, node) in nodes.iter().enumerate() {
        if i != first.node && i != second.node {
            signal(node, Signal::SIGTERM);
        }
    }
    for (i, node) in nodes.iter_mut().enumerate() {
        let status = node.child.wait().unwrap();
        if i != first.node {
            assert_eq!(status.code(), Some(0), "node {i}");
        }
        node.reader.take().unwrap().join().unwrap();
    }
    let events = log.lock().unwrap().clone();
    assert!(
        !events.iter().any(|e| e.node == third.node
            && e.kind() == "leader"
            && e.epoch() == third.epoch()
            && e.read_at > resumed_at),
        "the paused node never leads again at its old epoch"
    );
    let leaders = events.iter().filter(|e| e.kind() == "leader").count();
    assert!(leaders >= 4, "{events:#?}");
    check_terms(&events, &ends);
    Handovers {
        after_kill: gap,
        after_term: handover,
    }
}

/// What [`kill_term_and_pause`] measured: from the SIGKILL to the
/// successor's `leader` line, and from the SIGTERMed leader's `follower`
/// line to its successor's `leader` line.
#[derive(Debug)]
pub struct Handovers {
    pub after_kill: Duration,
    pub after_term: Duration,
}

/// The leases each live process holds, by its `leader`/`follower` events
/// (the processes in `dead` left out).
pub fn held(log: &Log, dead: &BTreeSet<usize>) -> BTreeMap<usize, BTreeSet<String>> {
    let mut held: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for event in log.lock().unwrap().iter() {
        let name = event.json["name"].as_str().unwrap().to_string();
        let mine = held.entry(event.node).or_default();
        match event.kind() {
            "leader" => {
                mine.insert(name);
            }
            "follower" => {
                mine.remove(&name);
            }
            _ => {}
        }
    }
    held.retain(|node, _| !dead.contains(node));
    held
}

/// How many leases each live process holds, sorted.
pub fn counts(log: &Log, dead: &BTreeSet<usize>) -> Vec<usize> {
    let mut counts: Vec<usize> = held(log, dead).values().map(BTreeSet::len).collect();
    counts.sort_unstable();
    counts
}

/// Polls `done` every 20 ms until it holds (how long that took); fails
/// the test past `limit`.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

/// `events` merged: each process's lines of one lease in the order it
/// printed them, and otherwise the line stamped first (a `follower`
/// before a `leader` of the same millisecond) goes first. (A process's
/// lines of different leases need not be in stamp order: its printer
/// takes each lease's transitions from their own queue.)
fn merged_by_stamp(events: &[Event]) -> Vec<&Event> {
    let mut queues: BTreeMap<(usize, &str), std::collections::VecDeque<&Event>> = BTreeMap::new();
    for event in events {
        let lease = event.json["name"].as_str().unwrap_or("");
        queues
            .entry((event.node, lease))
            .or_default()
            .push_back(event);
    }
    let mut merged = Vec::with_capacity(events.len());
    while let Some(queue) = queues
        .values_mut()
        .filter(|q| !q.is_empty())
        .min_by_key(|q| q.front().map(|e| (e.unix_ms(), e.kind() == "leader")))
    {
        merged.extend(queue.pop_front());
    }
    merged
}

/// Fails the test if any lease in `events` was led by two processes at
/// once; `killed` (a `now_ms()` read after a process killed with SIGKILL
/// was reaped, and that process) ends the process's terms there.
///
/// The events are taken in the order their lines stamp (`unix_ms`, when
/// the transition happened; a `follower` before a `leader` of the same
/// millisecond), not in the order the test's reader threads, one per
/// process, happened to log them: a loaded machine may run one process's
/// reader a few milliseconds late, after another process already printed
/// the next holder's `leader` line (seen once in CI: a set lease given
/// back for the share, `cli_handover_set`). Each process's own lines of a
/// lease keep their order ([`merged_by_stamp`]). A reaped process prints
/// nothing more, so all its lines stamp at or before `killed`'s time.
pub fn assert_never_led_twice(events: &[Event], killed: Option<(u64, usize)>) {
    match killed {
        Some((reaped_at, victim)) => assert_never_led_twice_killing(events, reaped_at, &[victim]),
        None => assert_never_led_twice_killing(events, 0, &[]),
    }
}

/// [`assert_never_led_twice`] with several processes killed, all reaped
/// by `reaped_at`.
pub fn assert_never_led_twice_killing(events: &[Event], reaped_at: u64, victims: &[usize]) {
    let mut leader: BTreeMap<String, usize> = BTreeMap::new();
    for event in merged_by_stamp(events) {
        if event.unix_ms() > reaped_at {
            leader.retain(|_, node| !victims.contains(node));
        }
        let name = event.json["name"].as_str().unwrap().to_string();
        match event.kind() {
            "leader" => {
                if let Some(other) = leader.insert(name.clone(), event.node) {
                    let lines: Vec<String> = events
                        .iter()
                        .filter(|e| e.json["name"].as_str() == Some(name.as_str()))
                        .map(|e| format!("n{}: {}", e.node, e.json))
                        .collect();
                    panic!(
                        "{name} led by {other} and {} at once; its lines as logged:\n{}",
                        event.node,
                        lines.join("\n")
                    );
                }
            }
            "follower" if leader.get(&name) == Some(&event.node) => {
                leader.remove(&name);
            }
            _ => {}
        }
    }
}

/// A small deterministic generator for the randomised process tests (the
/// seed is printed with a failure, so a run can be repeated).
pub struct Lcg(pub u64);

impl Lcg {
    /// The next number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }

    /// A duration from `from` to `to` ms.
    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}
