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
