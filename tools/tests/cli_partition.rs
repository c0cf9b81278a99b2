//! A silent partition (issue 20): one `picolease run` reaches a private
//! PostgreSQL server from a network namespace over a veth pair
//! (`tests/tests/pg_support/netns.rs`, `cluster.rs`), and the namespace
//! then drops every packet to and from the host (nftables): no RST, the
//! connections stay open on both ends. The cut-off leader demotes by its
//! deadline, the other process leads only after that, and once the
//! partition heals the first rejoins as a follower. The server gives up
//! on the cut-off node's sessions by itself within 10 s (the session
//! keepalives, `POSTGRES_SESSION_KEEPALIVES`), and the node's own sockets
//! within 8 s (`tcp_user_timeout`, keepalives). Without the session
//! keepalives both of its sessions were still on the server 10 s after
//! the cut, and the test failed (negative control, 2026-12-03). Needs root (namespaces) and `nft`
//! (`.ci/run` installs nftables); it fails, not skips, without them.
//!
//! `cargo test -p picolease-cli --test cli cli_partition:: -- --nocapture`

#![cfg(feature = "postgres")]

use crate::support;

#[path = "../../tests/tests/pg_support/cluster.rs"]
mod cluster;
#[path = "../../tests/tests/pg_support/netns.rs"]
mod netns;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::Server;
use netns::Netns;
use support::{wait_event, Log};

const TTL: Duration = Duration::from_secs(3);
/// `--ttl 3s`'s default interval.
const INTERVAL: Duration = Duration::from_millis(750);

/// The sessions the server has from `addr`.
fn sessions_from(server: &Server, addr: &str) -> usize {
    server
        .sql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE client_addr = '{addr}'"
        ))
        .trim()
        .parse()
        .expect("a count")
}

#[test]
fn a_leader_cut_off_silently_demotes_by_its_deadline_and_rejoins_as_a_follower() {
    let netns = Netns::new();
    let listen = format!("listen_addresses = '127.0.0.1,{}'", netns.host_ip());
    let server = Server::primary(&[&listen]);
    server.trust_network(&netns.cidr());
    let inside = format!(
        "postgres://postgres@{}:{}/postgres?connect_timeout=1",
        netns.host_ip(),
        server.port()
    );
    let outside = format!("{}?connect_timeout=1", server.url());
    let log: Log = Arc::default();
    let cmd = ["--", "sleep", "1000"];

    let _inside = support::spawn_command(
        netns.command(env!("CARGO_BIN_EXE_picolease")),
        &inside,
        &[],
        ("reaper", "3s"),
        0,
        &log,
        &cmd,
    );
    let first = wait_event(&log, 0, |e| e.node == 0 && e.kind() == "leader");
    let _outside = support::spawn(&outside, &[], "reaper", "3s", 1, &log, &cmd);
    wait_event(&log, 0, |e| e.node == 1 && e.kind() == "observed");
    // The inside node's statement and listening sessions (the second
    // connects in parallel).
    support::wait_for(
        "two sessions from inside the namespace",
        Duration::from_secs(10),
        || sessions_from(&server, &netns.ns_ip()) == 2,
    );

    let from = support::len(&log);
    let cut = support::now_ms();
    let cut_at = Instant::now();
    netns.partition();
    let demoted = wait_event(&log, from, |e| e.node == 0 && e.kind() == "follower");
    let successor = wait_event(&log, from, |e| e.node == 1 && e.kind() == "leader");
    let demoted_after = demoted.unix_ms() - cut;
    let led_after = successor.unix_ms() - cut;
    eprintln!(
        "cut off at epoch {}: it demoted ({}) {demoted_after} ms after the cut; \
         the other led at epoch {} {led_after} ms after it",
        first.epoch(),
        demoted.json["reason"],
        successor.epoch()
    );
    assert_eq!(demoted.json["reason"], "expired", "{:?}", demoted.json);
    // Its deadline is within a ttl of its last renewal, sent before the
    // cut (a generous 500 ms for the 2-core machine).
    assert!(
        demoted_after <= (TTL + Duration::from_millis(500)).as_millis() as u64,
        "demoted {demoted_after} ms after the cut"
    );
    assert!(
        successor.unix_ms() >= demoted.unix_ms(),
        "the successor led before the cut-off leader stopped"
    );
    assert!(successor.epoch() > first.epoch());
    assert!(
        led_after <= (TTL + 2 * INTERVAL + Duration::from_millis(500)).as_millis() as u64,
        "the successor led {led_after} ms after the cut"
    );

    // Cut off past the dead-peer time of both ends' sockets (8 s after
    // the last packet, which went at most an interval before the cut):
    // the server has given up on the cut-off node's sessions by itself.
    std::thread::sleep(Duration::from_secs(10).saturating_sub(cut_at.elapsed()));
    let left = sessions_from(&server, &netns.ns_ip());
    eprintln!("sessions of the cut-off node left on the server 10 s after the cut: {left}");
    assert_eq!(left, 0, "the server kept sessions of a vanished client");
    let healed = support::now_ms();
    let from = support::len(&log);
    netns.heal();
    let rejoined = wait_event(&log, from, |e| {
        e.node == 0
            && e.kind() == "observed"
            && e.json["holder"]
                .as_str()
                .is_some_and(|h| h.starts_with("n1#"))
    });
    eprintln!(
        "healed: the cut-off node follows the new leader {} ms later",
        rejoined.unix_ms() - healed
    );
    let sessions = sessions_from(&server, &netns.ns_ip());
    assert!(
        sessions <= 2,
        "more sessions than a statement and a listening connection: {sessions}"
    );
    let events = log.lock().unwrap().clone();
    let again: Vec<_> = events
        .iter()
        .filter(|e| e.node == 0 && e.kind() == "leader" && e.unix_ms() > cut)
        .collect();
    assert!(again.is_empty(), "the cut-off node led again: {again:?}");
}
