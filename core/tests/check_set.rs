//! The exhaustive model check over lease sets (issue 18): 2 nodes, each
//! the real `LeaseSet` over the same 2 leases, hold every per-lease
//! property (liveness included) and the share's (no stealing) on every
//! path within the bounds
//! of `Bounds::for_set` cut to a depth that runs in well under a minute.
//!
//! The deeper check is `#[ignore]`d; run it with
//! `cargo test -p picolease-core --features sim --test check_set -- --ignored --nocapture`.

use picolease_core::check::{check, replay, Bounds, BoundsError, Budget};

/// 2 nodes × 2 leases, no fault, to `depth`: no violation, and the search
/// completed (the depth bound, not a budget, stopped it).
fn bounded(depth: usize, faults: usize) {
    let mut bounds = Bounds::for_set(2, 2);
    bounds.depth = depth;
    bounds.faults = faults;
    let report = check(&bounds, Budget::default(), |p| {
        eprintln!(
            "depth {:>3}: {:>9} states, frontier {:>8}, {:.1?}",
            p.depth, p.states, p.frontier, p.elapsed
        )
    })
    .expect("valid bounds");
    println!("{report}");
    assert_eq!(report.leases, 2);
    assert!(report.violations.is_empty(), "{report}");
    assert!(report.complete, "{report}");
}

/// Far enough for both nodes to survey twice, plan their share and
/// acquire, a node that took both leases before it saw the other starting
/// to give one up (2,640,968 states, 5,778,240 transitions, 61 s beside
/// another build on 2 cores; 2,507,980 states and 5,592,641 transitions
/// before liveness was checked per lease, whose leaderless counts the
/// fingerprint now tells apart; 833,069 states before a node's membership
/// row was written right after its first survey). Liveness (bound 16
/// database ticks) is checked but not reached at this depth: paths reach
/// 6 or 7 database ticks (see `check_mutants.rs` for a set's liveness).
#[test]
fn two_nodes_two_leases_hold_every_property_to_depth_30() {
    bounded(30, 0);
}

/// Deeper by one (3,764,433 states, 8,447,730 transitions, 84 s, about
/// 14 GB, measured before liveness was checked per lease and not
/// re-measured since: expect more; depth 32, where the planted yield bug shows, outgrew 24 GB once
/// a node's membership row was written right after its first survey; the
/// mutant's own test stops at the bug).
#[test]
#[ignore = "minutes long, about 14 GB: run with -- --ignored"]
fn two_nodes_two_leases_hold_every_property_to_depth_31() {
    bounded(31, 0);
}

/// With one fault per path (loss, late delivery, stray batch, pause,
/// crash, restart or shutdown), to depth 24 (3,620,260 states, 10,116,990
/// transitions, 100 s, measured before liveness was checked per lease and
/// not re-measured since).
#[test]
#[ignore = "minutes long: run with -- --ignored"]
fn two_nodes_two_leases_hold_every_property_with_one_fault_to_depth_24() {
    bounded(24, 1);
}

#[test]
fn set_bounds_are_checked() {
    let set = Bounds::for_set(2, 2);
    assert_eq!(set.validate(), Ok(()));
    assert_eq!(set.leases, 2);
    assert_eq!(Bounds::default_for(2).leases, 0);
    let mut bad = set.clone();
    bad.leases = 4;
    assert_eq!(bad.validate(), Err(BoundsError::Leases(4)));
}

/// A set's first survey, replayed: sent, run and answered, nothing held.
#[test]
fn a_set_trace_replays() {
    let bounds = Bounds::for_set(2, 2);
    let r = replay("n0:timer;db:n0;n0:recv", &bounds).expect("a valid trace");
    assert_eq!(r.violation, None);
    assert_eq!(r.steps.len(), 3);
    assert!(r.steps[0].effects[0].contains("Survey"), "{r}");
    assert!(r.steps[2].state.contains("n0 holds nothing"), "{r}");
    // The lone-lease step forms, and only those.
    assert!(replay("n0:recv", &bounds).is_err());
}
