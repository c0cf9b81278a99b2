//! Planned handover (DESIGN §3 "Planned handover") between `picolease run
//! --json -- CMD` processes, on a SQLite file, on the PostgreSQL server
//! at 127.0.0.1:5432 and on the MariaDB server at 127.0.0.1:3306 (a table
//! per test; FAILS, not skips, when a server is unreachable), with real
//! signals.
//!
//! - A rolling replacement (start a new node, hand the lease to it if the
//!   node it replaces leads, SIGTERM the old one; twice over, old → new →
//!   newer) moves the lease once per replaced leader, always onto the
//!   replacing generation, at epoch + 1, and never runs two CMDs at once.
//! - A successor that cannot take its reservation (SIGSTOPped) loses it:
//!   nobody leads during the reservation (two intervals), another node
//!   leads within the reservation and an interval after it.
//! - `handover` refuses a missing lease (1), an empty node name (2) and a
//!   free lease (1).
//! - Preference (DESIGN §3 "Preferred holders"): a node of higher
//!   `--priority` takes the lease from a lower one by the holder's own
//!   handover within two intervals of joining, never onto a node that
//!   announces nothing; `status --members` lists the live candidate, and
//!   `handover` without `--to` hands the lease to it.
//! - "Hand over, then exit": on SIGUSR1 `run` stops CMD, hands the lease
//!   to the preferred candidate and exits 0; with `--handover-on-term`
//!   SIGTERM does the same, and with no candidate live it releases.
//!
//! The leaderless time of each handover (from the old CMD's exit to the
//! successor's CMD's start, by the `child_exit` and `child` events) is
//! printed: `cargo test -p picolease-cli --test cli cli_handover:: --
//! --nocapture --test-threads 1`.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::{len, now_ms, signal, wait_event, Event, Log, Node, PATIENCE};

#[cfg(feature = "postgres")]
const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";
#[cfg(feature = "mysql")]
const MYSQL: &str = "mysql://root@127.0.0.1:3306/test";
const LEASE: &str = "job";
const TTL: &str = "2s";
/// ttl / 4, `run`'s default.
const INTERVAL: Duration = Duration::from_millis(500);
/// The CMD every `run` starts while it leads.
const CMD: [&str; 4] = ["--", "sh", "-c", "exec sleep 1000"];

/// Where the processes meet: a SQLite file in a temporary directory, or a
/// PostgreSQL table of the test's own (dropped when this is, passed or
/// failed).
struct Place {
    url: String,
    table: String,
    sqlite: Option<PathBuf>,
    /// On the MariaDB server (else PostgreSQL's, when not SQLite).
    mysql: bool,
    _dir: Option<tempfile::TempDir>,
}

impl Place {
    fn sqlite(test: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("leases.db");
        Place {
            url: format!("sqlite://{}", file.display()),
            table: format!("pl_cli_handover_{test}"),
            sqlite: Some(file),
            mysql: false,
            _dir: Some(dir),
        }
    }

    #[cfg(feature = "postgres")]
    fn postgres(test: &str) -> Self {
        let table = format!("pl_cli_handover_{test}_{}", std::process::id());
        // Panics (fails the test) when the server is unreachable.
        support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
        Place {
            url: POSTGRES.into(),
            table,
            sqlite: None,
            mysql: false,
            _dir: None,
        }
    }

    #[cfg(feature = "mysql")]
    fn mysql(test: &str) -> Self {
        let table = format!("pl_cli_handover_{test}_{}", std::process::id());
        // Panics (fails the test) when the server is unreachable.
        support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
        Place {
            url: MYSQL.into(),
            table,
            sqlite: None,
            mysql: true,
            _dir: None,
        }
    }

    /// `picolease --db URL --table T ARGS…` to completion.
    fn picolease(&self, args: &[&str]) -> Output {
        let mut all = vec!["--db", &self.url, "--table", &self.table];
        all.extend_from_slice(args);
        support::picolease(&all)
    }

    /// The names of the handover request rows left in the table: none
    /// once every `handover` has returned (each withdraws its request).
    fn requests(&self) -> Vec<String> {
        let query = format!(
            "SELECT name FROM {} WHERE name LIKE 'picolease.handover:%'",
            self.table
        );
        #[cfg(feature = "mysql")]
        if self.mysql {
            return support::mysql::sql("test", &query);
        }
        match &self.sqlite {
            Some(file) => {
                let conn = rusqlite::Connection::open(file).unwrap();
                let mut stmt = conn.prepare(&query).unwrap();
                let names = stmt.query_map([], |r| r.get(0)).unwrap();
                names.map(Result::unwrap).collect()
            }
            #[cfg(feature = "postgres")]
            None => support::pg::sql(POSTGRES, &query),
            #[cfg(not(feature = "postgres"))]
            None => unreachable!("a PostgreSQL place without the feature"),
        }
    }

    /// `handover --name LEASE --to NODE`: its output, after checking it
    /// exited 0.
    fn handover(&self, to: &str) -> String {
        let out = self.picolease(&["handover", "--name", LEASE, "--to", to]);
        let (stdout, stderr) = texts(&out);
        assert_eq!(
            out.status.code(),
            Some(0),
            "handover --to {to}:\n{stdout}{stderr}"
        );
        stdout
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        #[cfg(feature = "mysql")]
        if self.mysql {
            let drop = format!("DROP TABLE IF EXISTS {}", self.table);
            let _ = std::panic::catch_unwind(|| support::mysql::sql("test", &drop));
            return;
        }
        #[cfg(feature = "postgres")]
        if self.sqlite.is_none() {
            let drop = format!("DROP TABLE IF EXISTS {}", self.table);
            let _ = std::panic::catch_unwind(|| support::pg::sql(POSTGRES, &drop));
        }
    }
}

fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The processes of a test: their `--node` names and, while they run,
/// their handles (the index is the `node` of their events in the log).
struct Fleet<'a> {
    place: &'a Place,
    log: Log,
    names: Vec<String>,
    nodes: Vec<Option<Node>>,
}

impl<'a> Fleet<'a> {
    fn new(place: &'a Place) -> Self {
        Fleet {
            place,
            log: Arc::default(),
            names: Vec::new(),
            nodes: Vec::new(),
        }
    }

    /// Starts `run --name LEASE --ttl TTL --json --node NAME -- CMD` and
    /// records its events; returns its index.
    fn start(&mut self, name: &str) -> usize {
        self.start_with(name, &[])
    }

    /// [`Fleet::start`] with `extra` arguments to `run` (a rank).
    fn start_with(&mut self, name: &str, extra: &[&str]) -> usize {
        let index = self.nodes.len();
        let mut child = Command::new(env!("CARGO_BIN_EXE_picolease"))
            .env_remove("PICOLEASE_DB")
            .args(["--db", &self.place.url, "--table", &self.place.table])
            .args(["run", "--name", LEASE, "--ttl", TTL, "--json"])
            .args(["--node", name])
            .args(extra)
            .args(CMD)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("picolease starts");
        let stdout = child.stdout.take().unwrap();
        let log = Arc::clone(&self.log);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let json: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"));
                for key in ["event", "name", "node", "epoch", "unix_ms"] {
                    assert!(json.get(key).is_some(), "{key} missing in {line}");
                }
                log.lock().unwrap().push(Event {
                    node: index,
                    json,
                    read_at: Instant::now(),
                });
            }
        });
        self.names.push(name.to_string());
        self.nodes.push(Some(Node {
            child,
            reader: Some(reader),
        }));
        index
    }

    fn node(&self, index: usize) -> &Node {
        self.nodes[index].as_ref().expect("the node runs")
    }

    /// SIGTERM; it exits 0.
    fn stop(&mut self, index: usize) {
        self.stop_by(index, Signal::SIGTERM);
    }

    /// `by`; it exits 0.
    fn stop_by(&mut self, index: usize, by: Signal) {
        let mut node = self.nodes[index].take().expect("the node runs");
        signal(&node, by);
        assert_eq!(
            node.child.wait().unwrap().code(),
            Some(0),
            "{} exits 0 on {by}",
            self.names[index]
        );
        node.reader.take().unwrap().join().unwrap();
    }

    /// Stops every node: the followers first, then the last leader, so
    /// that its release at shutdown finds nobody left to take the lease
    /// (a follower still running would lead once more, a move the tests
    /// do not count as a handover).
    fn stop_all(&mut self) {
        let leader = self
            .events()
            .iter()
            .rev()
            .find(|e| e.kind() == "leader")
            .map(|e| e.node);
        let (last, followers): (Vec<usize>, Vec<usize>) = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_some())
            .partition(|&i| Some(i) == leader);
        self.stop_together(followers);
        self.stop_together(last);
    }

    /// SIGTERM to every node of `running` at once, then waits for each.
    fn stop_together(&mut self, running: Vec<usize>) {
        for &i in &running {
            signal(self.node(i), Signal::SIGTERM);
        }
        for i in running {
            let mut node = self.nodes[i].take().unwrap();
            assert_eq!(
                node.child.wait().unwrap().code(),
                Some(0),
                "{} exits 0 on SIGTERM",
                self.names[i]
            );
            node.reader.take().unwrap().join().unwrap();
        }
    }

    fn events(&self) -> Vec<Event> {
        self.log.lock().unwrap().clone()
    }

    /// The first event of `node` of kind `kind` after index `from`.
    fn wait(&self, from: usize, node: usize, kind: &str) -> Event {
        wait_event(&self.log, from, |e| e.node == node && e.kind() == kind)
    }

    /// SIGSTOP, once the process is stopped holding no SQLite write lock
    /// (a frozen writer would block everyone's renewals).
    fn freeze(&self, index: usize) {
        let node = self.node(index);
        let pid = node.child.id();
        for _ in 0..50 {
            signal(node, Signal::SIGSTOP);
            support::wait_for("the process stops", PATIENCE, || {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") T "))
            });
            let Some(file) = &self.place.sqlite else {
                return;
            };
            let free = rusqlite::Connection::open(file)
                .and_then(|c| {
                    c.busy_timeout(Duration::from_millis(200))?;
                    c.execute_batch("BEGIN IMMEDIATE; ROLLBACK")
                })
                .is_ok();
            if free {
                return;
            }
            signal(node, Signal::SIGCONT);
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{} always held the write lock", self.names[index]);
    }
}

/// One CMD's run: (node, epoch, child unix_ms, child_exit unix_ms).
type Run = (usize, u64, u64, u64);

/// Every CMD's run, from its `child` to its `child_exit` (every process
/// has exited); fails if two overlap.
fn commands_one_at_a_time(events: &[Event], names: &[String]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if e.kind() != "child" {
            continue;
        }
        let exit = events[i + 1..]
            .iter()
            .find(|x| {
                x.node == e.node && x.kind() == "child_exit" && x.json["pid"] == e.json["pid"]
            })
            .unwrap_or_else(|| panic!("no child_exit for {e:?}"));
        assert_eq!(exit.epoch(), e.epoch(), "{exit:?}");
        runs.push((e.node, e.epoch(), e.unix_ms(), exit.unix_ms()));
    }
    runs.sort_by_key(|r| r.2);
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            assert!(
                !(a.2 < b.3 && b.2 < a.3),
                "two CMDs at once: {} at epoch {} and {} at epoch {}\nall runs: {runs:?}",
                names[a.0],
                a.1,
                names[b.0],
                b.1
            );
        }
    }
    runs
}

/// What one handover of the rolling replacement measured.
#[derive(Debug)]
struct Handed {
    from: String,
    to: String,
    epoch: u64,
    /// The successor's `child` minus the old leader's `child_exit`.
    leaderless_ms: i64,
    /// The successor's `leader` minus the instant the request was sent.
    after_request_ms: i64,
}

/// Rolling replacements, one generation by the next.
const GENERATIONS: [&str; 3] = ["old", "new", "newer"];

fn rolling_replacement(place: &Place, database: &str) {
    let began = Instant::now();
    let mut fleet = Fleet::new(place);
    for i in 0..3 {
        fleet.start(&format!("{}-{i}", GENERATIONS[0]));
    }
    let mut leader = wait_event(&fleet.log, 0, |e| e.kind() == "leader");
    assert_eq!(leader.epoch(), 1);
    let mut handed: Vec<Handed> = Vec::new();
    for pair in GENERATIONS.windows(2) {
        let (old_gen, new_gen) = (pair[0], pair[1]);
        let replaced: Vec<usize> = (0..fleet.names.len())
            .filter(|&n| fleet.names[n].starts_with(&format!("{old_gen}-")))
            .collect();
        for (i, old) in replaced.into_iter().enumerate() {
            let new = fleet.start(&format!("{new_gen}-{i}"));
            // It follows: it has seen the holder.
            fleet.wait(0, new, "observed");
            if leader.node == old {
                let mark = len(&fleet.log);
                let asked = now_ms();
                let report = place.handover(&fleet.names[new]);
                let successor = wait_event(&fleet.log, mark, |e| e.kind() == "leader");
                assert_eq!(
                    fleet.names[successor.node],
                    fleet.names[new],
                    "the lease went to the node named by --to: {:#?}",
                    fleet.events()
                );
                assert_eq!(successor.epoch(), leader.epoch() + 1);
                let holder = successor.json["holder"].as_str().unwrap();
                assert!(
                    report.contains(&format!("held by {holder} at epoch {}", successor.epoch())),
                    "{report}"
                );
                let left = fleet.wait(mark, old, "follower");
                assert_eq!(left.json["reason"], "handover", "{left:?}");
                assert_eq!(left.epoch(), leader.epoch());
                let event = fleet.wait(mark, old, "handover");
                assert_eq!(event.json["from"], leader.json["holder"], "{event:?}");
                assert_eq!(event.json["to"], fleet.names[new].as_str(), "{event:?}");
                assert_eq!(event.epoch(), leader.epoch(), "{event:?}");
                let exit = fleet.wait(mark, old, "child_exit");
                assert_eq!(exit.epoch(), leader.epoch());
                let started = fleet.wait(mark, new, "child");
                assert_eq!(started.epoch(), successor.epoch());
                handed.push(Handed {
                    from: fleet.names[old].clone(),
                    to: fleet.names[new].clone(),
                    epoch: leader.epoch(),
                    leaderless_ms: started.unix_ms() as i64 - exit.unix_ms() as i64,
                    after_request_ms: successor.unix_ms() as i64 - asked as i64,
                });
                leader = successor;
            }
            fleet.stop(old);
        }
    }
    fleet.stop_all();

    let events = fleet.events();
    let names = &fleet.names;
    // Once per replaced leader: one handover per generation replaced,
    // each onto the replacing generation, and no other move.
    let leaders: Vec<&Event> = events.iter().filter(|e| e.kind() == "leader").collect();
    assert_eq!(
        leaders.len(),
        1 + handed.len(),
        "the lease moved only by the handovers: {events:#?}"
    );
    assert_eq!(handed.len(), GENERATIONS.len() - 1, "{handed:#?}");
    assert!(names[leaders[0].node].starts_with("old-"));
    for (k, l) in leaders.iter().enumerate().skip(1) {
        let name = &names[l.node];
        assert!(
            name.starts_with(&format!("{}-", GENERATIONS[k])),
            "handover {k} went to {name}, not the generation replacing the old: {events:#?}"
        );
        assert!(!name.starts_with("old-"));
        assert_eq!(l.epoch(), k as u64 + 1);
    }
    let handovers: Vec<&Event> = events.iter().filter(|e| e.kind() == "handover").collect();
    assert_eq!(handovers.len(), handed.len(), "{handovers:#?}");
    support::check_terms(&events, &[]);
    let runs = commands_one_at_a_time(&events, names);
    assert_eq!(runs.len(), leaders.len(), "one CMD per term: {runs:?}");

    let total: i64 = handed.iter().map(|h| h.leaderless_ms).sum();
    for h in &handed {
        eprintln!(
            "{database}: {} handed {LEASE:?} (epoch {}) to {}: leaderless {} ms (old CMD's exit to the new CMD's start); successor leader {} ms after the request",
            h.from, h.epoch, h.to, h.leaderless_ms, h.after_request_ms
        );
    }
    eprintln!(
        "{database}: {} handovers, leaderless {total} ms in total; the test took {:?}",
        handed.len(),
        began.elapsed()
    );
    assert_eq!(place.requests(), Vec::<String>::new(), "requests withdrawn");
    for h in &handed {
        assert!(
            (0..2_000).contains(&h.leaderless_ms),
            "leaderless time out of bounds: {h:?}"
        );
        assert!(
            h.after_request_ms < 2_000,
            "the holder acts at its next renewal (one interval): {h:?}"
        );
    }
}

#[test]
fn a_rolling_replacement_moves_the_lease_once_per_replaced_leader() {
    rolling_replacement(&Place::sqlite("rolling"), "SQLite");
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_a_rolling_replacement_moves_the_lease_once_per_replaced_leader() {
    rolling_replacement(&Place::postgres("rolling"), "PostgreSQL");
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_a_rolling_replacement_moves_the_lease_once_per_replaced_leader() {
    rolling_replacement(&Place::mysql("rolling"), "MariaDB");
}

fn frozen_successor(place: &Place, database: &str) {
    let mut fleet = Fleet::new(place);
    for name in ["a", "b", "c"] {
        fleet.start(name);
    }
    let first = wait_event(&fleet.log, 0, |e| e.kind() == "leader");
    let holder = first.node;
    let others: Vec<usize> = (0..3).filter(|&n| n != holder).collect();
    for &n in &others {
        fleet.wait(0, n, "observed");
    }
    let (frozen, third) = (others[0], others[1]);
    let frozen_name = fleet.names[frozen].clone();

    let mark = len(&fleet.log);
    fleet.freeze(frozen);
    let report = place.handover(&frozen_name);
    let left = fleet.wait(mark, holder, "follower");
    assert_eq!(left.json["reason"], "handover", "{left:?}");
    let event = fleet.wait(mark, holder, "handover");
    assert_eq!(event.json["from"], first.json["holder"], "{event:?}");
    assert_eq!(event.json["to"], frozen_name.as_str(), "{event:?}");
    assert_eq!(event.epoch(), first.epoch());
    let next = wait_event(&fleet.log, mark, |e| e.kind() == "leader");
    assert_ne!(next.node, frozen, "the frozen node cannot lead");
    assert!(next.epoch() > first.epoch(), "{next:?}");
    let after = next.unix_ms() as i64 - event.unix_ms() as i64;
    eprintln!(
        "{database}: {} handed {LEASE:?} to the frozen {frozen_name}; {} led at epoch {} {after} ms after the handover event (reservation {:?}, interval {INTERVAL:?})\nhandover printed: {report}",
        fleet.names[holder],
        fleet.names[next.node],
        next.epoch(),
        2 * INTERVAL,
    );
    // Nobody during the reservation (the event is printed a reply after
    // the row is written: 200 ms of slack; a reservation ignored would let
    // the third node in at its next poll, within an interval), someone
    // within the reservation, an interval and slack.
    assert!(
        after >= (2 * INTERVAL).as_millis() as i64 - 200,
        "someone led during the reservation: {after} ms"
    );
    assert!(after <= 3_000, "nobody led within the bound: {after} ms");
    assert!(
        [holder, third].contains(&next.node),
        "{}",
        fleet.names[next.node]
    );

    // Resumed, the frozen node finds the lease held and follows.
    let resumed = len(&fleet.log);
    signal(fleet.node(frozen), Signal::SIGCONT);
    std::thread::sleep(3 * INTERVAL);
    fleet.stop_all();
    let events = fleet.events();
    assert!(
        !events
            .iter()
            .any(|e| e.node == frozen && matches!(e.kind(), "leader" | "child")),
        "{frozen_name} never led: {events:#?}"
    );
    assert!(
        events[resumed..]
            .iter()
            .all(|e| e.node != frozen || e.kind() == "observed"),
        "{events:#?}"
    );
    support::check_terms(&events, &[]);
    commands_one_at_a_time(&events, &fleet.names);
}

#[test]
fn a_successor_that_cannot_take_its_reservation_loses_it_to_another_within_the_bound() {
    frozen_successor(&Place::sqlite("frozen"), "SQLite");
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_a_successor_that_cannot_take_its_reservation_loses_it_to_another_within_the_bound() {
    frozen_successor(&Place::postgres("frozen"), "PostgreSQL");
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_a_successor_that_cannot_take_its_reservation_loses_it_to_another_within_the_bound() {
    frozen_successor(&Place::mysql("frozen"), "MariaDB");
}

#[test]
fn handover_refuses_a_missing_lease_an_empty_node_and_a_free_lease() {
    let place = Place::sqlite("refusals");
    // A run whose CMD exits at once: it leads, releases and exits 0; the
    // lease's row stays, free.
    let out = place.picolease(&["run", "--name", "x", "--ttl", TTL, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", texts(&out));

    let out = place.picolease(&["handover", "--name", "nosuch"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("no lease named"), "{stderr}");

    let out = place.picolease(&["handover", "--name", "x", "--to", ""]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");

    let out = place.picolease(&["handover", "--name", "x"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("not held"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
}

/// A holder that does not act on the request (here a row held by hand, as
/// an older picolease's would be): `handover` gives up once the row's time
/// and a second have passed, exits 1 saying so, and withdraws its request,
/// which would otherwise end the term at a renewal nobody watches for.
#[test]
fn a_request_the_holder_does_not_act_on_is_withdrawn() {
    let place = Place::sqlite("ignored");
    let out = place.picolease(&["run", "--name", "x", "--ttl", TTL, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", texts(&out));
    let file = place.sqlite.as_ref().unwrap();
    let held = rusqlite::Connection::open(file)
        .unwrap()
        .execute(
            &format!(
                "UPDATE {} SET holder = 'ghost#1', epoch = epoch + 1, \
                 expires_at = expires_at + 2000 WHERE name = 'x'",
                place.table
            ),
            [],
        )
        .unwrap();
    assert_eq!(held, 1);

    let out = place.picolease(&["handover", "--name", "x", "--to", "web-9"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("did not act"), "{stderr}");
    assert!(stderr.contains("withdrawn"), "{stderr}");
    assert_eq!(place.requests(), Vec::<String>::new(), "request withdrawn");
}

/// The live candidates `status --members --json` lists: (holder, lease,
/// priority), after checking each entry's keys.
fn candidates(place: &Place) -> Vec<(String, String, u64)> {
    let out = place.picolease(&["status", "--members", "--json"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let entries: Vec<Value> = serde_json::from_str(stdout.trim()).unwrap();
    entries
        .into_iter()
        .filter(|e| e.get("lease").is_some())
        .map(|e| {
            let mut keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(
                keys,
                [
                    "expires_in_ms",
                    "holder",
                    "lease",
                    "priority",
                    "version_tag"
                ],
                "{e}"
            );
            (
                e["holder"].as_str().unwrap().to_string(),
                e["lease"].as_str().unwrap().to_string(),
                e["priority"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// When the lease expires, as `status --json` sees it now: the time the
/// test's clock reads plus the row's time left.
fn expiry(place: &Place) -> Option<u64> {
    let out = place.picolease(&["status", "--json"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let rows: Vec<Value> = serde_json::from_str(stdout.trim()).unwrap();
    let row = rows.iter().find(|r| r["name"] == LEASE)?;
    let left = row["expires_in_ms"].as_i64()?;
    Some(now_ms() + left.max(0) as u64)
}

/// Waits until the holder has renewed twice since the call: the second
/// renewal began after the first one's commit, so it read every row
/// committed before the call (a single renewal seen to commit after the
/// call may have read before it, on a server whose statement began
/// earlier). A renewal moves the expiry by about an interval; the
/// status reads' own jitter is a few milliseconds.
fn renewed_twice(place: &Place) {
    let mut last = expiry(place).expect("the lease is held");
    let mut renewals = 0;
    support::wait_for("two renewals", PATIENCE, || {
        if let Some(now) = expiry(place) {
            if now > last + INTERVAL.as_millis() as u64 / 2 {
                renewals += 1;
                last = now;
            }
        }
        renewals >= 2
    });
}

fn preferred_nodes(place: &Place, database: &str) {
    let mut fleet = Fleet::new(place);
    let a = fleet.start_with("a", &["--priority", "1", "--version-tag", "1.2.0"]);
    let b = fleet.start("b");
    // Whoever leads first, the lease ends on `a`, which outranks `b`
    // (which announces nothing): at once, or by `b`'s handover.
    let on_a = wait_event(&fleet.log, 0, |e| e.node == a && e.kind() == "leader");
    fleet.wait(0, b, "observed");

    // `c` outranks `a`: it joins and takes the lease by `a`'s handover.
    let mark = len(&fleet.log);
    let c = fleet.start_with("c", &["--priority", "2"]);
    let joined = fleet.wait(mark, c, "observed");
    let took = wait_event(&fleet.log, mark, |e| e.kind() == "leader");
    assert_eq!(
        took.node,
        c,
        "the better candidate leads: {:#?}",
        fleet.events()
    );
    assert_eq!(took.epoch(), on_a.epoch() + 1);
    let left = fleet.wait(mark, a, "follower");
    assert_eq!(left.json["reason"], "handover", "{left:?}");
    let event = fleet.wait(mark, a, "handover");
    assert_eq!(event.json["to"], "c", "{event:?}");
    let after_join = took.unix_ms() as i64 - joined.unix_ms() as i64;
    eprintln!(
        "{database}: c (priority 2) led {after_join} ms after it first saw the lease held by a (priority 1); interval {INTERVAL:?}"
    );
    // Two intervals: `a` renews within one of `c`'s announcement, `c`
    // polls within one of the handover; the rest is slack for the
    // machine.
    assert!(
        after_join <= 2 * INTERVAL.as_millis() as i64 + 1_500,
        "{after_join} ms"
    );

    // `a` now announces itself: `status --members` lists it (once `c`'s
    // own announcement, from before it led, has lapsed).
    support::wait_for("a listed as the candidate", PATIENCE, || {
        candidates(place)
            .iter()
            .any(|(holder, lease, p)| holder.starts_with("a#") && lease == LEASE && *p == 1)
    });

    let out = place.picolease(&["status"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("preferred candidate of {LEASE}: a#")),
        "{stdout}"
    );
    assert!(!stdout.contains("picolease.preferred:"), "{stdout}");

    // `handover` without --to picks the preferred candidate, `a`, not
    // `b`; and `c`, which outranks it, takes the lease back.
    let mark = len(&fleet.log);
    let out = place.picolease(&["handover", "--name", LEASE]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("preferred candidate a#"), "{stdout}");
    let next = wait_event(&fleet.log, mark, |e| e.kind() == "leader");
    assert_eq!(next.node, a, "{:#?}", fleet.events());
    let back = wait_event(&fleet.log, mark, |e| e.kind() == "leader" && e.node != a);
    assert_eq!(back.node, c, "{:#?}", fleet.events());
    assert_eq!(back.epoch(), next.epoch() + 1);

    // Settled: nobody moves it again.
    let settled = len(&fleet.log);
    std::thread::sleep(4 * INTERVAL);
    fleet.stop_all();
    let events = fleet.events();
    assert!(
        !events[settled..]
            .iter()
            .any(|e| e.kind() == "leader" && e.node != c),
        "{events:#?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e.node == b && e.kind() == "leader" && e.epoch() > on_a.epoch()),
        "b, which announces nothing, never led after a: {events:#?}"
    );
    support::check_terms(&events, &[]);
    commands_one_at_a_time(&events, &fleet.names);
    assert_eq!(place.requests(), Vec::<String>::new(), "requests withdrawn");
}

#[test]
fn a_better_candidate_takes_the_lease_by_the_holders_handover() {
    preferred_nodes(&Place::sqlite("preferred"), "SQLite");
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_a_better_candidate_takes_the_lease_by_the_holders_handover() {
    preferred_nodes(&Place::postgres("preferred"), "PostgreSQL");
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_a_better_candidate_takes_the_lease_by_the_holders_handover() {
    preferred_nodes(&Place::mysql("preferred"), "MariaDB");
}

fn hand_over_then_exit(place: &Place, database: &str) {
    let mut fleet = Fleet::new(place);
    let a = fleet.start_with("a", &["--priority", "5"]);
    let first = fleet.wait(0, a, "leader");
    let b = fleet.start_with("b", &["--priority", "1", "--handover-on-term"]);
    let c = fleet.start("c");
    fleet.wait(0, b, "observed");
    fleet.wait(0, c, "observed");
    support::wait_for("b listed as the candidate", PATIENCE, || {
        candidates(place)
            .iter()
            .any(|(holder, _, _)| holder.starts_with("b#"))
    });
    // SIGUSR1 hands the lease to the candidate `a`'s last renewal read:
    // wait for a renewal that began after `b` was listed.
    renewed_twice(place);

    // SIGUSR1: `a` stops CMD, hands the lease to `b` (which it outranks:
    // no yield, an order) and exits 0.
    let mark = len(&fleet.log);
    fleet.stop_by(a, Signal::SIGUSR1);
    let left = fleet.wait(mark, a, "follower");
    assert_eq!(left.json["reason"], "handover", "{left:?}");
    let event = fleet.wait(mark, a, "handover");
    assert_eq!(event.json["to"], "b", "{event:?}");
    let took = wait_event(&fleet.log, mark, |e| e.kind() == "leader");
    assert_eq!(took.node, b, "{:#?}", fleet.events());
    assert_eq!(took.epoch(), first.epoch() + 1);
    let exit = fleet.wait(mark, a, "child_exit");
    let started = fleet.wait(mark, b, "child");
    let leaderless = started.unix_ms() as i64 - exit.unix_ms() as i64;

    // `b` runs with --handover-on-term and no candidate is left (`c`
    // announces nothing): SIGTERM hands over to nobody, a release, and
    // `c` leads.
    let mark = len(&fleet.log);
    fleet.stop(b);
    let left = fleet.wait(mark, b, "follower");
    assert_eq!(left.json["reason"], "handover", "{left:?}");
    let next = wait_event(&fleet.log, mark, |e| e.kind() == "leader");
    assert_eq!(next.node, c, "{:#?}", fleet.events());
    fleet.stop_all();
    let events = fleet.events();
    assert!(
        !events.iter().any(|e| e.node == b && e.kind() == "handover"),
        "a release names no successor: {events:#?}"
    );
    support::check_terms(&events, &[]);
    commands_one_at_a_time(&events, &fleet.names);
    eprintln!(
        "{database}: SIGUSR1 handed {LEASE:?} from a to b: leaderless {leaderless} ms (a's CMD exit to b's CMD start)"
    );
    assert!((0..2_000).contains(&leaderless), "{leaderless} ms");
}

#[test]
fn sigusr1_hands_the_lease_to_the_preferred_candidate_then_exits() {
    hand_over_then_exit(&Place::sqlite("usr1"), "SQLite");
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_sigusr1_hands_the_lease_to_the_preferred_candidate_then_exits() {
    hand_over_then_exit(&Place::postgres("usr1"), "PostgreSQL");
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_sigusr1_hands_the_lease_to_the_preferred_candidate_then_exits() {
    hand_over_then_exit(&Place::mysql("usr1"), "MariaDB");
}
