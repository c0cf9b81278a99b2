//! Unit tests of `http.rs`: the answers of each endpoint.

use super::*;

#[test]
fn listen_values() {
    assert_eq!(
        parse_listen("127.0.0.1:9464").unwrap(),
        "127.0.0.1:9464".parse().unwrap()
    );
    assert_eq!(
        parse_listen("[::1]:80").unwrap(),
        "[::1]:80".parse().unwrap()
    );
    assert_eq!(parse_listen("localhost:9464").unwrap().port(), 9464);
    for bad in [
        "",
        "9464",
        "localhost",
        "localhost:",
        "localhost:99999",
        "host:1",
        "1.2.3:4",
        "127.0.0.1",
    ] {
        let err = parse_listen(bad).unwrap_err();
        assert!(matches!(err, CliError::Usage(_)), "{bad}");
    }
}

#[test]
fn a_sets_healthz_turns_503_once_its_loop_is_wedged() {
    let stall_after = std::time::Duration::from_millis(1_000);
    let ago = |ms| std::time::Instant::now().checked_sub(std::time::Duration::from_millis(ms));
    let healthy = SetSnapshot {
        last_step: ago(10),
        stall_after,
        target: Some(5),
        ..SetSnapshot::default()
    };
    let (code, value) = set_healthz(&healthy);
    assert_eq!(code, 200, "{value}");
    assert_eq!(value["status"], "ok");
    assert_eq!(value["stall_after_ms"], 1_000);
    assert_eq!(value["target"], 5);
    assert!(
        value["since_progress_ms"].as_u64().unwrap() < 1_000,
        "{value}"
    );

    let wedged = SetSnapshot {
        last_step: ago(2_000),
        ..healthy.clone()
    };
    let (code, value) = set_healthz(&wedged);
    assert_eq!(code, 503, "{value}");
    assert_eq!(value["status"], "wedged");
    assert!(
        value["since_progress_ms"].as_u64().unwrap() >= 2_000,
        "{value}"
    );

    let stopped = SetSnapshot {
        finished: true,
        ..wedged
    };
    // Finished is stopped, not wedged: 200, as a finished single
    // lease answers.
    let (code, value) = set_healthz(&stopped);
    assert_eq!((code, value["status"].as_str()), (200, Some("ok")));
}

/// `GET path` on `addr`: the status code and the body.
fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_string())
}

/// `/leader` and the leader gauge turn by the term's deadline, with the
/// driver's loop held (the wedge seam) so that it publishes nothing: a
/// resumed process, a starved thread or a blocked statement is late the
/// same way. Before they read the deadline themselves they said "leader"
/// for as long as the loop was held.
#[test]
fn leader_and_the_gauge_turn_by_the_deadline_while_the_loop_is_held() {
    use picolease::sqlite::{Database, SqliteLease};
    use picolease::{Config, HolderId, LeaseName};
    let dir = tempfile::tempdir().unwrap();
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.server.server_addr().to_ip().expect("a TCP port");
    let config = Config::with_ttl(
        LeaseName::new("held").unwrap(),
        HolderId::new("me").unwrap(),
        std::time::Duration::from_secs(1),
    );
    let lease = SqliteLease::builder(config, Database::file(dir.path().join("a.db")))
        .start()
        .unwrap();
    let snapshots = lease.snapshots();
    listener.serve(snapshots.clone()).unwrap();
    assert!(lease
        .wait_for(std::time::Duration::from_secs(10), |l| l.is_leader())
        .is_some());
    let gauge = |body: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(r#"picolease_leader{lease="held"}"#))
            .map(|v| v.trim().to_string())
    };
    snapshots.wedge_loop_for_tests();
    // The loop blocks at its next step: the last renewal's deadline is
    // the one that holds.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let left = lease.time_left().expect("still leading");
    assert!(left > std::time::Duration::ZERO);
    let held_until = std::time::Instant::now() + left;
    assert_eq!(get(addr, "/leader").0, 200, "before the deadline");
    assert_eq!(gauge(&get(addr, "/metrics").1).as_deref(), Some("1"));
    // Until a millisecond past the deadline (no later check needed: the
    // reading turns at the deadline itself).
    std::thread::sleep(held_until.saturating_duration_since(std::time::Instant::now()));
    std::thread::sleep(std::time::Duration::from_millis(2));
    let (code, body) = get(addr, "/leader");
    assert_eq!(code, 503, "past the deadline: {body}");
    assert_eq!(gauge(&get(addr, "/metrics").1).as_deref(), Some("0"));
    assert!(!lease.leadership().is_leader());
    assert!(!snapshots.snapshot().is_leader());
    assert_eq!(
        lease.leadership().reason,
        Some(picolease::Demotion::Expired)
    );
    // The watch is the loop's last word, which the held loop never
    // changed (DESIGN §4b: what `watch()` cannot promise).
    assert!(lease.watch().borrow().is_leader());
    // The held loop never returns: leave its thread to the process's end.
    std::mem::forget(lease);
}
