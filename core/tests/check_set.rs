//! The exhaustive model check over lease sets (issue 18): 2 nodes, each
//! the real `LeaseSet` over the same 2 leases, hold every per-lease
//! property (liveness included) and the share's (no stealing) on every
//! path within the bounds
//! of `Bounds::for_set` cut to a depth that runs in well under a minute.
//!
//! The deeper check is `#[ignore]`d; run it with
//! `cargo test -p picolease-core --features sim --test check_set -- --ignored --nocapture`.

use picolease_core::check::{check, replay, Bounds, BoundsError, Budget, RANKED_SET_YIELD};

/// Searches `bounds` to its depth: no violation, and the search completed
/// (the depth bound, not a budget, stopped it).
fn clean(bounds: &Bounds) {
    let report = check(bounds, Budget::default(), |p| {
        eprintln!(
            "depth {:>3}: {:>9} states, frontier {:>8}, {:.1?}",
            p.depth, p.states, p.frontier, p.elapsed
        )
    })
    .expect("valid bounds");
    println!("{report}");
    assert_eq!(report.leases, bounds.leases);
    assert!(report.violations.is_empty(), "{report}");
    assert!(report.complete, "{report}");
}

/// 2 nodes × 2 leases, `faults` faults, to `depth`.
fn bounded(depth: usize, faults: usize) {
    let mut bounds = Bounds::for_set(2, 2);
    bounds.depth = depth;
    bounds.faults = faults;
    clean(&bounds);
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
/// Out of CI since 2026-12-06 (CI time); depth 26 runs there.
#[test]
#[ignore = "about a minute: run with -- --ignored"]
fn two_nodes_two_leases_hold_every_property_to_depth_30() {
    bounded(30, 0);
}

/// Both nodes survey twice, plan and acquire, in every interleaving to
/// depth 26 (486,244 states, 1,087,428 transitions, 11 s on 2 cores,
/// 2026-12-06): CI's bounded check over sets.
#[test]
fn two_nodes_two_leases_hold_every_property_to_depth_26() {
    bounded(26, 0);
}

/// The same as depth 26, with the model database renewing by liveness
/// (DESIGN §9 "Renewal by liveness", `Bounds::by_liveness`): the unchanged `LeaseSet` over
/// statements that link what a node takes to its membership row and
/// confirm it by reading, every property per lease and no stealing (a
/// linked row taken only once its holder's liveness is over).
#[test]
fn by_liveness_two_nodes_two_leases_hold_every_property_to_depth_26() {
    let mut bounds = Bounds::for_set(2, 2);
    bounds.depth = 26;
    bounds.by_liveness = true;
    clean(&bounds);
}

/// The same to depth 26 with one fault per path (loss, late delivery,
/// stray batch, pause, crash, restart or shutdown): 12,751,623 states,
/// 34,056,523 transitions, 197 s and 602 MiB (release, 2026-12-07; depth
/// 23 is 4,177,154 states). Depth 24 outgrew the 24 GB machine when the
/// states to explore were kept whole (before issue 48).
#[test]
#[ignore = "minutes long: run with --release -- --ignored"]
fn by_liveness_two_nodes_two_leases_hold_every_property_with_one_fault_to_depth_26() {
    let mut bounds = Bounds::for_set(2, 2);
    bounds.depth = 26;
    bounds.faults = 1;
    bounds.by_liveness = true;
    clean(&bounds);
}

/// Deeper by one: 4,009,375 states, 8,800,152 transitions, 81 s and
/// 305 MiB (`picolease check --nodes 2 --leases 2 --depth 31`, release,
/// 2026-12-06; about 14 GB before the states to explore were rebuilt
/// from their paths, issue 48).
#[test]
#[ignore = "minutes long: run with --release -- --ignored"]
fn two_nodes_two_leases_hold_every_property_to_depth_31() {
    bounded(31, 0);
}

/// With one fault per path (loss, late delivery, stray batch, pause,
/// crash, restart or shutdown), to depth 26: 15,274,140 states,
/// 39,074,986 transitions, 299 s and 1.2 GiB (`picolease check --nodes 2
/// --leases 2 --depth 26 --faults 1`, release, 2026-12-06). Before the
/// states to explore were rebuilt from their paths (issue 48) the kernel
/// killed it at 23.8 GB, at depth 23.
#[test]
#[ignore = "minutes long: run with --release -- --ignored"]
fn two_nodes_two_leases_hold_every_property_with_one_fault_to_depth_26() {
    bounded(26, 1);
}

/// Planned handovers over a set (`Bounds::handover`: a leader of `s0`
/// hands it to the other node, a fault step), `leases` leases, to `depth`:
/// no violation, the search complete.
fn bounded_with_handover(leases: usize, depth: usize) {
    let mut bounds = Bounds::for_set(2, leases);
    bounds.handover = true;
    bounds.faults = 1;
    bounds.depth = depth;
    clean(&bounds);
}

/// 2 nodes × 1 lease, one fault per path (a planned handover among
/// them), every interleaving to depth 18: the hand-over's stop, statement
/// and reply against every other step (a completed handover, the other
/// node's term included, takes 23 steps: `a_set_hand_over_replays_…`
/// below, and the ignored deeper check).
#[test]
fn a_set_lease_handed_over_holds_every_property_to_depth_18() {
    bounded_with_handover(1, 18);
}

/// Deeper, to depth 26, past where the shortest paths reach the
/// successor's acquire of the row reserved for it (the replay below, step
/// 23): 14,442,634 states, 37,549,462 transitions, 231 s and 657 MiB, no
/// violation (`picolease check --nodes 2 --leases 1 --handover --faults 1
/// --depth 26`, release, 2026-12-06). Depth 24 outgrew 19 GB of the
/// 24 GB machine when the states to explore were kept whole (before
/// issue 48; depth 23 was 4,410,385 states then).
#[test]
#[ignore = "minutes long: run with --release -- --ignored"]
fn a_set_lease_handed_over_holds_every_property_to_depth_26() {
    bounded_with_handover(1, 26);
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

/// A set's lease handed over, replayed step by step on the real
/// `LeaseSet`s and the model database, every property checked after each
/// step: n0 leads `s0`, hands it to n1 (its work stops first), the
/// hand-over notifies n1, which surveys, finds the row reserved for it and
/// takes it at the next epoch.
#[test]
fn a_set_hand_over_replays_to_the_successors_term() {
    let mut bounds = Bounds::for_set(2, 1);
    bounds.handover = true;
    bounds.faults = 1;
    let led = "tick:db;n0:timer;tick:n0;tick:n0;db:n0;n1:timer;tick:n1;tick:db;tick:n0;\
               n0:recv;db:n0;n0:recv;db:n0;n0:recv;db:n0;n0:recv";
    let r = replay(led, &bounds).expect("a valid trace");
    assert_eq!(r.violation, None, "{r}");
    assert!(
        r.steps.last().unwrap().state.contains("n0 holds s0@1"),
        "{r}"
    );
    let trace = format!("{led};n0:handover;db:n0;n0:recv;n1:recv;db:n1;n1:recv;db:n1;n1:recv");
    let r = replay(&trace, &bounds).expect("a valid trace");
    assert_eq!(r.violation, None, "{r}");
    let end = &r.steps.last().unwrap().state;
    assert!(end.contains("n1 holds s0@2"), "{r}");
    assert!(end.contains("n0 holds nothing"), "{r}");
}

/// Ranked members (DESIGN §9 "Preferred members", `Bounds::ranked`): node
/// `n` has priority `n + 1`, carried by its membership row, so node 1
/// outranks node 0 and is handed whatever node 0 holds. `leases` leases,
/// `faults` faults, to `depth`: every property per lease, and every
/// hand-over a yield to a higher rank.
fn bounded_ranked(leases: usize, faults: usize, depth: usize) {
    let mut bounds = Bounds::for_set(2, leases);
    bounds.ranked = true;
    bounds.faults = faults;
    bounds.depth = depth;
    clean(&bounds);
}

/// 2 ranked nodes × 1 lease with one fault (a crash, restart or
/// shutdown: the better node's restart is what has the other lead first
/// and then yield), every interleaving to depth 19 (CI; 954,440 states, about
/// 20 s). The yield itself lies deeper: `a_ranked_yield_replays_to_the_better_members_term`.
#[test]
fn ranked_members_hold_every_property_with_one_fault_to_depth_19() {
    bounded_ranked(1, 1, 19);
}

/// The same to depth 23: 4,407,235 states, 11,554,388 transitions, 75 s
/// and 304 MiB (`picolease check --nodes 2 --leases 1 --ranked --faults 1
/// --depth 23`, release, 2026-12-06).
#[test]
#[ignore = "about a minute: run with --release -- --ignored"]
fn ranked_members_hold_every_property_with_one_fault_to_depth_23() {
    bounded_ranked(1, 1, 23);
}

/// [`RANKED_SET_YIELD`] replayed on the real `LeaseSet`s and the model
/// database, every property (preference included) checked after each
/// step.
#[test]
fn a_ranked_yield_replays_to_the_better_members_term() {
    let mut bounds = Bounds::for_set(2, 1);
    bounds.ranked = true;
    bounds.faults = 1;
    let r = replay(RANKED_SET_YIELD, &bounds).expect("a valid trace");
    assert_eq!(r.violation, None, "{r}");
    let at = |k: usize| &r.steps[k].state;
    assert!(at(15).contains("n0 holds s0@1"), "{r}");
    assert!(
        r.steps[34].effects.iter().any(|e| e.contains("HandedOver")),
        "{r}"
    );
    assert!(
        r.steps[35].effects.iter().any(|e| e.contains("HandOver")),
        "{r}"
    );
    let end = &r.steps.last().unwrap().state;
    assert!(end.contains("n1 holds s0@2"), "{r}");
    assert!(end.contains("n0 holds nothing"), "{r}");
}
