//! The exhaustive model checker over the real `LeaseState` (issue 12):
//! the correct machine holds every property at the default bounds, and
//! bad bounds or trace text are typed errors.
//!
//! The 3-node check is `#[ignore]`d (about as long as CI allows for the
//! whole suite); run it with
//! `cargo test --release -p picolease-core --features sim --test check -- --ignored --nocapture`.

use picolease_core::check::{
    check, replay, Bounds, BoundsError, Budget, CheckError, Step, TraceParseError, TraceProblem,
};

/// The check at the default bounds; `whole_space`: the search must end by
/// exhausting the reachable states, not at the depth bound.
fn exhaustive(nodes: usize, whole_space: bool) {
    exhaustive_at(&Bounds::default_for(nodes), whole_space);
}

/// The check at `bounds`: no violation, complete; `whole_space` as above.
fn exhaustive_at(bounds: &Bounds, whole_space: bool) {
    let report = check(bounds, Budget::default(), |p| {
        eprintln!(
            "depth {:>3}: {:>9} states, frontier {:>8}, {:.1?}",
            p.depth, p.states, p.frontier, p.elapsed
        )
    })
    .expect("default bounds are valid");
    println!("{report}");
    assert!(report.violations.is_empty(), "{report}");
    assert!(report.complete, "{report}");
    if whole_space {
        assert_eq!(
            report.frontier_left, 0,
            "the depth bound cut the search: {report}"
        );
    }
}

/// Every interleaving of 2 nodes with up to one fault: no property fails,
/// and the search ends by exhausting the reachable states, not the depth.
#[test]
fn two_nodes_hold_every_property_at_the_default_bounds() {
    exhaustive(2, true);
}

/// A database failover that loses writes (DESIGN §3 "Failover";
/// `Bounds::with_failover`): 2 nodes, the row possibly starting
/// orphaned, a standby that copies the database whenever the search says,
/// and the one fault a promotion of it that loses the writes since its
/// last copy. No two leaders, no epoch given twice, the lease led again
/// within the liveness bound, and validity for every term begun on the
/// new server. `depth`: `None` for the whole space (38,884,680 states,
/// 611 s and 10.4 GB resident on the 2-core machine, 2026-12-05).
fn across_a_failover(depth: Option<usize>) {
    let mut bounds = Bounds::with_failover(2);
    if let Some(depth) = depth {
        bounds.depth = depth;
    }
    exhaustive_at(&bounds, depth.is_none());
}

/// Every path of up to 28 steps across a failover (CI: 1,412,428 states,
/// 10.3 s in a release build; DESIGN §6 has the figures). The planted
/// bugs that ignore the incarnation or the table's marker are found
/// after 5 steps (`check_mutants.rs`).
#[test]
fn two_nodes_hold_every_property_across_a_failover_up_to_28_steps() {
    across_a_failover(Some(28));
}

/// The whole space across a failover (minutes: run on demand with
/// `cargo test -p picolease-core --features sim --test check -- --ignored failover`).
#[test]
#[ignore = "about 9 minutes: run with -- --ignored"]
fn two_nodes_hold_every_property_across_a_failover_that_loses_writes() {
    across_a_failover(None);
}

/// Three nodes across a failover that loses writes (`picolease check
/// --nodes 3 --failover --depth 48`): every path of up to 48 steps,
/// 15,541,354 states, 75,982,328 transitions, no violation, 323 s and a
/// 1.1 GiB peak on the 2-core machine (2026-12-06; the whole space
/// outgrows a few minutes: past depth 55 the levels grow again, 38,441,816
/// states by depth 60 in 769 s and 2.0 GiB). Out of reach before the states to explore were rebuilt from
/// their paths (issue 48): the 2-node whole space alone took 10.4 GB.
#[test]
#[ignore = "about 6 minutes: run with --release -- --ignored"]
fn three_nodes_hold_every_property_across_a_failover_up_to_48_steps() {
    let mut bounds = Bounds::with_failovers(3, 1);
    bounds.depth = 48;
    exhaustive_at(&bounds, false);
}

/// Two lossy failovers in a row (DESIGN §3 "Failover", "The epoch after
/// an adoption"; `Bounds::with_failovers(2, 2)`): three servers, the
/// second standby possibly lacking what the first wrote after its
/// promotion, two faults per path. No epoch the current server writes is
/// one an earlier server issued, besides every other property. Every path
/// of up to 20 steps in CI (2,262,400 states, 18 s; 16 steps before the
/// states to explore were rebuilt from their paths, issue 48; the planted
/// constant jump is found after 7 steps, `check_mutants.rs`); deeper
/// below and with `picolease check --nodes 2 --failovers 2 --depth 24`.
#[test]
fn two_nodes_hold_every_property_across_two_failovers_up_to_20_steps() {
    let mut bounds = Bounds::with_failovers(2, 2);
    bounds.depth = 20;
    exhaustive_at(&bounds, false);
}

/// Deeper: every path of up to 24 steps across two failovers (7,023,535
/// states, 24,641,125 transitions, 68 s and 323 MiB on the 2-core
/// machine, 2026-12-06; out of reach before the states to explore were
/// rebuilt from their paths, issue 48). Its first run found the checker's
/// own slip replayed below.
#[test]
#[ignore = "about a minute: run with --release -- --ignored"]
fn two_nodes_hold_every_property_across_two_failovers_up_to_24_steps() {
    let mut bounds = Bounds::with_failovers(2, 2);
    bounds.depth = 24;
    exhaustive_at(&bounds, false);
}

/// What the check across two failovers first found at 22 steps, and what
/// it was: n1's acquire wins epoch 2; a stray acquire of n1's, an older
/// request run late, bumps its own row to 3; the database fails over to
/// a standby that never copied either; n1 takes the reply to its latest
/// request and leads at epoch 2 on a row the new server lacks. That is a
/// term the lost history granted, which validity does not ask of (DESIGN
/// §6, "A database failover"), but the checker took the highest epoch
/// on its way (the stray's 3, which n1 ignores) for that term. It now
/// takes the reply to the latest request: the trace replays to n1
/// leading at epoch 2 with no violation.
#[test]
fn a_stray_acquires_reply_is_not_the_term_a_failover_outlived() {
    let bounds = Bounds::with_failovers(2, 2);
    let trace = "db:orphan;tick:db;n0:timer;tick:n0;db:n0;n0:recv;tick:n0;n1:timer;tick:n1;\
                 tick:db;tick:n0;tick:n1;stray:n1;tick:db;tick:n1;tick:db;tick:n1;n1:timer;\
                 db:n1;db:stray;db:failover;n1:recv";
    let r = replay(trace, &bounds).expect("a valid trace");
    assert_eq!(r.violation, None, "{r}");
    assert_eq!(r.steps.len(), 22, "{r}");
    let last = &r.steps.last().expect("steps").standing;
    assert!(
        last.leaders
            .iter()
            .any(|&(node, _, epoch)| node == 1 && epoch == 2),
        "{r}"
    );
}

/// Planned handovers (DESIGN §3 "Planned handover";
/// `Bounds::with_handover`): 2 nodes, a leader that may hand its lease
/// over to the other (a fault step), among every other fault. No two
/// leaders, no epoch given twice, gating, fencing, and the lease led
/// again within the liveness bound after each. `depth`: `None` for the
/// whole space (6,605,959 states, complete at depth 121, 82 s in a
/// release build on the 2-core machine, 2026-12-03).
fn with_handovers(depth: Option<usize>) {
    let mut bounds = Bounds::with_handover(2);
    if let Some(depth) = depth {
        bounds.depth = depth;
    }
    exhaustive_at(&bounds, depth.is_none());
}

/// Every path of up to 28 steps with planned handovers (CI).
#[test]
fn two_nodes_hold_every_property_with_planned_handovers_up_to_28_steps() {
    with_handovers(Some(28));
}

/// The whole space with planned handovers (minutes: run on demand with
/// `cargo test -p picolease-core --features sim --release --test check -- --ignored handovers`).
#[test]
#[ignore = "minutes long: run with --release -- --ignored"]
fn two_nodes_hold_every_property_with_planned_handovers() {
    with_handovers(None);
}

/// Health probes (DESIGN §5 "Work that fails"; `Bounds::with_health`):
/// every node's probe passes at its start, so followers announce
/// themselves, and a fault step makes one fail for good. No two leaders,
/// no epoch given twice, gating, fencing, liveness (within ttl + 4
/// intervals + 2 deliveries: with every node unhealthy a lapsed lease
/// waits two intervals more), and an unhealthy leader that read a live
/// candidate on another node has yielded by the end of that input. The
/// planted `Mutation::IgnoresOwnHealth` is found after 21 steps
/// (`check_mutants.rs`).
fn with_health(depth: usize) {
    let mut bounds = Bounds::with_health(2);
    bounds.depth = depth;
    exhaustive_at(&bounds, false);
}

/// Every path of up to 22 steps with health probes (166,224 states,
/// 1.1 s in a release build; CI).
#[test]
fn two_probed_nodes_hold_every_property_up_to_22_steps() {
    with_health(22);
}

/// Every path of up to 32 steps with health probes (1,225,850 states,
/// 9.9 s and 1.1 GB resident in a release build, 2026-12-05; run on demand with
/// `cargo test -p picolease-core --features sim --release --test check
/// -- --ignored probed`).
#[test]
#[ignore = "a minute long: run with --release -- --ignored"]
fn two_probed_nodes_hold_every_property_up_to_32_steps() {
    with_health(32);
}

/// Ranked nodes (DESIGN §3 "Preferred holders"; `Bounds::with_ranks`):
/// node `n` has priority `n + 1`, followers announce themselves and a
/// leader yields to a better live candidate, among every other fault. No
/// two leaders, no epoch given twice, gating, fencing, liveness, and
/// every yield goes to a node that outranks its holder (so yields never
/// loop). Nodes are not renamed and the announcements' timers multiply
/// the states (×1.4 per step: 4,732,808 states at depth 24, 55 s on the
/// 2-core machine, 2026-12-04), so the space is explored to a depth, not
/// exhausted; the planted yield to a lower rank is found at depth 17
/// (`check_mutants.rs`).
fn with_ranks(depth: usize) {
    let mut bounds = Bounds::with_ranks(2);
    bounds.depth = depth;
    exhaustive_at(&bounds, false);
}

/// Every path of up to 22 steps over ranked nodes (CI).
#[test]
fn two_ranked_nodes_hold_every_property_up_to_22_steps() {
    with_ranks(22);
}

/// Every path of up to 27 steps over ranked nodes (11,922,006 states,
/// 125 s in a release build on the 2-core machine, 2026-12-04; run on demand
/// with `cargo test -p picolease-core --features sim --release --test
/// check -- --ignored ranked`).
#[test]
#[ignore = "minutes long: run with --release -- --ignored"]
fn two_ranked_nodes_hold_every_property_up_to_27_steps() {
    with_ranks(27);
}

/// The same for 3 nodes up to 60 steps (minutes: run on demand, see the
/// module doc).
#[test]
#[ignore = "minutes long: run with --release -- --ignored"]
fn three_nodes_hold_every_property_at_the_default_bounds() {
    exhaustive(3, false);
}

#[test]
fn bad_bounds_are_named() {
    let two = Bounds::default_for(2);
    let with = |f: fn(&mut Bounds)| {
        let mut b = two.clone();
        f(&mut b);
        b.validate()
    };
    assert_eq!(two.validate(), Ok(()));
    assert_eq!(Bounds::default_for(3).validate(), Ok(()));
    assert_eq!(
        Bounds::default_for(4).validate(),
        Err(BoundsError::Nodes(4))
    );
    assert_eq!(with(|b| b.nodes = 1), Err(BoundsError::Nodes(1)));
    assert_eq!(with(|b| b.depth = 0), Err(BoundsError::Depth(0)));
    assert_eq!(
        with(|b| b.depth = 1_000_000),
        Err(BoundsError::Depth(1_000_000))
    );
    assert_eq!(with(|b| b.faults = 9), Err(BoundsError::Faults(9)));
    assert_eq!(with(|b| b.ttl_ticks = 9), Err(BoundsError::Ttl(9)));
    assert_eq!(
        with(|b| b.interval_ticks = 5),
        Err(BoundsError::Interval {
            interval: 5,
            ttl: 10
        })
    );
    assert_eq!(
        with(|b| b.drift_ticks = 0),
        Err(BoundsError::Drift { drift: 0, ttl: 10 })
    );
    assert_eq!(
        with(|b| b.delivery_ticks = 4),
        Err(BoundsError::Delivery {
            delivery: 4,
            interval: 4
        })
    );
    assert_eq!(
        with(|b| b.liveness_ticks = Some(0)),
        Err(BoundsError::Liveness(0))
    );
    assert_eq!(
        with(|b| {
            b.ranked = true;
            b.handover = true;
        }),
        Err(BoundsError::Ranked)
    );
    // A set's nodes may be ranked (their membership rows carry it).
    let mut ranked_set = Bounds::for_set(2, 1);
    ranked_set.ranked = true;
    assert_eq!(ranked_set.validate(), Ok(()));
    let err = with(|b| b.nodes = 7).unwrap_err().to_string();
    assert!(err.contains("nodes 7"), "{err}");
    let mut bad = two.clone();
    bad.depth = 0;
    assert_eq!(
        check(&bad, Budget::default(), |_| {}),
        Err(CheckError::Bounds(BoundsError::Depth(0)))
    );
    assert_eq!(
        replay("n0:timer", &bad),
        Err(TraceParseError::Bounds(BoundsError::Depth(0)))
    );
}

#[test]
fn bad_trace_text_names_the_step() {
    let bounds = Bounds::default_for(2);
    assert_eq!(replay(" ; ", &bounds), Err(TraceParseError::Empty));
    match replay("n0:timer;n0:dance", &bounds) {
        Err(TraceParseError::Step {
            index: 2,
            text,
            problem: TraceProblem::Unknown(_),
        }) => assert_eq!(text, "n0:dance"),
        other => panic!("{other:?}"),
    }
    match replay("n0:timer;tick:n2", &bounds) {
        Err(TraceParseError::Step {
            index: 2,
            problem: TraceProblem::NoSuchNode { nodes: 2 },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // Nothing was sent yet, so nothing can be received.
    match replay("n0:recv", &bounds) {
        Err(TraceParseError::Step {
            index: 1,
            problem: TraceProblem::NotEnabled { .. },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let err = replay("tick:db;x", &bounds).unwrap_err().to_string();
    assert!(err.starts_with("step 2 \"x\""), "{err}");
    for text in [
        "",
        "n",
        "nx:timer",
        "n0:",
        "db:n999",
        "tick:n0:x",
        "lose:db",
    ] {
        assert!(text.parse::<Step>().is_err(), "{text:?} parsed");
    }
}

#[test]
fn every_step_reads_back_from_its_text() {
    let steps = [
        Step::TickDb,
        Step::Tick(1),
        Step::Timer(2),
        Step::AtDb(0),
        Step::Recv(1),
        Step::StrayAtDb,
        Step::Resume(0),
        Step::LoseToDb(1),
        Step::LoseToNode(2),
        Step::LateToDb(0),
        Step::LateToNode(1),
        Step::Stray(2),
        Step::Pause(0),
        Step::Crash(1),
        Step::Restart(2),
        Step::Shutdown(0),
    ];
    for step in steps {
        assert_eq!(step.to_string().parse::<Step>(), Ok(step), "{step}");
    }
}

/// A first election, replayed: the acquire is sent, run and answered, and
/// the node leads with no violation.
#[test]
fn a_fault_free_trace_replays_to_a_leader() {
    let bounds = Bounds::default_for(2);
    let r = replay("n0:timer;db:n0;n0:recv", &bounds).expect("a valid trace");
    assert_eq!(r.violation, None);
    assert_eq!(r.steps.len(), 3);
    assert!(r.steps[2].state.contains("n0 leader@1"), "{r}");
    assert!(r.steps[1].effects[0].contains("Acquired"), "{r}");
}

/// A memory budget stops the search cleanly, reporting the depth whose
/// every path it checked (issue 48). The reading is the test's own: each
/// call says 1 MiB more than the last (the search reads it every
/// `MEMORY_CHECK_EVERY` states and once per finished level, for the
/// progress line), so a 6 MiB limit is reached within six readings.
#[test]
fn a_memory_budget_stops_the_search_with_the_depth_it_completed() {
    use picolease_core::check::{MemoryBudget, Stopped, MEMORY_CHECK_EVERY};
    use std::sync::atomic::{AtomicU64, Ordering};
    static READINGS: AtomicU64 = AtomicU64::new(0);
    fn growing() -> Option<u64> {
        Some((READINGS.fetch_add(1, Ordering::Relaxed) + 1) << 20)
    }
    let bounds = Bounds::default_for(2);
    let budget = Budget {
        memory: Some(MemoryBudget {
            limit_bytes: 6 << 20,
            used_bytes: growing,
        }),
        ..Budget::default()
    };
    let mut levels = Vec::new();
    let report = check(&bounds, budget, |p| levels.push((p.depth, p.used_bytes))).unwrap();
    println!("{report}");
    assert!(!report.complete, "{report}");
    assert!(
        matches!(report.stopped, Some(Stopped::Memory(used)) if used >= 6 << 20),
        "{report}"
    );
    // Every level reported finished was expanded whole; the next was cut.
    let finished = levels.last().map_or(0, |(depth, _)| *depth);
    assert_eq!(report.completed_depth, finished, "{report}");
    assert!(report.completed_depth < bounds.depth);
    assert!(levels.iter().all(|(_, used)| used.is_some()));
    // At most six readings: the search stopped within six times
    // MEMORY_CHECK_EVERY expanded states, far short of the whole space.
    assert!(
        report.transitions < 6 * MEMORY_CHECK_EVERY as u64 * 20,
        "{report}"
    );
    assert!(report.to_string().contains("memory budget"), "{report}");
}
