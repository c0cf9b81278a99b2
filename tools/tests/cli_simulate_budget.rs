//! `picolease simulate` refuses runs beyond its budget of events
//! (nodes × virtual time / interval, at most 2 million) before starting
//! them: exit 2, one line naming the flags. Runs within it still work.

use crate::support;

use std::time::{Duration, Instant};
use support::picolease;

#[test]
fn a_run_beyond_the_event_budget_is_refused_at_once_naming_the_flags() {
    let started = Instant::now();
    let out = picolease(&[
        "simulate",
        "--nodes",
        "16",
        "--ttl",
        "10ms",
        "--faults",
        "crash@23h",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    for name in [
        "--nodes 16",
        "--ttl 10ms",
        "--faults",
        "crash@23h",
        "at most 2000000",
    ] {
        assert!(stderr.contains(name), "{name:?} not named in {stderr:?}");
    }
    assert!(out.stdout.is_empty(), "nothing simulated");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused only after {:?}",
        started.elapsed()
    );
    eprintln!("{}", stderr.trim());
}

#[test]
fn runs_within_the_budget_still_run() {
    // 16 nodes, ttl 10 ms (interval 2.5 ms), about a minute of virtual
    // time: 16 × 60 s / 2.5 ms = 384,000 events.
    let out = picolease(&[
        "simulate",
        "--nodes",
        "16",
        "--ttl",
        "10ms",
        "--faults",
        "crash@60s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let out = picolease(&["simulate"]);
    assert_eq!(out.status.code(), Some(0));
}
