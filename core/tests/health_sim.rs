//! Health and failing work (DESIGN §5 "Work that fails") over the
//! deterministic simulator: a leader whose probe fails hands the lease to
//! a healthy node within two intervals, with no gap beyond a planned
//! handover's; a leader whose work escalates moves the lease once; when
//! every node is unhealthy one still leads and the lease does not move;
//! never two leaders. 1,000 schedules per property (`PROPTEST_CASES=N`
//! scales them as in `properties.rs`), and the planted
//! `Mutation::IgnoresOwnHealth` is caught by the first property.

use std::time::Duration;

use picolease_core::sim::{Fault, Happening, SimConfig, Simulation, Trace};
use picolease_core::Mutation;
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn run(config: &SimConfig, mutation: Mutation) -> Trace {
    let mut simulation = Simulation::new(config.clone()).expect("valid simulation");
    simulation.set_node_mutation(mutation);
    simulation.run()
}

/// `nodes` contenders with probes, every one healthy, and `faults`.
fn cluster(seed: u64, nodes: usize, faults: &str, duration: Duration) -> SimConfig {
    let mut config = SimConfig::new(nodes, seed);
    config.notify = seed % 2 == 0;
    config.delay_max = Duration::from_millis(20);
    config.probes = true;
    config.faults = Fault::parse_list(faults).expect("valid faults");
    config.duration = duration;
    config
}

/// The node that leads at `at` (real nanoseconds), if any.
fn leader_at(trace: &Trace, at: u64) -> Option<usize> {
    trace
        .leadership_intervals()
        .into_iter()
        .find(|i| i.start <= at && at < i.end)
        .map(|i| i.node)
}

/// When the fault of `kind` hit (its first trace entry), and which node.
fn hit(trace: &Trace, what: impl Fn(&Happening) -> bool) -> Option<(usize, u64)> {
    trace
        .entries
        .iter()
        .find(|e| what(&e.what))
        .map(|e| (e.node, e.at))
}

/// The bound of a yield: the leader's next renewal reads a live
/// announcement (within an interval), and the candidate's next poll takes
/// the reservation (within another), plus the messages' delays.
fn yield_bound(config: &SimConfig) -> Duration {
    let interval = config.ttl / 4;
    interval * 2 + config.delay_max * 8 + config.ttl / 100
}

/// Checks the first property on `trace`; the reason it fails, if it does.
fn an_unhealthy_leader_yields(config: &SimConfig, trace: &Trace) -> Result<(), String> {
    let timeline = trace.timeline(true);
    trace
        .check_safety()
        .map_err(|v| format!("{v:?}\n{timeline}"))?;
    let Some((sick, at)) = hit(trace, |w| matches!(w, Happening::Health { healthy: false })) else {
        return Ok(()); // Nobody led when the fault fired.
    };
    let bound = yield_bound(config);
    let next = trace.next_leader_after(at);
    match next {
        Some((node, _, when)) if node != sick && Duration::from_nanos(when - at) <= bound => {}
        other => {
            return Err(format!(
                "unhealthy at {at}: next leader {other:?}, bound {bound:?}\n{timeline}"
            ))
        }
    }
    // The healthy node keeps it: one move in all, and the gap is the
    // planned handover's.
    let moves: Vec<_> = trace
        .handovers()
        .into_iter()
        .filter(|h| h.ended_at >= at)
        .collect();
    if moves.len() != 1 || moves[0].cause != "unhealthy" {
        return Err(format!("moves after {at}: {moves:?}\n{timeline}"));
    }
    let gap = moves[0].next.map(|(_, _, gap)| gap);
    if gap.is_none_or(|gap| gap > config.ttl / 4 + config.delay_max * 4) {
        return Err(format!("gap {gap:?}\n{timeline}"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases() / 10))]

    /// A leader whose probe fails hands over to a healthy live node
    /// within two intervals, once, with a planned handover's gap.
    #[test]
    fn an_unhealthy_leader_hands_over_to_a_healthy_node_within_two_intervals(
        seed in any::<u64>(),
        nodes in 2usize..=4,
        sick_ms in 5_000u64..40_000,
    ) {
        let config = cluster(seed, nodes, &format!("unhealthy@{sick_ms}ms+300s"), Duration::from_millis(sick_ms + 40_000));
        let trace = run(&config, Mutation::None);
        prop_assert!(an_unhealthy_leader_yields(&config, &trace).is_ok(), "{}", an_unhealthy_leader_yields(&config, &trace).unwrap_err());
    }

    /// Every node unhealthy: the leader keeps the lease (a degraded leader
    /// is better than none) and it does not move, but for one yield to a
    /// node whose announcement was still live when the probes failed (the
    /// announcement outlives its maker's health by up to two intervals,
    /// DESIGN §5); when it crashes, an
    /// unhealthy node still takes over, a reservation later than a
    /// healthy one would.
    #[test]
    fn with_every_node_unhealthy_one_leads_and_nobody_flaps(
        seed in any::<u64>(),
        nodes in 2usize..=4,
        sick_ms in 5_000u64..20_000,
        crash_after_ms in 5_000u64..20_000,
    ) {
        let all: Vec<String> = (0..nodes).map(|n| format!("unhealthy:{n}@{sick_ms}ms+600s")).collect();
        let crash_at = sick_ms + crash_after_ms;
        let faults = format!("{},crash@{crash_at}ms", all.join(","));
        let config = cluster(seed, nodes, &faults, Duration::from_millis(crash_at + 40_000));
        let trace = run(&config, Mutation::None);
        let timeline = trace.timeline(true);
        prop_assert!(trace.check_safety().is_ok(), "{:?}\n{timeline}", trace.check_safety());
        let sick = sick_ms * 1_000_000;
        let crashed = crash_at * 1_000_000;
        // Between the probes failing and the crash: at most one move,
        // while an announcement made before the probes failed is still
        // live (two intervals, plus the last renewal's interval), and
        // none after it.
        let interval = config.ttl / 4;
        let stale = sick + u64::try_from((interval * 3 + config.delay_max * 4).as_nanos()).unwrap();
        let moves: Vec<_> = trace.handovers().into_iter()
            .filter(|h| h.ended_at >= sick && h.ended_at < crashed).collect();
        prop_assert!(moves.len() <= 1, "{moves:?}\n{timeline}");
        prop_assert!(moves.iter().all(|m| m.ended_at < stale), "{moves:?}\n{timeline}");
        // After the crash someone leads, within ttl + the degraded wait
        // (two intervals) + an interval + delays.
        let bound = config.ttl + interval * 3 + config.delay_max * 8;
        let next = trace.next_leader_after(crashed);
        prop_assert!(
            next.is_some_and(|(_, _, at)| Duration::from_nanos(at - crashed) <= bound),
            "crashed at {crashed}: {next:?} (bound {bound:?})\n{timeline}"
        );
        // And once led, it stays: no flapping among the unhealthy.
        let after: Vec<_> = trace.handovers().into_iter().filter(|h| h.ended_at > crashed).collect();
        prop_assert!(after.len() <= 1, "{after:?}\n{timeline}");
    }

    /// A leader whose work escalates moves the lease once, to a healthy
    /// node, within an interval plus delays of the escalation (the
    /// handover to the candidate its last renewal read, or the release);
    /// the new leader keeps it.
    #[test]
    fn an_escalation_moves_the_lease_once_to_a_healthy_node(
        seed in any::<u64>(),
        nodes in 2usize..=4,
        at_ms in 5_000u64..40_000,
        probes in any::<bool>(),
    ) {
        let mut config = cluster(seed, nodes, &format!("escalate@{at_ms}ms"), Duration::from_millis(at_ms + 40_000));
        config.probes = probes;
        let trace = run(&config, Mutation::None);
        let timeline = trace.timeline(true);
        prop_assert!(trace.check_safety().is_ok(), "{:?}\n{timeline}", trace.check_safety());
        if let Some((from, at)) = hit(&trace, |w| matches!(w, Happening::Escalated)) {
            let interval = config.ttl / 4;
            let bound = interval + config.delay_max * 8 + config.ttl / 100;
            let next = trace.next_leader_after(at);
            prop_assert!(
                next.is_some_and(|(node, _, when)| node != from && Duration::from_nanos(when - at) <= bound),
                "escalated at {at}: {next:?} (bound {bound:?})\n{timeline}"
            );
            let moves: Vec<_> = trace.handovers().into_iter().filter(|h| h.ended_at >= at).collect();
            prop_assert_eq!(moves.len(), 1, "{}", timeline);
            prop_assert_eq!(moves[0].cause, "escalated", "{}", timeline);
        }
    }
}

/// The planted bug: a leader that ignores its own health keeps the lease
/// while a healthy node waits, and the first property says so.
#[test]
fn a_leader_that_ignores_its_health_is_caught() {
    let mut caught = 0;
    for seed in 0..20 {
        let config = cluster(seed, 3, "unhealthy@10s+300s", Duration::from_secs(50));
        let trace = run(&config, Mutation::IgnoresOwnHealth);
        if leader_at(&trace, 9_000_000_000).is_some() {
            caught += usize::from(an_unhealthy_leader_yields(&config, &trace).is_err());
        }
    }
    assert_eq!(caught, 20, "every schedule with a leader must catch it");
}
