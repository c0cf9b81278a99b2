//! Members' health in a lease set (DESIGN §9 "Members' health"), from
//! outside: three `picolease run --name 'h{0..5}' --health-cmd … --json`
//! processes share six leases two each. Node 1's probe starts failing:
//! it says `unhealthy` (with the probe's reason), hands every lease it
//! leads to the healthy two (`follower` with reason `unhealthy`), and
//! `status --members --json` shows it `"healthy": false`. When its probe
//! passes again it says `healthy` and takes its share back. No lease is
//! ever led twice. On a SQLite file, on the PostgreSQL server at
//! 127.0.0.1:5432 and on the MariaDB server at 127.0.0.1:3306 (a table
//! per test; FAILS, not skips, when a server is unreachable).
//!
//! Renewing by liveness (`run --by-liveness`, DESIGN §9 "Renewal by liveness") the same holds
//! on SQLite and PostgreSQL, the sick node keeping its membership row.
//!
//! The time from the probe's failure to the last of node 1's leases led
//! elsewhere is printed: `cargo test -p picolease-cli --test
//! cli cli_set_member_health:: -- --nocapture --test-threads 1`.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use support::{assert_never_led_twice, counts, held, now_ms, picolease, wait_event, wait_for};
use support::{stop_cleanly, Log, PATIENCE};

const NAMES: &str = "h{0..5}";
/// Interval 500 ms.
const TTL: &str = "2s";
const INTERVAL: Duration = Duration::from_millis(500);

/// `status --members --json`'s `healthy` of the member whose holder id
/// starts with `n<node>#`.
fn member_healthy(db: &str, table: &str, node: usize) -> Option<bool> {
    let out = picolease(&[
        "--db",
        db,
        "--table",
        table,
        "status",
        "--members",
        "--json",
    ]);
    let members: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let prefix = format!("n{node}#");
    members.as_array()?.iter().find_map(|m| {
        let holder = m["holder"].as_str()?;
        holder
            .starts_with(&prefix)
            .then(|| m["healthy"].as_bool())?
    })
}

/// The scenario on `db`; `shape` is `run`'s extra flags (`--by-liveness`,
/// or none).
fn unhealthy_member_hands_its_leases_over(
    db: &str,
    table: &str,
    dir: &Path,
    database: &str,
    shape: &[&str],
) {
    let log: Log = Arc::default();
    let global = ["--table", table];
    let ok = |node: usize| dir.join(format!("ok{node}"));
    let mut nodes = Vec::new();
    for node in 0..3 {
        std::fs::write(ok(node), "").unwrap();
        let probe = format!(
            "test -e {} || {{ echo 'object store unreachable'; exit 1; }}",
            ok(node).display()
        );
        nodes.push(support::spawn(
            db,
            &global,
            NAMES,
            TTL,
            node,
            &log,
            &[&["--health-cmd", probe.as_str()][..], shape].concat(),
        ));
    }
    let none = BTreeSet::new();
    wait_for("two leases each", PATIENCE, || {
        counts(&log, &none) == [2, 2, 2]
    });
    assert_eq!(member_healthy(db, table, 1), Some(true));
    let before = held(&log, &none)[&1].clone();
    let from = log.lock().unwrap().len();
    let failed_at = now_ms();
    std::fs::remove_file(ok(1)).unwrap();
    let said = wait_event(&log, from, |e| e.node == 1 && e.kind() == "unhealthy");
    assert_eq!(
        said.json["reason"], "the probe exited with code 1: object store unreachable",
        "{}",
        said.json
    );
    wait_for("node 1 leads nothing", PATIENCE, || {
        held(&log, &none).get(&1).is_some_and(BTreeSet::is_empty)
            && counts(&log, &none).iter().sum::<usize>() == 6
    });
    let events = log.lock().unwrap()[from..].to_vec();
    // Each of its leases: a `follower` line with reason `unhealthy`, then
    // one `leader` line on a healthy node, at the next epoch.
    let mut last = 0;
    for lease in &before {
        let named = |e: &&support::Event| e.json["name"].as_str() == Some(lease.as_str());
        let left = events
            .iter()
            .filter(named)
            .find(|e| e.node == 1 && e.kind() == "follower")
            .unwrap_or_else(|| panic!("{database}: n1 gives {lease} up: {events:#?}"));
        assert_eq!(
            left.json["reason"], "unhealthy",
            "{database}: {}",
            left.json
        );
        let led: Vec<_> = events
            .iter()
            .filter(named)
            .filter(|e| e.kind() == "leader")
            .collect();
        assert_eq!(
            led.len(),
            1,
            "{database}: {lease} moved once: {:#?}",
            events.iter().map(|e| &e.json).collect::<Vec<_>>()
        );
        assert_ne!(led[0].node, 1);
        assert_eq!(led[0].epoch(), left.epoch() + 1);
        last = last.max(led[0].unix_ms());
    }
    let took = Duration::from_millis(last.saturating_sub(failed_at));
    // The probe's next run (an interval), the unhealthy row's write, the
    // hand-overs and the healthy members' take: two intervals, and a busy
    // machine's slack.
    let bound = INTERVAL * 3 + Duration::from_millis(400);
    println!(
        "{database}: node 1's {} leases led by healthy members {took:?} after its probe began to fail (bound {bound:?})",
        before.len()
    );
    assert!(
        took <= bound,
        "{database}: {took:?} > {bound:?}: {events:#?}"
    );
    wait_for("status shows n1 unhealthy", PATIENCE, || {
        member_healthy(db, table, 1) == Some(false)
    });
    // It stays out while its probe fails.
    std::thread::sleep(INTERVAL * 4);
    assert!(held(&log, &none)[&1].is_empty(), "{database}");
    // Healthy again: it says so and takes its share back.
    let from = log.lock().unwrap().len();
    std::fs::write(ok(1), "").unwrap();
    wait_event(&log, from, |e| e.node == 1 && e.kind() == "healthy");
    wait_for("two leases each again", PATIENCE, || {
        counts(&log, &none) == [2, 2, 2]
    });
    wait_for("status shows n1 healthy", PATIENCE, || {
        member_healthy(db, table, 1) == Some(true)
    });
    stop_cleanly(&mut nodes);
    let all = log.lock().unwrap().clone();
    assert_never_led_twice(&all, None);
}

#[test]
fn an_unhealthy_member_hands_its_leases_to_the_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("leases.db").display());
    unhealthy_member_hands_its_leases_over(
        &db,
        "pl_set_health",
        dir.path(),
        "SQLite renewing every row",
        &["--every-row"],
    );
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_an_unhealthy_member_hands_its_leases_to_the_healthy() {
    const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";
    let dir = tempfile::tempdir().unwrap();
    let table = format!("pl_set_health_{}", std::process::id());
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
    unhealthy_member_hands_its_leases_over(
        POSTGRES,
        &table,
        dir.path(),
        "PostgreSQL renewing every row",
        &["--every-row"],
    );
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_an_unhealthy_member_hands_its_leases_to_the_healthy() {
    const MYSQL: &str = "mysql://root@127.0.0.1:3306/test";
    let dir = tempfile::tempdir().unwrap();
    let table = format!("pl_set_health_{}", std::process::id());
    support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
    unhealthy_member_hands_its_leases_over(
        MYSQL,
        &table,
        dir.path(),
        "MariaDB renewing every row",
        &["--every-row"],
    );
    support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
}

/// Renewing by liveness (the default, DESIGN §9 "Renewal by liveness"): the sick node
/// keeps its membership row, the liveness its leases are linked to, and
/// holds its unhealthy row beside it; the same moves, each by its own
/// handover, never led twice.
#[test]
fn renewing_by_liveness_an_unhealthy_member_hands_its_leases_to_the_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("leases.db").display());
    unhealthy_member_hands_its_leases_over(
        &db,
        "pl_set_health",
        dir.path(),
        "SQLite by liveness",
        &[],
    );
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_renewing_by_liveness_an_unhealthy_member_hands_its_leases_to_the_healthy() {
    const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";
    let dir = tempfile::tempdir().unwrap();
    let table = format!("pl_set_health_liveness_{}", std::process::id());
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
    unhealthy_member_hands_its_leases_over(
        POSTGRES,
        &table,
        dir.path(),
        "PostgreSQL by liveness",
        &[],
    );
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
}
