//! Preferred members of a lease set (DESIGN §9 "Preferred members"), from
//! outside: two `picolease run --name 'p{0..5}' --json` processes share
//! six leases three and three; a third joins with `--priority 1
//! --version-tag 2.0`. Both older members hand each lease they lead to it
//! (`handover` lines naming n2), it leads all six at the next epochs, no
//! lease is ever led twice, and `status --members --json` shows its rank.
//! When it exits the two others share the six again. On a SQLite file,
//! on the PostgreSQL server at 127.0.0.1:5432 and on the MariaDB server
//! at 127.0.0.1:3306 (a table per test; FAILS, not skips, when a server
//! is unreachable).
//!
//! The time from the joiner's start to its sixth `leader` line is
//! printed: `cargo test -p picolease-cli --test cli cli_preference_set:: --
//! --nocapture --test-threads 1`.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use nix::sys::signal::Signal;
use support::{assert_never_led_twice, counts, held, now_ms, picolease, signal, wait_for};
use support::{stop_cleanly, Log, PATIENCE};

const NAMES: &str = "p{0..5}";
/// Interval 500 ms.
const TTL: &str = "2s";

fn preferred_member_joins(db: &str, table: &str, database: &str) {
    let log: Log = Arc::default();
    let global = ["--table", table];
    let mut nodes = vec![
        support::spawn(db, &global, NAMES, TTL, 0, &log, &[]),
        support::spawn(db, &global, NAMES, TTL, 1, &log, &[]),
    ];
    let none = BTreeSet::new();
    wait_for("three leases each", PATIENCE, || {
        counts(&log, &none) == [3, 3]
    });
    let before = held(&log, &none);
    let from = log.lock().unwrap().len();
    let joined = now_ms();
    nodes.push(support::spawn(
        db,
        &global,
        NAMES,
        TTL,
        2,
        &log,
        &["--priority", "1", "--version-tag", "2.0"],
    ));
    let took = wait_for("n2 leads all six", PATIENCE, || {
        held(&log, &none).get(&2).is_some_and(|h| h.len() == 6)
    });
    // Each old holder prints its `handover` once the statement is
    // accepted, which is also when n2 may take the lease: n2's `leader`
    // line may come first.
    wait_for("every old holder's handover line", PATIENCE, || {
        let events = &log.lock().unwrap()[from..];
        before.iter().all(|(node, leases)| {
            leases.iter().all(|lease| {
                events.iter().any(|e| {
                    e.node == *node
                        && e.kind() == "handover"
                        && e.json["name"].as_str() == Some(lease.as_str())
                })
            })
        })
    });
    let events = log.lock().unwrap()[from..].to_vec();
    let last_leader = events
        .iter()
        .filter(|e| e.node == 2 && e.kind() == "leader")
        .map(|e| e.unix_ms())
        .max()
        .unwrap();
    println!(
        "{database}: the preferred member led all six leases {} ms after it was started (seen by the test after {took:?})",
        last_leader.saturating_sub(joined)
    );
    // Generous: its start, two surveys and the others' next survey fit in
    // about 2 intervals (1 s) on every database; a busy machine may add.
    assert!(
        last_leader.saturating_sub(joined) < 5_000,
        "{database}: took {} ms",
        last_leader.saturating_sub(joined)
    );
    // Every lease moved once, by its holder's handover to n2, at the next
    // epoch.
    for (node, leases) in &before {
        for lease in leases {
            let named = |e: &&support::Event| e.json["name"].as_str() == Some(lease.as_str());
            let handed = events
                .iter()
                .filter(named)
                .find(|e| e.node == *node && e.kind() == "handover")
                .unwrap_or_else(|| panic!("{database}: n{node} hands {lease} over: {events:#?}"));
            assert_eq!(handed.json["to"], "n2", "{database}: {}", handed.json);
            let led: Vec<_> = events
                .iter()
                .filter(named)
                .filter(|e| e.kind() == "leader")
                .collect();
            assert_eq!(led.len(), 1, "{database}: {lease} moved once: {led:#?}");
            assert_eq!(led[0].node, 2);
            assert_eq!(led[0].epoch(), handed.epoch() + 1);
        }
    }
    // The membership rows show the rank of the one that has one.
    let out = picolease(&[
        "--db",
        db,
        "--table",
        table,
        "status",
        "--members",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let members: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let members = members.as_array().unwrap();
    assert_eq!(members.len(), 3, "{database}: {members:?}");
    for m in members {
        let ranked = m["holder"].as_str().unwrap().starts_with("n2#");
        assert_eq!(m.get("priority").is_some(), ranked, "{m}");
        if ranked {
            assert_eq!(m["priority"], 1, "{m}");
            assert_eq!(m["version_tag"], "2.0", "{m}");
        }
    }
    // The preferred member leaves: the two others share the six again.
    signal(&nodes[2], Signal::SIGTERM);
    assert_eq!(nodes[2].child.wait().unwrap().code(), Some(0));
    nodes[2].reader.take().unwrap().join().unwrap();
    let gone = BTreeSet::from([2]);
    wait_for("three leases each again", PATIENCE, || {
        counts(&log, &gone) == [3, 3]
    });
    stop_cleanly(&mut nodes[..2]);
    let all = log.lock().unwrap().clone();
    assert_never_led_twice(&all, None);
}

#[test]
fn a_preferred_member_that_joins_is_handed_every_lease() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("leases.db").display());
    preferred_member_joins(&db, "pl_set_prefer", "SQLite");
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_a_preferred_member_that_joins_is_handed_every_lease() {
    const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";
    let table = format!("pl_set_prefer_{}", std::process::id());
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
    preferred_member_joins(POSTGRES, &table, "PostgreSQL");
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_a_preferred_member_that_joins_is_handed_every_lease() {
    const MYSQL: &str = "mysql://root@127.0.0.1:3306/test";
    let table = format!("pl_set_prefer_{}", std::process::id());
    support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
    preferred_member_joins(MYSQL, &table, "MariaDB");
    support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
}
