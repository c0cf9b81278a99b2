//! The invariants of DESIGN §6, as property tests over the deterministic
//! simulator. Each test states its invariant in its name and first comment.
//! 10,000 cases per property (110,000 random schedules in all, about 20 s
//! on two cores); `PROPTEST_CASES=N` sets another number.
//!
//! They live in the core package (not in `picolease-tests`) so that
//! mutation testing of the core (`cargo mutants -p picolease-core`) runs
//! them without building the drivers.

mod scenarios;

use std::time::Duration;

use picolease_core::sim::{FaultKind, Happening, SimConfig, Simulation, Trace};
use picolease_core::Demotion;
use proptest::prelude::*;
use scenarios::{calm_cluster, cases, faulty_cluster};

fn run(config: &SimConfig) -> Trace {
    Simulation::new(config.clone())
        .expect("valid simulation")
        .run()
}

fn report(trace: &Trace) -> String {
    trace.timeline(true)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// 1. Mutual exclusion: with clock rates within ρ and a database clock
    /// that never steps, no two nodes' leadership intervals overlap in real
    /// time, whatever the delays, losses, crashes, pauses and partitions.
    #[test]
    fn no_two_nodes_lead_at_once(config in faulty_cluster()) {
        let trace = run(&config);
        if let Err(v) = trace.check_mutual_exclusion() {
            prop_assert!(false, "{v}\n{}", report(&trace));
        }
    }

    /// 2. Fencing: every leadership has its own epoch, and the epochs of
    /// successive leaderships strictly increase.
    #[test]
    fn epochs_of_successive_leaderships_strictly_increase(config in faulty_cluster()) {
        let trace = run(&config);
        if let Err(v) = trace.check_fencing() {
            prop_assert!(false, "{v}\n{}", report(&trace));
        }
    }

    /// 3. Validity: while a node believes it leads at epoch e, the database
    /// row holds (that node, e), unexpired.
    #[test]
    fn a_leader_is_always_backed_by_its_row(config in faulty_cluster()) {
        let trace = run(&config);
        if let Err(v) = trace.check_validity() {
            prop_assert!(false, "{v}\n{}", report(&trace));
        }
    }

    /// 4. Gating: per node, gated work starts and stops alternately, starts
    /// only when the node becomes leader, and every exit from leadership
    /// (shutdown and crash included) stops it.
    #[test]
    fn gated_work_runs_only_while_leader(config in faulty_cluster()) {
        let trace = run(&config);
        if let Err(v) = trace.check_gating() {
            prop_assert!(false, "{v}\n{}", report(&trace));
        }
    }

    /// Progress: woken at its own `poll_timeout`, a machine always does
    /// something or asks for a later instant, so a driver's loop never
    /// spins.
    #[test]
    fn the_machine_never_spins_on_its_own_timeout(config in faulty_cluster()) {
        let trace = run(&config);
        if let Err(v) = trace.check_progress() {
            prop_assert!(false, "{v}\n{}", report(&trace));
        }
    }

    /// 6. Determinism: the same seed and inputs give the same trace, entry
    /// for entry.
    #[test]
    fn same_seed_same_trace(config in faulty_cluster()) {
        prop_assert_eq!(run(&config), run(&config));
    }
}

/// The worst one-way delay of a calm network.
fn max_delay(config: &SimConfig) -> Duration {
    config.delay_max
}

fn drift(config: &SimConfig) -> Duration {
    config.ttl / 100
}

fn fault_at(config: &SimConfig) -> u64 {
    config.faults[0].at.as_nanos() as u64
}

/// The fault fired on a leader (rather than being skipped because the
/// randomly chosen instant fell in a gap).
fn fault_hit(trace: &Trace) -> bool {
    !trace
        .entries
        .iter()
        .any(|e| matches!(e.what, Happening::FaultSkipped { .. }))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// 5a. Liveness, first election: on a calm network a leader exists
    /// within one round trip of the start.
    #[test]
    fn first_leader_within_one_round_trip(config in calm_cluster(None)) {
        let trace = run(&config);
        let first = trace.first_leader_at().expect("someone leads");
        let bound = 2 * max_delay(&config) + Duration::from_micros(1);
        prop_assert!(Duration::from_nanos(first) <= bound, "first leader at {first}ns > {bound:?}");
        prop_assert!(trace.check_safety().is_ok());
    }

    /// 5b. Liveness, crash: a crashed holder is replaced within
    /// ttl + a few round trips (the design's target is ttl + RTT after the
    /// lease's last renewal, which precedes the crash), not ttl + interval.
    #[test]
    fn crashed_leader_replaced_within_ttl_plus_round_trips(config in calm_cluster(Some(FaultKind::Crash))) {
        let trace = run(&config);
        prop_assume!(fault_hit(&trace));
        let crash = fault_at(&config);
        let (_, _, at) = trace.next_leader_after(crash).expect("a successor");
        let gap = Duration::from_nanos(at - crash);
        let bound = config.ttl + 6 * max_delay(&config) + 2 * drift(&config) + Duration::from_millis(2);
        prop_assert!(gap <= bound, "takeover after {gap:?} > {bound:?}\n{}", report(&trace));
        prop_assert!(trace.check_safety().is_ok());
    }

    /// 5c. Liveness, clean shutdown: a released lease is taken within one
    /// interval plus a round trip by polling, and within a few one-way
    /// delays when releases notify.
    #[test]
    fn released_lease_taken_within_an_interval(config in calm_cluster(Some(FaultKind::Shutdown))) {
        let trace = run(&config);
        prop_assume!(fault_hit(&trace));
        let released = trace.entries.iter().find_map(|e| match e.what {
            Happening::Executed { operation: picolease_core::Operation::Release { .. }, .. } => Some(e.at),
            _ => None,
        }).expect("the leader released");
        let (_, _, at) = trace.next_leader_after(released).expect("a successor");
        let gap = Duration::from_nanos(at - released);
        let bound = if config.notify {
            4 * max_delay(&config) + Duration::from_micros(1)
        } else {
            config.ttl / 4 + 2 * max_delay(&config) + drift(&config)
        };
        prop_assert!(gap <= bound, "handover after {gap:?} > {bound:?} (notify {})\n{}", config.notify, report(&trace));
    }

    /// 5d. Liveness, lost database: a leader cut off from the database
    /// demotes itself (reason `expired`) no later than ttl·(1 − ρ) after the
    /// partition began (its last successful send was earlier still).
    #[test]
    fn partitioned_leader_demotes_itself_within_ttl(config in calm_cluster(Some(FaultKind::Partition(Duration::from_secs(3600))))) {
        let trace = run(&config);
        prop_assume!(fault_hit(&trace));
        let cut = fault_at(&config);
        let node = trace.entries.iter().find(|e| matches!(e.what, Happening::Partitioned { .. })).expect("partitioned").node;
        let demoted = trace.entries.iter().find(|e| e.node == node && e.at >= cut && matches!(e.what, Happening::Follower { .. })).expect("the leader demoted");
        prop_assert!(matches!(demoted.what, Happening::Follower { reason: Demotion::Expired, .. }), "{:?}", demoted.what);
        let after = Duration::from_nanos(demoted.at - cut);
        prop_assert!(after <= config.ttl - drift(&config), "demoted {after:?} after the cut");
        prop_assert!(trace.check_safety().is_ok());
    }

    /// 5e. A leader frozen past its ttl (SIGSTOP) is replaced, and when it
    /// thaws it reports `expired` at once, before acting on its old epoch.
    #[test]
    fn paused_leader_demotes_on_resume(config in calm_cluster(Some(FaultKind::Pause(Duration::from_secs(30))))) {
        let mut config = config;
        config.faults[0].kind = FaultKind::Pause(config.ttl * 2);
        let trace = run(&config);
        prop_assume!(fault_hit(&trace));
        let node = trace.entries.iter().find(|e| matches!(e.what, Happening::Paused)).expect("paused").node;
        let resumed = trace.entries.iter().position(|e| e.node == node && matches!(e.what, Happening::Resumed)).expect("resumed");
        let after: Vec<_> = trace.entries[resumed + 1..].iter().filter(|e| e.node == node).take(3).collect();
        let first_role_change = after.iter().find(|e| matches!(e.what, Happening::Follower { .. } | Happening::Sent { .. })).expect("it acts after resuming");
        prop_assert!(matches!(first_role_change.what, Happening::Follower { reason: Demotion::Expired, .. }), "{:?}", first_role_change.what);
        prop_assert_eq!(first_role_change.at, trace.entries[resumed].at);
        prop_assert!(trace.check_safety().is_ok());
    }
}
