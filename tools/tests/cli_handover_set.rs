//! Planned handover of one lease of a set (DESIGN §3 "Planned handover",
//! §9), from outside: two `picolease run --name 's{0..3}' --json`
//! processes share four leases two and two; `picolease handover --name L
//! --to NODE` moves L from its holder to NODE, whatever NODE's share. The
//! holder prints `handover` {from, to, epoch}, NODE's `leader` for L comes
//! at the next epoch, the share is two and two again after (another lease
//! moves back), and no lease is ever led twice. On a SQLite file, on the
//! PostgreSQL server at 127.0.0.1:5432 and on the MariaDB server at
//! 127.0.0.1:3306 (a table per test; FAILS, not skips, when a server is
//! unreachable).
//!
//! "Hand over, then exit" with several names: SIGUSR1 (or SIGTERM with
//! `--handover-on-term`) to one of three processes makes it hand each
//! lease it leads to one of the two others (`handover` lines naming them),
//! exit 0, and the others lead every lease at the next epoch, never a lease
//! led twice.
//!
//! The handover's time (the holder's `handover` line to NODE's `leader`
//! line for L) is printed: `cargo test -p picolease-cli --test
//! cli cli_handover_set:: -- --nocapture --test-threads 1`.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use nix::sys::signal::Signal;
use support::{assert_never_led_twice, counts, held, picolease, signal, wait_event, wait_for};
use support::{stop_cleanly, Log, PATIENCE};

const NAMES: &str = "s{0..3}";
const TTL: &str = "2s";

fn set_handover(db: &str, table: &str, database: &str) {
    let log: Log = Arc::default();
    let global = ["--table", table];
    let addr = support::http::free_addr();
    let mut nodes = vec![
        support::spawn(db, &global, NAMES, TTL, 0, &log, &["--listen", &addr]),
        support::spawn(db, &global, NAMES, TTL, 1, &log, &[]),
    ];
    let none = BTreeSet::new();
    wait_for("two leases each", PATIENCE, || {
        counts(&log, &none) == [2, 2]
    });
    let holding = held(&log, &none);
    let lease = holding[&0].iter().next().unwrap().clone();
    let from = log.lock().unwrap().len();

    let out = picolease(&[
        "--db", db, "--table", table, "handover", "--name", &lease, "--to", "n1",
    ]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{database}: handover:\n{text}");

    let named = |e: &support::Event| e.json["name"].as_str() == Some(lease.as_str());
    let handed = wait_event(&log, from, |e| {
        e.node == 0 && e.kind() == "handover" && named(e)
    });
    assert_eq!(handed.json["to"], "n1", "{database}: {}", handed.json);
    let led = wait_event(&log, from, |e| {
        e.node == 1 && e.kind() == "leader" && named(e)
    });
    assert_eq!(
        led.epoch(),
        handed.epoch() + 1,
        "{database}: the successor's term is the next one"
    );
    println!(
        "{database}: {lease} handed from n0 to n1 in {} ms (handover line to leader line)",
        led.unix_ms().saturating_sub(handed.unix_ms())
    );
    // The share moves another lease back: two each again, and n1 keeps
    // the lease it was handed.
    wait_for("two leases each again", PATIENCE, || {
        counts(&log, &none) == [2, 2]
    });
    assert!(
        held(&log, &none)[&1].contains(&lease),
        "{database}: n1 keeps {lease}"
    );
    // The holder's metrics count one handover, and one transition for it.
    let (_, body) = support::http::wait_get(&addr, "/metrics", |status, body| {
        status == 200 && body.contains("picolease_handovers_total")
    });
    let series = |s: &str| support::http::sample(&body, s);
    assert_eq!(
        series(&format!(
            "picolease_handovers_total{{lease=\"{lease}\",result=\"reserved\"}}"
        )),
        Some(1.0),
        "{database}: {body}"
    );
    let transition = format!(
        "picolease_transitions_total{{lease=\"{lease}\",to=\"follower\",reason=\"handover\"}}"
    );
    assert_eq!(series(&transition), Some(1.0), "{database}: {body}");
    stop_cleanly(&mut nodes);
    let events = log.lock().unwrap().clone();
    assert_never_led_twice(&events, None);
}

#[test]
fn a_lease_of_a_set_is_handed_to_the_named_node_and_the_share_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("leases.db").display());
    set_handover(&db, "pl_set_handover", "SQLite");
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_a_lease_of_a_set_is_handed_to_the_named_node_and_the_share_holds() {
    const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";
    let table = format!("pl_set_handover_{}", std::process::id());
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
    set_handover(POSTGRES, &table, "PostgreSQL");
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_a_lease_of_a_set_is_handed_to_the_named_node_and_the_share_holds() {
    const MYSQL: &str = "mysql://root@127.0.0.1:3306/test";
    let table = format!("pl_set_handover_{}", std::process::id());
    support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
    set_handover(MYSQL, &table, "MariaDB");
    support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
}

/// Three processes over six leases, two each; `by` to n0 (run with
/// `extra`): it hands both its leases to n1 or n2, exits 0, and they lead
/// all six.
fn leave(db: &str, table: &str, database: &str, by: Signal, extra: &[&str]) {
    let log: Log = Arc::default();
    let global = ["--table", table];
    let names = "l{0..5}";
    let mut nodes = [
        support::spawn(db, &global, names, TTL, 0, &log, extra),
        support::spawn(db, &global, names, TTL, 1, &log, &[]),
        support::spawn(db, &global, names, TTL, 2, &log, &[]),
    ];
    let none = BTreeSet::new();
    wait_for("two leases each", PATIENCE, || {
        counts(&log, &none) == [2, 2, 2]
    });
    let leaving = held(&log, &none)[&0].clone();
    let from = log.lock().unwrap().len();
    signal(&nodes[0], by);
    assert_eq!(
        nodes[0].child.wait().unwrap().code(),
        Some(0),
        "{database}: n0 exits 0 on {by}"
    );
    nodes[0].reader.take().unwrap().join().unwrap();
    let gone = BTreeSet::from([0]);
    wait_for("n1 and n2 lead all six", PATIENCE, || {
        counts(&log, &gone).iter().sum::<usize>() == 6
    });
    let mut gaps = Vec::new();
    let events = log.lock().unwrap()[from..].to_vec();
    for lease in &leaving {
        let handed = events
            .iter()
            .find(|e| e.node == 0 && e.kind() == "handover" && e.json["name"] == lease.as_str())
            .unwrap_or_else(|| panic!("{database}: n0 hands {lease} over: {events:#?}"));
        let to = handed.json["to"].as_str().unwrap();
        assert!(to == "n1" || to == "n2", "{database}: {lease} to {to}");
        let led = events
            .iter()
            .find(|e| e.kind() == "leader" && e.json["name"] == lease.as_str())
            .unwrap_or_else(|| panic!("{database}: {lease} is led again"));
        assert_eq!(
            format!("n{}", led.node),
            to,
            "{database}: {lease} is led by the node it was handed to"
        );
        assert_eq!(led.epoch(), handed.epoch() + 1);
        gaps.push(led.unix_ms().saturating_sub(handed.unix_ms()));
    }
    println!(
        "{database}: n0 left on {by}; each of its leases led again {gaps:?} ms after its handover line"
    );
    stop_cleanly(&mut nodes[1..]);
    let all = log.lock().unwrap().clone();
    assert_never_led_twice(&all, None);
}

#[test]
fn sigusr1_hands_a_sets_leases_to_the_other_members_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("leases.db").display());
    leave(&db, "pl_set_leave", "SQLite", Signal::SIGUSR1, &[]);
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_sigterm_with_handover_on_term_hands_a_sets_leases_over_then_exits() {
    const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";
    let table = format!("pl_set_leave_{}", std::process::id());
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
    leave(
        POSTGRES,
        &table,
        "PostgreSQL",
        Signal::SIGTERM,
        &["--handover-on-term"],
    );
    support::pg::sql(POSTGRES, &format!("DROP TABLE IF EXISTS {table}"));
}

#[cfg(feature = "mysql")]
#[test]
fn on_mysql_sigusr1_hands_a_sets_leases_to_the_other_members_then_exits() {
    const MYSQL: &str = "mysql://root@127.0.0.1:3306/test";
    let table = format!("pl_set_leave_{}", std::process::id());
    support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
    leave(MYSQL, &table, "MariaDB", Signal::SIGUSR1, &[]);
    support::mysql::sql("test", &format!("DROP TABLE IF EXISTS {table}"));
}
