//! A steady-state step allocates nothing (DESIGN §9: a `LeaseState` per
//! lease must stay cheap). Counting allocations is deterministic, unlike
//! timing, so this is a plain test; `benches/step.rs` reports the same
//! count beside the timings.
//!
//! This binary holds a single test: the allocation counter is global, and a
//! second test running in parallel would be counted too.

#[allow(dead_code)]
#[path = "../benches/workloads/mod.rs"]
mod workloads;

use std::alloc::System;

use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use workloads::{Follower, Leader};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Ten thousand renew cycles of a leader, ten thousand poll cycles of a
/// follower, and as many idle steps: not one allocation, reallocation or
/// deallocation.
#[test]
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
