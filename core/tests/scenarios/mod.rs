//! Scenario generators for the simulator's property tests.

use std::time::Duration;

use picolease_core::sim::{Fault, FaultKind, SimConfig, Target};
use picolease_core::Rank;
use proptest::prelude::*;

/// Property-test cases per property: 10,000 unless `PROPTEST_CASES` says
/// otherwise.
pub fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// A ttl from the range the tests explore (short ttls keep runs cheap; the
/// protocol is scale-free apart from the 1 ms database clock resolution).
pub fn ttl() -> impl Strategy<Value = Duration> {
    prop_oneof![Just(200u64), Just(1000), Just(10_000)].prop_map(Duration::from_millis)
}

fn fault(duration: Duration, nodes: usize, ttl: Duration) -> impl Strategy<Value = Fault> {
    let at = (0..duration.as_millis() as u64).prop_map(Duration::from_millis);
    let target = prop_oneof![Just(Target::Leader), (0..nodes).prop_map(Target::Node)];
    let span = (1..(3 * ttl.as_millis() as u64)).prop_map(Duration::from_millis);
    let kind = prop_oneof![
        Just(FaultKind::Crash),
        Just(FaultKind::Restart),
        Just(FaultKind::Shutdown),
        span.clone().prop_map(FaultKind::Pause),
        span.clone().prop_map(FaultKind::Partition),
        Just(FaultKind::Escalate),
        span.prop_map(FaultKind::Unhealthy),
    ];
    (at, target, kind).prop_map(|(at, target, kind)| Fault { at, target, kind })
}

/// Any cluster under any fault schedule: 2–5 nodes, delays up to a tenth of
/// the ttl with a long tail past the request timeout, up to 10% message
/// loss, up to 10 faults of every kind, notifications on or off.
pub fn faulty_cluster() -> impl Strategy<Value = SimConfig> {
    (2usize..=5, any::<u64>(), ttl(), any::<bool>())
        .prop_flat_map(|(nodes, seed, ttl, notify)| {
            let duration = ttl * 20;
            let max_delay = (ttl.as_micros() as u64 / 10).max(1);
            (
                Just((nodes, seed, ttl, notify, duration)),
                0..max_delay,
                0u32..100_000,
                0u32..100_000,
                proptest::collection::vec(fault(duration, nodes, ttl), 0..10),
            )
        })
        .prop_map(
            |((nodes, seed, ttl, notify, duration), max_us, tail, loss, mut faults)| {
                faults.sort_by_key(|f| f.at);
                SimConfig {
                    nodes,
                    seed,
                    ttl,
                    delay_min: Duration::ZERO,
                    delay_max: Duration::from_micros(max_us),
                    tail_per_million: tail,
                    loss_per_million: loss,
                    notify,
                    duration,
                    faults,
                    stop_lead: Duration::ZERO,
                    node_name: None,
                    ranks: ranks(seed, nodes),
                    // A third of the clusters probe their health (healthy
                    // nodes then announce themselves, DESIGN §5).
                    probes: seed % 3 == 0,
                    cool_down: ttl * 3,
                }
            },
        )
}

/// A fault-free network (no loss, no long tail, delays up to 1/50 of the
/// ttl) with at most `fault` applied to the leader at a random time after
/// the first election has settled.
pub fn calm_cluster(fault: Option<FaultKind>) -> impl Strategy<Value = SimConfig> {
    (
        2usize..=5,
        any::<u64>(),
        ttl(),
        any::<bool>(),
        2u64..6,
        0u64..1000,
    )
        .prop_map(move |(nodes, seed, ttl, notify, at_ttls, frac)| {
            let max_delay = ttl / 50;
            let at = ttl * at_ttls as u32 + ttl * frac as u32 / 1000;
            SimConfig {
                nodes,
                seed,
                ttl,
                delay_min: Duration::ZERO,
                delay_max: max_delay,
                tail_per_million: 0,
                loss_per_million: 0,
                notify,
                duration: at + ttl * 4,
                ranks: Vec::new(),
                faults: fault
                    .map(|kind| Fault {
                        at,
                        target: Target::Leader,
                        kind,
                    })
                    .into_iter()
                    .collect(),
                stop_lead: Duration::ZERO,
                node_name: None,
                probes: false,
                cool_down: Duration::from_secs(60),
            }
        })
}

/// A valid stop lead for `config`: zero, or a random value below the bound
/// of `Config::stop_lead_bound` (`per_mille` of it, from 0 to 999).
pub fn stop_lead_for(config: &SimConfig, per_mille: u32) -> Duration {
    let probe = config.lease_config(picolease_core::HolderId::new("probe").unwrap(), 0);
    probe.stop_lead_bound() * per_mille / 1000
}

/// [`faulty_cluster`] whose nodes stop their work early by a random valid
/// stop lead `g`.
pub fn faulty_cluster_with_stop_lead() -> impl Strategy<Value = SimConfig> {
    (faulty_cluster(), 0u32..1000).prop_map(|(mut config, per_mille)| {
        config.stop_lead = stop_lead_for(&config, per_mille);
        config
    })
}

/// Candidates' ranks for a faulty cluster, from its seed: in half the runs
/// nobody announces; in the others each node has priority 0 to 3, so that
/// leaders yield to better candidates (DESIGN §3 "Preferred holders")
/// among every other fault.
pub fn ranks(seed: u64, nodes: usize) -> Vec<Rank> {
    if seed & 1 == 0 {
        return Vec::new();
    }
    (0..nodes)
        .map(|n| Rank::new(((seed >> (1 + 2 * n)) & 3) as u32, None).expect("no tag"))
        .collect()
}
