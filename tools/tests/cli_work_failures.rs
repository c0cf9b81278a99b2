//! Work that fails (DESIGN §5 "Work that fails") between `picolease run
//! --json` processes, on a SQLite file, on the PostgreSQL server at
//! 127.0.0.1:5432 and on the MariaDB server at 127.0.0.1:3306 (a table per
//! test; FAILS, not skips, when a server is unreachable):
//!
//! - a CMD that exits 1 at once under `--restart on-failure`: restarted
//!   after its backoffs, then escalated (`work_failed` events, `follower`
//!   with reason `escalated`, counted in `/metrics` and `/healthz`), and a
//!   healthy node leads within the restart backoffs + two intervals;
//! - a CMD that succeeds after two failures keeps the lease;
//! - a leader whose `--health-cmd` fails hands the lease to a healthy node
//!   within the probe's interval + two intervals, with no leaderless gap
//!   beyond a planned handover's;
//! - with every node unhealthy, one leads and the lease does not move;
//! - a node whose probe fails never becomes the leader while a healthy one
//!   is live, even when the leader crashes, nor when it starts first while
//!   the lease is free (it counts as unhealthy until its first verdict).
//!
//! The figures (the escalation's and the yield's times, the gaps) are
//! printed: `cargo test -p picolease-cli --test cli cli_work_failures:: --
//! --nocapture --test-threads 1`.

use crate::support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::{
    assert_never_led_twice, now_ms, signal, spawn, stop_cleanly, wait_event, Event, Log, Node,
};

#[cfg(feature = "postgres")]
const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";
const LEASE: &str = "work";
const TTL: &str = "2s";
/// ttl / 4, `run`'s default.
const INTERVAL: Duration = Duration::from_millis(500);
/// The longest CMD run of the crash loop (`exit 1`, under its guard) and
/// the slack of a loaded machine, per step.
const SLACK: Duration = Duration::from_millis(400);

/// Where the processes meet: a SQLite file, or a table of the test's own
/// on PostgreSQL or MariaDB (dropped when this is, passed or failed).
struct Place {
    url: String,
    table: String,
    mysql: bool,
    dir: tempfile::TempDir,
}

impl Place {
    fn sqlite(test: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("leases.db");
        Place {
            url: format!("sqlite://{}", file.display()),
            table: format!("pl_cli_work_{test}"),
            mysql: false,
            dir,
        }
    }

    #[cfg(feature = "postgres")]
    fn postgres(test: &str) -> Self {
        let table = format!("pl_cli_work_{test}_{}", std::process::id());
        // Panics (fails the test) when the server is unreachable.
        support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
        Place {
            url: POSTGRES.into(),
            table,
            mysql: false,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    #[cfg(feature = "mysql")]
    fn mysql(test: &str) -> Self {
        let table = format!("pl_cli_work_{test}_{}", std::process::id());
        // Panics (fails the test) when the server is unreachable.
        support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
        Place {
            url: "mysql://root@127.0.0.1:3306/test".into(),
            table,
            mysql: true,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A file of the test's own directory.
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The live candidates `status --members --json` lists.
    fn candidates(&self) -> Vec<String> {
        let out = support::picolease(&[
            "--db",
            &self.url,
            "--table",
            &self.table,
            "status",
            "--members",
            "--json",
        ]);
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        listed
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter_map(|row| row["holder"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Starts node `node` with `extra` arguments to `run` (CMD included).
    fn start(&self, node: usize, log: &Log, extra: &[&str]) -> Node {
        spawn(
            &self.url,
            &["--table", &self.table],
            LEASE,
            TTL,
            node,
            log,
            extra,
        )
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let drop = format!("DROP TABLE IF EXISTS {}", self.table);
        #[cfg(feature = "mysql")]
        if self.mysql {
            let _ = std::panic::catch_unwind(|| support::mysql::sql("test", &drop));
            return;
        }
        #[cfg(feature = "postgres")]
        if !self.url.starts_with("sqlite") {
            let _ = std::panic::catch_unwind(|| support::pg::sql(POSTGRES, &drop));
        }
        let _ = drop;
    }
}

fn events(log: &Log) -> Vec<Event> {
    log.lock().unwrap().clone()
}

fn of(log: &Log, node: usize, kind: &str) -> Vec<Event> {
    events(log)
        .into_iter()
        .filter(|e| e.node == node && e.kind() == kind)
        .collect()
}

/// Milliseconds from `a` to `b` by their stamps.
fn between(a: &Event, b: &Event) -> Duration {
    Duration::from_millis(b.unix_ms().saturating_sub(a.unix_ms()))
}

/// A CMD that exits 1 at once, restarted twice (100 ms, 200 ms), then
/// escalated: the lease goes to the healthy node within the backoffs, the
/// three short runs and two intervals of the first failure.
fn crash_loop_escalates(place: &Place, database: &str) {
    let log = Log::default();
    let addr = support::http::free_addr();
    let mut sick = place.start(
        0,
        &log,
        &[
            "--restart",
            "on-failure",
            "--restart-limit",
            "2/30s",
            "--restart-backoff",
            "100ms",
            "--cool-down",
            "30s",
            "--listen",
            &addr,
            "--",
            "sh",
            "-c",
            "echo 'the object store is unreachable from this node' >&2; exit 1",
        ],
    );
    // The healthy node starts once the sick one leads, so the sick one
    // is the first leader.
    let first = wait_event(&log, 0, |e| e.node == 0 && e.kind() == "leader");
    let healthy = place.start(1, &log, &["--", "sh", "-c", "exec sleep 1000"]);
    let escalated = wait_event(&log, 0, |e| {
        e.node == 0 && e.kind() == "work_failed" && e.json["escalated"] == true
    });
    let took = wait_event(&log, 0, |e| e.node == 1 && e.kind() == "leader");
    let failures = of(&log, 0, "work_failed");
    let restarts: Vec<u64> = failures
        .iter()
        .map(|e| e.json["restarts"].as_u64().unwrap())
        .collect();
    assert_eq!(restarts, [1, 2, 3], "{failures:#?}");
    assert!(failures.iter().all(|e| e.json["code"] == 1));
    assert_eq!(escalated.json["cool_down_ms"], 30_000);
    let follower = wait_event(&log, 0, |e| e.node == 0 && e.kind() == "follower");
    assert_eq!(follower.json["reason"], "escalated");
    assert_eq!(took.epoch(), first.epoch() + 1);
    let first_exit = of(&log, 0, "child_exit").remove(0);
    let bound = Duration::from_millis(300) + SLACK * 3 + INTERVAL * 2;
    let elapsed = between(&first_exit, &took);
    println!(
        "{database}: first failure to the healthy node's term {elapsed:?} (escalation to it {:?}; bound {bound:?})",
        between(&escalated, &took)
    );
    assert!(
        elapsed <= bound,
        "{elapsed:?} > {bound:?}: {:#?}",
        events(&log)
    );
    // Counted where an operator looks.
    let (_, metrics) = support::http::wait_get(&addr, "/metrics", |_, body| {
        body.contains("picolease_work_failures_total")
    });
    let series = format!("picolease_work_failures_total{{lease=\"{LEASE}\"}}");
    assert_eq!(
        support::http::sample(&metrics, &series),
        Some(3.0),
        "{metrics}"
    );
    let (code, healthz) = support::http::get(&addr, "/healthz").unwrap();
    assert_eq!(code, 200, "{healthz}");
    let healthz: serde_json::Value = serde_json::from_str(&healthz).unwrap();
    assert_eq!(healthz["work_failures"], 3, "{healthz}");
    // The node stands aside: it does not lead again in its cool-down
    // (its degraded wait alone would have let it retry after two).
    std::thread::sleep(INTERVAL * 3);
    assert_eq!(of(&log, 0, "leader").len(), 1, "{:#?}", events(&log));
    let mut nodes = [sick, healthy];
    stop_cleanly(&mut nodes);
    assert_never_led_twice(&events(&log), None);
    sick = nodes.into_iter().next().unwrap();
    drop(sick);
}

/// A CMD that fails twice and then runs keeps the lease: two restarts, no
/// escalation, and the other node never leads.
fn recovers_after_two_failures(place: &Place) {
    let log = Log::default();
    let counter = place.file("starts");
    let script = format!(
        "n=$(cat {f} 2>/dev/null || echo 0); echo $((n+1)) > {f}; [ \"$n\" -ge 2 ] && exec sleep 1000; exit 1",
        f = counter.display()
    );
    let first = place.start(
        0,
        &log,
        &[
            "--restart",
            "on-failure",
            "--restart-limit",
            "3/60s",
            "--restart-backoff",
            "100ms",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    wait_event(&log, 0, |e| e.node == 0 && e.kind() == "leader");
    let other = place.start(1, &log, &["--", "sh", "-c", "exec sleep 1000"]);
    wait_event(&log, 0, |e| {
        e.node == 0 && e.kind() == "work_failed" && e.json["restarts"] == 2
    });
    support::wait_for("the third CMD", support::PATIENCE, || {
        of(&log, 0, "child").len() >= 3
    });
    let third = of(&log, 0, "child").remove(2);
    // Four intervals with the third CMD running: still the leader.
    std::thread::sleep(INTERVAL * 4);
    assert_eq!(of(&log, 0, "work_failed").len(), 2, "{:#?}", events(&log));
    assert!(of(&log, 0, "follower").is_empty(), "{:#?}", events(&log));
    assert!(of(&log, 1, "leader").is_empty(), "{:#?}", events(&log));
    let exits_after = of(&log, 0, "child_exit")
        .into_iter()
        .filter(|e| e.unix_ms() > third.unix_ms())
        .count();
    assert_eq!(exits_after, 0, "the third CMD keeps running");
    let mut nodes = [first, other];
    stop_cleanly(&mut nodes);
}

/// A leader whose probe starts failing hands over to the healthy node
/// within the probe's interval + two intervals; the leaderless time, from
/// the old CMD's end to the new CMD's start, is a planned handover's.
fn unhealthy_leader_yields(place: &Place, database: &str) {
    let log = Log::default();
    let ok = place.file("ok");
    std::fs::write(&ok, "").unwrap();
    let probe = format!(
        "test -e {} || {{ echo 'disk full'; exit 1; }}",
        ok.display()
    );
    let sick = place.start(
        0,
        &log,
        &["--health-cmd", &probe, "--", "sh", "-c", "exec sleep 1000"],
    );
    wait_event(&log, 0, |e| e.node == 0 && e.kind() == "leader");
    let healthy = place.start(
        1,
        &log,
        &["--health-cmd", "true", "--", "sh", "-c", "exec sleep 1000"],
    );
    wait_event(&log, 0, |e| e.node == 1 && e.kind() == "healthy");
    // Its announcement is in the row: `status --members` lists it.
    support::wait_for("n1 announced as a candidate", support::PATIENCE, || {
        place
            .candidates()
            .iter()
            .any(|holder| holder.starts_with("n1#"))
    });
    let from = len(&log);
    let failed_at = now_ms();
    std::fs::remove_file(&ok).unwrap();
    let unhealthy = wait_event(&log, from, |e| e.node == 0 && e.kind() == "unhealthy");
    assert_eq!(
        unhealthy.json["reason"],
        "the probe exited with code 1: disk full"
    );
    let took = wait_event(&log, from, |e| e.node == 1 && e.kind() == "leader");
    let left = wait_event(&log, from, |e| e.node == 0 && e.kind() == "follower");
    assert_eq!(left.json["reason"], "unhealthy");
    let elapsed = Duration::from_millis(took.unix_ms().saturating_sub(failed_at));
    let bound = INTERVAL * 3 + SLACK;
    let old_end = wait_event(&log, from, |e| e.node == 0 && e.kind() == "child_exit");
    let new_start = wait_event(&log, from, |e| e.node == 1 && e.kind() == "child");
    let gap = between(&old_end, &new_start);
    println!(
        "{database}: probe failed to the healthy node's term {elapsed:?} (bound {bound:?}); leaderless {gap:?}"
    );
    assert!(
        elapsed <= bound,
        "{elapsed:?} > {bound:?}: {:#?}",
        events(&log)
    );
    assert!(gap <= INTERVAL + SLACK, "gap {gap:?}: {:#?}", events(&log));
    // The healthy node keeps it.
    std::thread::sleep(INTERVAL * 3);
    assert_eq!(of(&log, 1, "follower").len(), 0, "{:#?}", events(&log));
    let mut nodes = [sick, healthy];
    stop_cleanly(&mut nodes);
    assert_never_led_twice(&events(&log), None);
}

/// Every node unhealthy: one leads (degraded), and the lease stays.
fn all_unhealthy_one_leads(place: &Place) {
    let log = Log::default();
    let probe = "echo 'bad release'; exit 1";
    let a = place.start(
        0,
        &log,
        &["--health-cmd", probe, "--", "sh", "-c", "exec sleep 1000"],
    );
    let b = place.start(
        1,
        &log,
        &["--health-cmd", probe, "--", "sh", "-c", "exec sleep 1000"],
    );
    let first = wait_event(&log, 0, |e| e.kind() == "leader");
    std::thread::sleep(INTERVAL * 6);
    let leaders: Vec<Event> = events(&log)
        .into_iter()
        .filter(|e| e.kind() == "leader")
        .collect();
    assert_eq!(leaders.len(), 1, "the lease moved: {:#?}", events(&log));
    assert!(
        events(&log)
            .iter()
            .all(|e| e.kind() != "follower" || e.unix_ms() < first.unix_ms()),
        "{:#?}",
        events(&log)
    );
    let mut nodes = [a, b];
    stop_cleanly(&mut nodes);
    assert_never_led_twice(&events(&log), None);
}

/// One node of three with a bad release (its probe fails) never leads
/// while a healthy node is live, even when the leader crashes.
fn bad_release_never_leads(place: &Place, database: &str) {
    let log = Log::default();
    let cmd = ["--", "sh", "-c", "exec sleep 1000"];
    let with = |probe: &'static str| {
        let mut args = vec!["--health-cmd", probe];
        args.extend(cmd);
        args
    };
    let leader = place.start(0, &log, &with("true"));
    wait_event(&log, 0, |e| e.node == 0 && e.kind() == "leader");
    let standby = place.start(1, &log, &with("true"));
    let bad = place.start(2, &log, &with("exit 1"));
    wait_event(&log, 0, |e| e.node == 2 && e.kind() == "unhealthy");
    let from = len(&log);
    let crashed_at = Instant::now();
    signal(&leader, Signal::SIGKILL);
    let took = wait_event(&log, from, |e| e.kind() == "leader");
    println!(
        "{database}: after the leader's crash node {} led in {:?}",
        took.node,
        crashed_at.elapsed()
    );
    assert_eq!(
        took.node,
        1,
        "the bad release took the lease: {:#?}",
        events(&log)
    );
    std::thread::sleep(INTERVAL * 3);
    assert!(of(&log, 2, "leader").is_empty(), "{:#?}", events(&log));
    let mut nodes = [standby, bad];
    stop_cleanly(&mut nodes);
    drop(leader);
}

/// A node with a bad release started first, while the lease is free,
/// counts as unhealthy until its probe's first verdict and then leaves the
/// free lease to healthy nodes for two intervals: the healthy node started
/// right after it leads, and the bad one never does.
fn bad_release_started_first_never_leads(place: &Place, database: &str) {
    let log = Log::default();
    let bad = place.start(
        2,
        &log,
        &[
            "--health-cmd",
            "exit 1",
            "--",
            "sh",
            "-c",
            "exec sleep 1000",
        ],
    );
    std::thread::sleep(INTERVAL / 2);
    let healthy = place.start(
        0,
        &log,
        &["--health-cmd", "true", "--", "sh", "-c", "exec sleep 1000"],
    );
    let led = wait_event(&log, 0, |e| e.kind() == "leader");
    println!("{database}: the free lease went to node {}", led.node);
    assert_eq!(
        led.node,
        0,
        "the bad release took the free lease: {:#?}",
        events(&log)
    );
    std::thread::sleep(INTERVAL * 3);
    assert!(of(&log, 2, "leader").is_empty(), "{:#?}", events(&log));
    let mut nodes = [healthy, bad];
    stop_cleanly(&mut nodes);
}

fn len(log: &Log) -> usize {
    log.lock().unwrap().len()
}

#[test]
fn sqlite_crash_loop_escalates() {
    crash_loop_escalates(&Place::sqlite("loop"), "SQLite");
}

#[test]
fn sqlite_recovers_after_two_failures() {
    recovers_after_two_failures(&Place::sqlite("recover"));
}

#[test]
fn sqlite_unhealthy_leader_yields() {
    unhealthy_leader_yields(&Place::sqlite("yield"), "SQLite");
}

#[test]
fn sqlite_all_unhealthy_one_leads() {
    all_unhealthy_one_leads(&Place::sqlite("all"));
}

#[test]
fn sqlite_bad_release_never_leads() {
    bad_release_never_leads(&Place::sqlite("bad"), "SQLite");
}

#[test]
fn sqlite_bad_release_started_first_never_leads() {
    bad_release_started_first_never_leads(&Place::sqlite("first"), "SQLite");
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_crash_loop_escalates() {
    crash_loop_escalates(&Place::postgres("loop"), "PostgreSQL");
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_recovers_after_two_failures() {
    recovers_after_two_failures(&Place::postgres("recover"));
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_unhealthy_leader_yields() {
    unhealthy_leader_yields(&Place::postgres("yield"), "PostgreSQL");
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_all_unhealthy_one_leads() {
    all_unhealthy_one_leads(&Place::postgres("all"));
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_bad_release_never_leads() {
    bad_release_never_leads(&Place::postgres("bad"), "PostgreSQL");
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_bad_release_started_first_never_leads() {
    bad_release_started_first_never_leads(&Place::postgres("first"), "PostgreSQL");
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_crash_loop_escalates() {
    crash_loop_escalates(&Place::mysql("loop"), "MariaDB");
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_recovers_after_two_failures() {
    recovers_after_two_failures(&Place::mysql("recover"));
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_unhealthy_leader_yields() {
    unhealthy_leader_yields(&Place::mysql("yield"), "MariaDB");
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_all_unhealthy_one_leads() {
    all_unhealthy_one_leads(&Place::mysql("all"));
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_bad_release_never_leads() {
    bad_release_never_leads(&Place::mysql("bad"), "MariaDB");
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_bad_release_started_first_never_leads() {
    bad_release_started_first_never_leads(&Place::mysql("first"), "MariaDB");
}
