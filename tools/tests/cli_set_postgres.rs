//! Four `picolease run --name 's{0..199}' --json` processes on PostgreSQL
//! (DESIGN §9), from outside, in a database of the test's own: all 200
//! leases held and balanced 50 each; each process keeps at most two
//! connections (named `picolease` in pg_stat_activity) and sends few
//! statements; after a SIGKILL its leases are taken at their expiry and the
//! share rebalances to 67/67/66; no lease is ever led by two processes.
#![cfg(feature = "postgres")]

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::pg::sql;
use support::{counts, held, now_ms, signal, wait_for, Log, Node};

const ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

#[test]
fn four_processes_share_200_leases_and_take_a_killed_ones_at_expiry() {
    let db = support::pg::Database::new("pl_cli_set");
    let url = db.url();
    let log: Log = Arc::default();
    let ttl = Duration::from_secs(2);
    let mut nodes: Vec<Node> = (0..4)
        .map(|i| support::spawn(&url, &[], "s{0..199}", "2s", i, &log, &[]))
        .collect();
    let none = BTreeSet::new();
    let took = wait_for("50 each", Duration::from_secs(30), || {
        counts(&log, &none) == vec![50, 50, 50, 50]
    });
    eprintln!("200 leases balanced 50/50/50/50 {took:?} after the start");

    // Connections: two per process (statements + LISTEN), named picolease.
    let connections = sql(
        &url,
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND application_name = 'picolease'",
            db.0
        ),
    );
    let connections: usize = connections[0].parse().unwrap();
    eprintln!("{connections} picolease connections for 4 processes");
    assert!(connections <= 8, "{connections} connections");

    // Statements: transactions committed in this database over 5 s.
    let commits = || -> i64 {
        sql(
            ADMIN,
            &format!(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = '{}'",
                db.0
            ),
        )[0]
        .parse()
        .unwrap()
    };
    // Counted from a ttl after the balance: the start-up's own statements
    // (each node's table check and creation, its LISTEN) reach
    // `pg_stat_database` up to seconds after they ran (PostgreSQL 15
    // flushes a backend's statistics at most once a second, an idle one's
    // later), and the shares settle within that (8 to 9.5 commits per
    // process per second were counted from the balance itself, 4.0 later).
    std::thread::sleep(ttl);
    let before = commits();
    std::thread::sleep(Duration::from_secs(5));
    let per_process_per_second = (commits() - before) as f64 / 4.0 / 5.0;
    eprintln!("{per_process_per_second:.1} statements per process per second (interval 500 ms)");
    // At most 3 per interval (6 per second) each: a renew batch and a
    // survey, and an acquire only while under the share (4.0 measured).
    assert!(per_process_per_second <= 6.0, "{per_process_per_second}");

    // SIGKILL node 3: its 50 leases lapse and the others take them.
    let victim = held(&log, &none)[&3].clone();
    let killed_at = now_ms();
    let killed_index = log.lock().unwrap().len();
    signal(&nodes[3], Signal::SIGKILL);
    let _ = nodes[3].child.wait();
    let reaped_at = now_ms();
    let dead = BTreeSet::from([3]);
    let took = wait_for("67/67/66", Duration::from_secs(30), || {
        counts(&log, &dead) == vec![66, 67, 67]
    });
    eprintln!("rebalanced 66/67/67 {took:?} after the SIGKILL (ttl {ttl:?})");
    let events = log.lock().unwrap().clone();
    for name in &victim {
        let taken = events[killed_index..]
            .iter()
            .find(|e| e.kind() == "leader" && e.json["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} never taken over"));
        let after = taken.unix_ms().saturating_sub(killed_at);
        // Not before the row could have lapsed (its last renewal was at
        // most an interval before the kill), and within ttl + 2 intervals.
        assert!(after >= 1_400, "{name} taken {after} ms after the kill");
        assert!(after <= 3_500, "{name} taken {after} ms after the kill");
    }

    // Nobody led a lease another process led (the killed one's terms end
    // at the kill).
    support::assert_never_led_twice(&events, Some((reaped_at, 3)));
    for node in &mut nodes[..3] {
        signal(node, Signal::SIGTERM);
        assert_eq!(node.child.wait().unwrap().code(), Some(0));
    }
}
