//! Candidates and preference (DESIGN §3 "Preferred holders") over the
//! deterministic simulator: a better candidate that joins late takes the
//! lease within two intervals by the holder's own handover, equal
//! candidates never swap, and yielding never gives two leaders. 1,000
//! schedules per property (`PROPTEST_CASES=N` scales them as in
//! `properties.rs`).

use std::time::Duration;

use picolease_core::sim::{Fault, Happening, SimConfig, Simulation, Trace};
use picolease_core::Rank;
use proptest::prelude::*;

/// Property-test cases: 10,000 unless `PROPTEST_CASES` says otherwise (as
/// in `properties.rs`), a tenth of them per property here.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn run(config: &SimConfig) -> Trace {
    Simulation::new(config.clone())
        .expect("valid simulation")
        .run()
}

/// `nodes` contenders; the last joins at `joins_at` (it starts, shuts
/// down at once and starts again then) with rank `late`, the others all
/// with rank `equal`.
fn late_joiner(
    seed: u64,
    nodes: usize,
    equal: &Rank,
    late: &Rank,
    joins_at: Duration,
) -> SimConfig {
    let mut config = SimConfig::new(nodes, seed);
    config.notify = seed % 2 == 0;
    config.delay_max = Duration::from_millis(20);
    config.ranks = vec![equal.clone(); nodes - 1];
    config.ranks.push(late.clone());
    let last = nodes - 1;
    config.faults = Fault::parse_list(&format!(
        "shutdown:{last}@0ms,restart:{last}@{}ms",
        joins_at.as_millis()
    ))
    .expect("valid faults");
    config.duration = joins_at + Duration::from_secs(40);
    config
}

/// When node `node` started for the last time.
fn last_start(trace: &Trace, node: usize) -> u64 {
    trace
        .entries
        .iter()
        .rev()
        .find(|e| e.node == node && matches!(e.what, Happening::Started { .. }))
        .map(|e| e.at)
        .expect("the node started")
}

fn rank_strategy() -> impl Strategy<Value = Rank> {
    (
        0u32..3,
        prop::option::of(prop::sample::select(vec![
            "1.27.3",
            "v1.28.0",
            "1.28.0-rc.1",
            "2.0",
            "blue",
        ])),
    )
        .prop_map(|(priority, tag)| Rank::new(priority, tag).expect("a valid rank"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases() / 10))]

    /// A higher-priority node that joins takes over within two intervals
    /// (plus the messages' delays) by the holder's handover, and keeps
    /// the lease: never two leaders, one move in all.
    #[test]
    fn a_better_late_joiner_takes_over_within_two_intervals_and_keeps_it(
        seed in any::<u64>(),
        nodes in 2usize..=4,
        joins_ms in 3_000u64..40_000,
        newer in any::<bool>(),
    ) {
        // Better by priority, or at equal priority by a newer version.
        let (equal, late) = if newer {
            (Rank::new(1, Some("1.27.3")).unwrap(), Rank::new(1, Some("1.28.0")).unwrap())
        } else {
            (Rank::new(1, None).unwrap(), Rank::new(2, None).unwrap())
        };
        let config = late_joiner(seed, nodes, &equal, &late, Duration::from_millis(joins_ms));
        let trace = run(&config);
        let timeline = trace.timeline(true);
        prop_assert!(trace.check_safety().is_ok(), "{:?}\n{timeline}", trace.check_safety());
        let last = nodes - 1;
        let joined = last_start(&trace, last);
        let interval = config.ttl / 4;
        let bound = interval * 2 + config.delay_max * 8 + config.ttl / 100;
        let took = trace.next_leader_after(joined);
        prop_assert!(
            took.is_some_and(|(node, _, at)| node == last && Duration::from_nanos(at - joined) <= bound),
            "joined at {joined}: {took:?} (bound {bound:?})\n{timeline}"
        );
        // Before the join no term ended but the late node's own shutdown;
        // after it, exactly one: the yield to it.
        let ended: Vec<_> = trace.handovers().into_iter().filter(|h| h.from_node != last).collect();
        prop_assert_eq!(ended.len(), 1, "{}", timeline);
        prop_assert_eq!(ended[0].cause, "handover", "{}", timeline);
        prop_assert!(ended[0].ended_at >= joined, "{}", timeline);
        prop_assert!(
            !trace.entries.iter().any(|e| e.node == last && e.at > joined
                && matches!(e.what, Happening::Follower { .. })),
            "the late node lost the lease again\n{timeline}"
        );
    }

    /// Any ranks at all: yielding never gives two leaders and never loops.
    /// Each move goes to a strictly higher rank, so the lease moves at most
    /// once per distinct rank above the first leader's, here at most once
    /// per node; with equal ranks, not at all.
    #[test]
    fn yields_never_give_two_leaders_and_never_swap_equal_ranks(
        seed in any::<u64>(),
        ranks in prop::collection::vec(rank_strategy(), 2..=4),
        joins_ms in 3_000u64..40_000,
    ) {
        let nodes = ranks.len();
        let mut config = late_joiner(seed, nodes, &ranks[0], &ranks[nodes - 1], Duration::from_millis(joins_ms));
        config.ranks = ranks.clone();
        let trace = run(&config);
        let timeline = trace.timeline(true);
        prop_assert!(trace.check_safety().is_ok(), "{:?}\n{timeline}", trace.check_safety());
        let moves: Vec<_> = trace.handovers().into_iter().filter(|h| h.cause == "handover").collect();
        prop_assert!(moves.len() < nodes, "{} moves\n{timeline}", moves.len());
        for m in &moves {
            let to = m.next.map(|(node, _, _)| node);
            prop_assert!(
                to.is_some_and(|to| picolease_core::rank::yields_to(&ranks[m.from_node], &ranks[to])),
                "moved from {} ({:?}) to {to:?} at {}\n{timeline}", m.from_node, ranks[m.from_node], m.ended_at
            );
        }
        if ranks.iter().all(|r| *r == ranks[0]) {
            prop_assert!(moves.is_empty(), "{timeline}");
        }
    }
}
