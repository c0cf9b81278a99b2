//! `picolease run --name 's{0..3}' --listen ADDR`, from outside: the set's
//! `/healthz` is 200 while its loop steps and turns 503 ("wedged", with the
//! time since the last step) once the loop is blocked through the hidden
//! test seam, as the single lease's does (`cli_listen`).

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::http::{free_addr, wait_get};

/// Kills the process (SIGKILL: a wedged loop never finishes a shutdown)
/// even when the test fails.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_sets_healthz_is_503_when_its_loop_is_wedged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let addr = free_addr();
    let started = Instant::now();
    let _child = Killed(
        Command::new(env!("CARGO_BIN_EXE_picolease"))
            .env_remove("PICOLEASE_DB")
            .env("PICOLEASE_TEST_WEDGE_AFTER_MS", "2000")
            .args(["--db", &format!("sqlite://{}", db.display())])
            .args(["run", "--name", "s{0..3}", "--ttl", "1s", "--listen", &addr])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (first, body) = wait_get(&addr, "/healthz", |_, _| true);
    if started.elapsed() < Duration::from_millis(1500) {
        assert_eq!(first, 200, "healthy before the wedge: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["status"], "ok", "{body}");
        // ttl 1 s: interval 250 ms + 2 × 250 ms + 250 ms.
        assert_eq!(json["stall_after_ms"], 1_000, "{body}");
        assert!(
            json["since_progress_ms"].as_u64().unwrap() < 1_000,
            "{body}"
        );
    }
    let (_, body) = wait_get(&addr, "/healthz", |s, _| s == 503);
    let waited = started.elapsed();
    println!(
        "/healthz 503 {waited:?} after start (wedged at 2s): {}",
        body.trim()
    );
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["status"], "wedged", "{body}");
    assert!(
        json["since_progress_ms"].as_u64().unwrap() >= 1_000,
        "{body}"
    );
    // The loop blocks at its first step after 2 s; its last step came at
    // most an interval (250 ms) before, so not 503 before 2 s − 250 ms +
    // 1 s (less a margin: the seam's 2 s start a little after `started`).
    assert!(
        waited > Duration::from_millis(2_500),
        "not before the bound: {waited:?}"
    );
}
