//! The runbook after a failover the database could not detect
//! (`picolease release --all --after-failover`; DESIGN §3 "Failover",
//! docs/operations.md §5.4), on SQLite, PostgreSQL and MariaDB, with the
//! old holder still running, as it would be after a lossy failover:
//!
//! - the holder is refused at its next renewal and says `follower`
//!   (reason `lost`) within an interval and a margin;
//! - it cannot take its row back: nobody leads until the grace (`--ttl`)
//!   has passed, measured from the command's start to the next `leader`
//!   line, which must not come earlier than the grace less the clock
//!   reading's slack;
//! - the next term's epoch is at least `now · 2^20` (DESIGN: the epoch
//!   after an adoption), far past the old one;
//! - a membership row of a set is held the same way, and the handover
//!   request rows are left alone.
//!
//! The old runbook (`epoch + 1000000`, holder kept) failed the second
//! check: the holder re-took its own row at once.
//!
//! PostgreSQL at 127.0.0.1:5432 and MariaDB at 127.0.0.1:3306 must be up
//! (fail, not skip).

use crate::support;

use std::process::Command;
use std::sync::Arc;

use support::{len, now_ms, wait_event, Log};

/// The grace the runbook gives, and the lease's ttl (interval 500 ms).
const TTL: &str = "2s";
const TTL_MS: u64 = 2000;
/// How much earlier than the grace a leader may appear: the database
/// clock is read in whole milliseconds and the command's start is taken
/// before it connects.
const SLACK_MS: u64 = 50;

struct Place {
    url: String,
    global: Vec<String>,
    _dir: Option<tempfile::TempDir>,
    drop_sql: Option<(bool, String)>,
}

impl Drop for Place {
    fn drop(&mut self) {
        match &self.drop_sql {
            #[cfg(feature = "postgres")]
            Some((true, sql)) => {
                let (url, sql) = (self.url.clone(), sql.clone());
                let _ = std::panic::catch_unwind(move || support::pg::sql(&url, &sql));
            }
            #[cfg(feature = "mysql")]
            Some((false, sql)) => {
                let sql = sql.clone();
                let _ = std::panic::catch_unwind(move || support::mysql::sql("test", &sql));
            }
            _ => {}
        }
    }
}

fn sqlite() -> Place {
    let dir = tempfile::tempdir().unwrap();
    Place {
        url: format!("sqlite://{}", dir.path().join("failover.db").display()),
        global: Vec::new(),
        _dir: Some(dir),
        drop_sql: None,
    }
}

#[cfg(feature = "postgres")]
fn postgres(case: &str) -> Place {
    let url = "postgres://postgres@127.0.0.1:5432/test".to_string();
    let table = format!("pl_after_failover_{case}_{}", std::process::id());
    let drop = format!("DROP TABLE IF EXISTS {table}");
    support::pg::sql(&url, &drop);
    Place {
        url,
        global: vec!["--table".into(), table],
        _dir: None,
        drop_sql: Some((true, drop)),
    }
}

#[cfg(feature = "mysql")]
fn mysql(case: &str) -> Place {
    let table = format!("pl_after_failover_{case}_{}", std::process::id());
    let drop = format!("DROP TABLE IF EXISTS {table}");
    support::mysql::sql("test", &drop);
    Place {
        url: "mysql://root@127.0.0.1:3306/test".to_string(),
        global: vec!["--table".into(), table],
        _dir: None,
        drop_sql: Some((false, drop)),
    }
}

fn picolease(place: &Place, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_picolease"))
        .env_remove("PICOLEASE_DB")
        .args(["--db", &place.url])
        .args(&place.global)
        .args(args)
        .output()
        .unwrap()
}

/// One leader of `lease` (plus `extra` leases for a set), the runbook,
/// then a second contender: checks the three promises above and returns
/// (ms to the old leader's `follower`, ms to the next `leader`).
fn runbook(case: &str, place: &Place, names: &[&str]) -> (u64, u64) {
    let log: Log = Arc::default();
    let global: Vec<&str> = place.global.iter().map(String::as_str).collect();
    let extra: Vec<&str> = names[1..].iter().flat_map(|n| ["--name", *n]).collect();
    let lease = names[0];
    let mut nodes = vec![support::spawn(
        &place.url, &global, lease, TTL, 0, &log, &extra,
    )];
    let led = wait_event(&log, 0, |e| e.kind() == "leader" && e.json["name"] == lease);
    let old_epoch = led.epoch();
    let mark = len(&log);
    let started_ms = now_ms();
    let out = picolease(
        place,
        &["release", "--all", "--after-failover", "--ttl", TTL],
    );
    let returned_ms = now_ms();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{case}: {out:?}");
    assert!(
        stdout.contains(&format!("lease {lease:?}")),
        "{case}: {stdout}"
    );
    if names.len() > 1 {
        assert!(
            stdout.contains("picolease.member:"),
            "{case}: the membership row is held too: {stdout}"
        );
    }
    // A second contender, started right away: it too must wait.
    nodes.push(support::spawn(
        &place.url, &global, lease, TTL, 1, &log, &extra,
    ));
    let demoted = wait_event(&log, mark, |e| {
        e.node == 0 && e.json["name"] == lease && e.kind() == "follower"
    });
    assert_eq!(demoted.json["reason"], "lost", "{case}: {demoted:?}");
    let demoted_ms = demoted.unix_ms().saturating_sub(returned_ms);
    assert!(
        demoted_ms <= 500 + 300,
        "{case}: the old leader said follower {demoted_ms} ms after the runbook returned, more than an interval (500 ms) and 300 ms"
    );
    let next = wait_event(&log, mark, |e| {
        e.kind() == "leader" && e.json["name"] == lease
    });
    let next_ms = next.unix_ms().saturating_sub(started_ms);
    assert!(
        next_ms + SLACK_MS >= TTL_MS,
        "{case}: n{} led {lease} {next_ms} ms after the runbook, inside its {TTL_MS} ms grace: {next:?}",
        next.node
    );
    assert!(
        next_ms <= TTL_MS + 2 * 500 + 1000,
        "{case}: nobody led {lease} within ttl + 2 intervals (+1 s) of the runbook: {next_ms} ms"
    );
    let floor = (started_ms - 60_000) << 20;
    assert!(
        next.epoch() > old_epoch && next.epoch() >= floor,
        "{case}: the next epoch {} is not past the clock-derived floor {floor} (old {old_epoch})",
        next.epoch()
    );
    support::stop_cleanly(&mut nodes);
    println!("{case}: follower {demoted_ms} ms, next leader {next_ms} ms after the runbook (grace {TTL_MS} ms), epoch {old_epoch} -> {}", next.epoch());
    (demoted_ms, next_ms)
}

/// A handover request row survives the runbook as it was.
#[cfg(feature = "postgres")]
fn requests_are_left_alone(case: &str, place: &Place, status_sql: impl Fn() -> String) {
    let before = status_sql();
    let out = picolease(
        place,
        &["release", "--all", "--after-failover", "--ttl", TTL],
    );
    assert_eq!(out.status.code(), Some(0), "{case}: {out:?}");
    assert_eq!(status_sql(), before, "{case}: a request row changed");
}

#[test]
fn sqlite_the_runbook_holds_every_lease_past_a_running_holder() {
    runbook("sqlite lone", &sqlite(), &["job"]);
    runbook("sqlite set", &sqlite(), &["s0", "s1"]);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_the_runbook_holds_every_lease_past_a_running_holder() {
    runbook("postgres lone", &postgres("lone"), &["job"]);
    runbook("postgres set", &postgres("set"), &["s0", "s1"]);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_the_runbook_holds_every_lease_past_a_running_holder() {
    runbook("mysql lone", &mysql("lone"), &["job"]);
    runbook("mysql set", &mysql("set"), &["s0", "s1"]);
}

#[cfg(feature = "postgres")]
#[test]
fn the_runbook_leaves_handover_requests_alone_and_needs_a_row() {
    let place = postgres("requests");
    let table = place.global[1].clone();
    // No table: an error naming it, exit 2 (as every command's).
    let out = picolease(
        &place,
        &["release", "--all", "--after-failover", "--ttl", TTL],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&table),
        "{out:?}"
    );
    assert_eq!(picolease(&place, &["init"]).status.code(), Some(0));
    support::pg::sql(
        &place.url,
        &format!(
            "INSERT INTO {table} (name, holder, epoch, expires_at) VALUES \
             ('picolease.handover:job', 'n1#', 7, 0), ('job', 'n0#abc', 7, 0)"
        ),
    );
    let url = place.url.clone();
    let select = format!(
        "SELECT name, holder, epoch, expires_at FROM {table} WHERE name LIKE 'picolease.handover:%' ORDER BY name"
    );
    let marker = format!(
        "SELECT coalesce(holder, '-'), epoch > 7, expires_at > 0 FROM {table} WHERE name = 'picolease.table'"
    );
    assert_eq!(
        support::pg::sql(&place.url, &marker),
        ["-|f|f"],
        "init wrote the table's marker row"
    );
    requests_are_left_alone("postgres", &place, || {
        support::pg::sql(&url, &select).join("\n")
    });
    // The marker enters the grace with the lease rows: a lease whose
    // first row was lost starts in it too (DESIGN §3 "Failover").
    assert_eq!(
        support::pg::sql(&place.url, &marker),
        ["-|t|t"],
        "the runbook re-stamped the table's marker row"
    );
    let row = support::pg::sql(
        &place.url,
        &format!("SELECT coalesce(holder, '-'), epoch > 7 FROM {table} WHERE name = 'job'"),
    );
    assert_eq!(row, ["-|t"], "the lease row is nobody's at a new epoch");
    // Usage: --all without --after-failover, or with --name.
    for args in [
        &["release", "--all"][..],
        &["release", "--after-failover"][..],
        &["release", "--all", "--after-failover", "--name", "job"][..],
    ] {
        let out = picolease(&place, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}
