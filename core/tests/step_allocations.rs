//! A steady-state step allocates nothing (DESIGN §9: a `LeaseState` per
//! lease must stay cheap). Counting allocations is deterministic, unlike
//! timing, so this is a plain test; `benches/step.rs` reports the same
//! count beside the timings.
//!
//! This binary holds a single check and no test harness (`harness = false`
//! in `core/Cargo.toml`): the allocation counter is global, and a second
//! test, or the harness's own printing on its main thread, would be
//! counted too.

#[allow(dead_code)]
#[path = "../benches/workloads/mod.rs"]
mod workloads;

use std::alloc::System;

use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use workloads::{Follower, Leader};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const NAME: &str = "steady_state_steps_allocate_nothing";

/// The little of libtest's command line that runners use: `--list` (as
/// cargo-nextest lists tests), a name filter (`--exact` or a substring),
/// `--ignored` (this check is not ignored); other flags are accepted and
/// ignored.
fn main() {
    const VALUED: [&str; 6] = [
        "--test-threads",
        "--format",
        "--color",
        "--logfile",
        "--shuffle-seed",
        "--skip",
    ];
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut args_iter = args.iter();
    while let Some(arg) = args_iter.next() {
        if VALUED.contains(&arg.as_str()) {
            let value = args_iter.next();
            if arg == "--skip" {
                skips.extend(value);
            }
        } else if !arg.starts_with('-') {
            filters.push(arg.as_str());
        }
    }
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let exact = has("--exact");
    let selected = !has("--ignored")
        && (filters.is_empty()
            || filters
                .iter()
                .any(|f| if exact { *f == NAME } else { NAME.contains(f) }))
        && !skips.iter().any(|s| NAME.contains(s.as_str()));
    if has("--list") {
        if selected {
            println!("{NAME}: test");
        }
        return;
    }
    if selected {
        steady_state_steps_allocate_nothing();
        println!("test {NAME} ... ok");
    }
}

/// Ten thousand renew cycles of a leader, ten thousand poll cycles of a
/// follower, and as many idle steps: not one allocation, reallocation or
/// deallocation.
fn steady_state_steps_allocate_nothing() {
    let mut leader = Leader::new();
    let mut follower = Follower::new();
    let region = Region::new(GLOBAL);
    for _ in 0..10_000 {
        leader.cycle();
    }
    let renew = region.change();
    let region = Region::new(GLOBAL);
    for _ in 0..10_000 {
        follower.cycle();
    }
    let poll = region.change();
    let region = Region::new(GLOBAL);
    for _ in 0..10_000 {
        leader.idle_step();
    }
    let idle = region.change();
    for (name, stats) in [
        ("renew cycle", renew),
        ("poll cycle", poll),
        ("idle step", idle),
    ] {
        assert_eq!(
            (stats.allocations, stats.reallocations, stats.deallocations),
            (0, 0, 0),
            "{name}: {stats:?}"
        );
    }
    assert!(leader.lease().leadership().is_leader());
    assert!(!follower.lease().leadership().is_leader());
}
