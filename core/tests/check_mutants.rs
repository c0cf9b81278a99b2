//! Each planted bug is found by the model checker within its default
//! bounds, and the shortest trace it reports replays to the same
//! violation (feature `mutants`):
//!
//! `cargo test -p picolease-core --features mutants --test check_mutants`

use picolease_core::check::{
    check, replay, Bounds, Budget, Property, SetupMutation, Violation, RANKED_SET_YIELD,
};
use picolease_core::Mutation;

/// The checker at `bounds` stops at a violation of one of `expected`, and
/// its trace replays to it.
fn finds_at(bounds: &Bounds, expected: &[Property]) {
    let budget = Budget {
        stop_at_first_violation: true,
        ..Budget::default()
    };
    let report = check(bounds, budget, |_| {}).expect("valid bounds");
    println!(
        "{:?}/{:?}: {report}",
        bounds.mutation, bounds.setup_mutation
    );
    let found = report
        .violations
        .first()
        .unwrap_or_else(|| panic!("not found: {report}"));
    assert!(expected.contains(&found.property), "{found}");
    let replayed = replay(&found.trace, bounds).expect("the trace replays");
    assert_eq!(replayed.violation.as_ref(), Some(found), "{replayed}");
}

/// The 2-node default bounds (1 fault), with `mutation` planted.
fn finds(mutation: Mutation, expected: Property) {
    let mut bounds = Bounds::default_for(2);
    bounds.mutation = mutation;
    finds_at(&bounds, &[expected]);
}

/// (a) The deadline from the reply: a leader outlives its row.
#[test]
fn deadline_from_the_reply_is_found() {
    finds(Mutation::DeadlineFromReply, Property::Validity);
}

/// (b) No deadline: a paused leader resumes past its row's expiry and
/// still leads.
#[test]
fn no_deadline_is_found() {
    finds(Mutation::NoDeadline, Property::Validity);
}

/// (c) A stale reply taken for the request in flight.
#[test]
fn a_stale_reply_accepted_is_found() {
    finds(Mutation::StaleReplyAccepted, Property::Validity);
}

/// (d) Renew without the epoch condition (model database), with the
/// default single fault: a path that begins with an orphan row lets the
/// node whose acquire strayed win the race when the row lapses; the stray
/// acquire then bumps its own row, and the renew at the older epoch is
/// still accepted.
#[test]
fn renew_without_the_epoch_condition_is_found() {
    finds(Mutation::RenewIgnoresEpoch, Property::Validity);
}

/// (e) Work not stopped on demotion.
#[test]
fn work_kept_on_demotion_is_found() {
    finds(Mutation::WorkKeptOnDemotion, Property::Gating);
}

/// The stop lead: machines that ignore it (run as with `g = 0`) keep the
/// work running past `deadline − g` once a renew is lost.
#[test]
fn a_stop_lead_ignored_is_found() {
    let mut bounds = Bounds::with_stop_lead(2);
    bounds.setup_mutation = SetupMutation::StopLeadIgnored;
    finds_at(&bounds, &[Property::StopLead]);
}

/// Twins: if the incarnation did not tell two processes of one node name
/// apart, the second would take the first's row as its own (the acquire's
/// `holder = me` clause) while the first still leads: validity breaks at
/// once, mutual exclusion a step later.
#[test]
fn twins_sharing_a_holder_id_are_found() {
    let mut bounds = Bounds::default_for(2);
    bounds.setup_mutation = SetupMutation::TwinsShareHolderId;
    finds_at(&bounds, &[Property::Validity, Property::MutualExclusion]);
}

/// (g) Lease sets (2 nodes × 2 leases, `Bounds::for_set`): a batch acquire
/// that takes rows held by another node. A node that surveyed before the
/// other's membership row existed takes both leases; the other, planning
/// its share of one, reaches for one of them and, through the planted
/// statement, takes it while it is held: no stealing breaks (24 steps).
#[test]
fn a_set_acquire_that_takes_held_rows_is_found() {
    let mut bounds = Bounds::for_set(2, 2);
    bounds.mutation = Mutation::AcquireBatchTakesHeld;
    finds_at(&bounds, &[Property::Stealing, Property::MutualExclusion]);
}

/// (f) Lease sets: giving a lease up for the share without stopping its
/// work. 2 nodes share 1 lease; the one that took it yields it when its
/// share says the other should hold it; its release goes out with the
/// work running, and the lease's follower publication finds it (gating,
/// 32 steps, 3,650,642 states, 64 s on the 2-core machine; with 2
/// leases 4,466,947 states and 117 s).
#[test]
fn a_set_that_yields_a_lease_with_its_work_running_is_found() {
    let mut bounds = Bounds::for_set(2, 1);
    // Deeper than the real machine's test (depth 30).
    bounds.depth = 40;
    bounds.mutation = Mutation::SetYieldKeepsWork;
    finds_at(
        &bounds,
        &[
            Property::Gating,
            Property::StopLead,
            Property::MutualExclusion,
        ],
    );
}

/// (k) Lease sets: a planned handover (`Bounds::handover`, the step
/// nN:handover over a set) that does not stop its lease's work. 2 nodes
/// share 1 lease; the leader hands it to the other node, whose term starts
/// while the old work runs.
#[test]
fn a_set_that_hands_a_lease_over_with_its_work_running_is_found() {
    let mut bounds = Bounds::for_set(2, 1);
    bounds.handover = true;
    bounds.faults = 1;
    bounds.depth = 40;
    bounds.mutation = Mutation::SetHandOverKeepsWork;
    finds_at(
        &bounds,
        &[
            Property::Gating,
            Property::StopLead,
            Property::MutualExclusion,
        ],
    );
}

/// The real machine with a stop lead (and twins) holds every property in
/// the whole 2-node space within one fault (about 2 million states, half a
/// minute).
#[test]
fn the_real_machine_keeps_its_stop_lead_in_the_whole_space() {
    let bounds = Bounds::with_stop_lead(2);
    let report = check(&bounds, Budget::default(), |p| {
        eprintln!(
            "depth {:>3}: {:>9} states, frontier {:>8}, {:.1?}",
            p.depth, p.states, p.frontier, p.elapsed
        )
    })
    .expect("valid bounds");
    println!("{report}");
    assert!(report.violations.is_empty(), "{report}");
    assert!(report.complete && report.frontier_left == 0, "{report}");
}

/// A prompt schedule of 2 nodes, built one step at a time: whatever a
/// machine or the database can do now (timers, statements, replies) goes
/// first, then the node clocks, then the database clock, so time moves as
/// fast as the drift allows and nothing waits. Returns the trace and how
/// its replay ended.
fn prompt_schedule(bounds: &Bounds, steps: usize) -> (String, Option<Violation>) {
    let order = [
        "n0:timer", "n1:timer", "db:n0", "db:n1", "n0:recv", "n1:recv", "tick:n0", "tick:n1",
        "tick:db",
    ];
    let mut trace: Vec<&str> = Vec::new();
    let mut last = None;
    for _ in 0..steps {
        let next = order.iter().find_map(|step| {
            let text = [trace.as_slice(), &[*step]].concat().join(";");
            replay(&text, bounds).ok().map(|r| (*step, r))
        });
        let (step, replayed) = next.expect("some step is always enabled");
        trace.push(step);
        last = replayed.violation;
        if last.is_some() {
            break;
        }
    }
    (trace.join(";"), last)
}

/// (h) Lease sets, liveness: a fair share rounded down for every member
/// gives each of 2 nodes a target of 0 for a set of 1 lease. Nothing is
/// held twice, nothing stolen, no work out of step: no safety property can
/// fail, only liveness. The breadth-first search cannot reach its bound
/// (ttl + 2·interval = 16 database ticks; a set's space grows about 1.4×
/// a level and reaches 6 or 7 ticks by depth 30), so the property is shown
/// on one prompt schedule: the real set leads the lease on it and keeps it
/// past the bound, the mutant never does and liveness fails.
#[test]
fn a_set_whose_share_rounds_down_is_found_by_liveness_only() {
    let mut bounds = Bounds::for_set(2, 1);
    bounds.depth = 200;
    let (trace, found) = prompt_schedule(&bounds, 120);
    assert_eq!(found, None, "the real set: {trace}");
    let held = replay(&trace, &bounds).expect("the trace replays");
    let state = &held.steps.last().expect("steps").state;
    assert!(
        state.contains("holds s0@"),
        "the real set leads s0: {state}"
    );

    bounds.mutation = Mutation::SetShareRoundsDown;
    let (trace, found) = prompt_schedule(&bounds, 120);
    let found = found.unwrap_or_else(|| panic!("not found: {trace}"));
    assert_eq!(found.property, Property::Liveness, "{found}");
    println!("{found}\ntrace: {trace}");
}

/// (i) A model database that ignores the server incarnation: the checker
/// across a failover (`Bounds::with_failover`) finds a second leader or a
/// reused epoch.
#[test]
fn a_database_ignoring_the_incarnation_is_found() {
    let mut bounds = Bounds::with_failover(2);
    bounds.mutation = Mutation::IncarnationIgnored;
    finds_at(&bounds, &[Property::MutualExclusion, Property::Fencing]);
}

/// (l) The constant epoch jump of old (`epoch + 2^32` on adoption): across
/// two lossy failovers in a row (`Bounds::with_failovers(2, 2)`), the
/// second standby lacks the first adopter's row, adopts the same old row
/// and writes the very epoch the first adopter wrote.
#[test]
fn a_constant_epoch_jump_is_found_across_two_failovers() {
    let mut bounds = Bounds::with_failovers(2, 2);
    bounds.depth = 20;
    bounds.mutation = Mutation::ConstantEpochJump;
    finds_at(&bounds, &[Property::Fencing]);
}

/// (n) A fresh row that ignores the table's marker: a lease whose very
/// first row a failover lost (the standby never had it) is inserted at
/// epoch 1, the caller's, on the new server, while the lost term's holder
/// still leads at epoch 1.
#[test]
fn a_lost_first_row_taken_at_once_is_found() {
    let mut bounds = Bounds::with_failover(2);
    bounds.mutation = Mutation::FirstRowUnguarded;
    finds_at(&bounds, &[Property::MutualExclusion, Property::Fencing]);
}

/// (l) The constant jump is caught by the simulator too: two lossy
/// failovers in a row, the second to a replica older than the first; the
/// term after each adoption begins at the same epoch. The real model
/// survives the same runs.
#[test]
fn a_constant_epoch_jump_is_found_by_the_simulator() {
    use picolease_core::sim::{Fault, SimConfig, Simulation};
    use std::time::Duration;
    let run = |mutation: Mutation, seed: u64| {
        let mut config = SimConfig::new(2, seed);
        config.ttl = Duration::from_secs(10);
        config.delay_max = Duration::from_millis(20);
        config.faults = Fault::parse_list(
            "crash:0@5s,failover@17000ms+3000ms,restart:0@17100ms,failover@40000ms+27000ms",
        )
        .expect("valid faults");
        config.duration = Duration::from_secs(80);
        let mut sim = Simulation::new(config).expect("valid simulation");
        sim.set_db_mutation(mutation);
        sim.run()
    };
    for seed in 0..8 {
        let real = run(Mutation::None, seed);
        real.check_safety()
            .unwrap_or_else(|v| panic!("seed {seed}: {v}\n{}", real.timeline(true)));
        let planted = run(Mutation::ConstantEpochJump, seed);
        let found = planted
            .check_safety()
            .err()
            .unwrap_or_else(|| panic!("seed {seed}: not found:\n{}", planted.timeline(false)));
        assert_eq!(found.invariant, "fencing", "seed {seed}: {found}");
        if seed == 0 {
            println!("ConstantEpochJump: {found}");
        }
    }
}

/// (i) The same planted bug is caught by the simulator: after a failover that lost a takeover, a restarted node
/// is given the lost term's epoch while its holder still leads. The real
/// model survives the same run.
#[test]
fn a_database_ignoring_the_incarnation_is_found_by_the_simulator() {
    use picolease_core::sim::{Fault, SimConfig, Simulation};
    use std::time::Duration;
    let run = |mutation: Mutation| {
        let mut config = SimConfig::new(2, 7);
        config.ttl = Duration::from_secs(10);
        config.delay_max = Duration::from_millis(20);
        config.faults =
            Fault::parse_list("crash:0@5s,failover@17s+6s,restart:0@17100ms").expect("valid");
        config.duration = Duration::from_secs(60);
        let mut sim = Simulation::new(config).expect("valid simulation");
        sim.set_db_mutation(mutation);
        sim.run()
    };
    let real = run(Mutation::None);
    real.check_safety()
        .unwrap_or_else(|v| panic!("{v}\n{}", real.timeline(true)));
    let planted = run(Mutation::IncarnationIgnored);
    let found = planted
        .check_safety()
        .err()
        .unwrap_or_else(|| panic!("not found:\n{}", planted.timeline(false)));
    println!("IncarnationIgnored: {found}");
    assert!(
        matches!(found.invariant, "mutual exclusion" | "fencing"),
        "{found}"
    );
}

/// (j) A leader that yields to any live candidate, whatever its rank: the
/// checker over ranked nodes (`Bounds::with_ranks`) finds a handover to a
/// node that does not outrank its holder.
#[test]
fn a_yield_to_a_lower_rank_is_found() {
    let mut bounds = Bounds::with_ranks(2);
    bounds.mutation = Mutation::YieldToAnyCandidate;
    finds_at(&bounds, &[Property::Preference]);
}

/// (l) Ranked lease sets (`Bounds::ranked`): an outranked node's yield
/// is a planned handover, which here does not stop the lease's work. The
/// yield lies deeper than an exhaustive search of the space reaches, so
/// the path to it (`RANKED_SET_YIELD`) is replayed: n1's term starts
/// while n0's work still runs, and the replay stops there.
#[test]
fn a_set_that_yields_to_a_better_member_with_its_work_running_is_caught() {
    let mut bounds = Bounds::for_set(2, 1);
    bounds.ranked = true;
    bounds.faults = 1;
    bounds.mutation = Mutation::SetHandOverKeepsWork;
    let r = replay(RANKED_SET_YIELD, &bounds).expect("a valid trace");
    let found = r.violation.as_ref().expect("the planted bug is caught");
    println!("{r}");
    assert!(
        [
            Property::Gating,
            Property::StopLead,
            Property::MutualExclusion
        ]
        .contains(&found.property),
        "{r}"
    );
}

/// (o) Health probes (`Bounds::health`, DESIGN §5 "Work that fails"): a
/// leader that ignores its own health keeps the lease after its probe
/// failed although its renewal read a healthy live candidate.
#[test]
fn a_leader_that_ignores_its_own_health_is_found() {
    let mut bounds = Bounds::with_health(2);
    bounds.mutation = Mutation::IgnoresOwnHealth;
    finds_at(&bounds, &[Property::Health]);
}

/// Where the planted counterexample's lines are kept for the CLI's browser
/// test (`tools/tests/cli_timeline.rs` draws them in Chromium).
const DRAWN_COUNTEREXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tools/tests/data/no_deadline_counterexample.jsonl"
);

/// A planted bug's counterexample as `picolease timeline` reads it: the
/// shortest trace of (b), a paused leader that resumes past its row's
/// expiry and still leads, replayed with the mutation and written as
/// `run --json` lines. Node 0 leads, pauses, resumes and still leads at
/// the end, and they are the lines
/// `tools/tests/data/no_deadline_counterexample.jsonl` holds, which the
/// CLI's browser test draws. A change to the model or the checker that
/// changes the counterexample fails here first: `PICOLEASE_BLESS=1`
/// writes the file afresh.
#[test]
fn a_planted_counterexample_is_written_for_the_timeline() {
    let mut bounds = Bounds::default_for(2);
    bounds.mutation = Mutation::NoDeadline;
    let budget = Budget {
        stop_at_first_violation: true,
        ..Budget::default()
    };
    let report = check(&bounds, budget, |_| {}).expect("valid bounds");
    let found = report.violations.first().expect("found: see (b)");
    let replayed = replay(&found.trace, &bounds).expect("the trace replays");
    let lines = replayed.timeline_lines(
        u64::from(bounds.ttl_ticks),
        u64::from(bounds.interval_ticks),
    );
    let events: Vec<&str> = lines
        .iter()
        .map(|l| {
            l.strip_prefix("{\"event\":\"")
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("?")
        })
        .collect();
    assert_eq!(
        events,
        ["leader", "pause", "resume", "leading"],
        "{lines:#?}"
    );
    assert!(
        lines.iter().all(|l| l.contains("\"node\":\"node 0\"")),
        "{lines:#?}"
    );
    let text = lines.join("\n") + "\n";
    if std::env::var_os("PICOLEASE_BLESS").is_some() {
        std::fs::write(DRAWN_COUNTEREXAMPLE, &text).expect("write the drawn counterexample");
    }
    let kept = std::fs::read_to_string(DRAWN_COUNTEREXAMPLE)
        .expect("the drawn counterexample: PICOLEASE_BLESS=1 writes it");
    assert_eq!(
        kept, text,
        "the planted counterexample changed: check it, then PICOLEASE_BLESS=1 writes it afresh"
    );
}

/// (p) Lease sets renewing by liveness (DESIGN §9 "Renewal by liveness", `Bounds::by_liveness`):
/// the model database's acquire takes a linked row while its holder's
/// membership row is live. A node reaching for a lease the other holds
/// (the share's plan, or a stale read) takes it, and two nodes lead it.
#[test]
fn a_linked_row_taken_while_its_holders_liveness_lives_is_found() {
    let mut bounds = Bounds::for_set(2, 2);
    bounds.by_liveness = true;
    bounds.mutation = Mutation::LinkedTakenWhileLive;
    finds_at(
        &bounds,
        &[
            Property::Stealing,
            Property::MutualExclusion,
            Property::Validity,
        ],
    );
}

/// The set simulator's safety check excuses a frozen node's work and a
/// term forced free until its holder's deadline, and no more: with a bug
/// planted in every node's set, a pause longer than the ttl (no
/// deadline: the thawed node works on rows the others took) and a forced
/// release (the demotion does not stop the work, which outlives the
/// holder's deadline: flagged then, 1.9 s after the release, not before)
/// are each caught, by liveness and per lease alike.
#[test]
fn the_set_simulator_catches_what_a_pause_or_a_forced_release_exposes() {
    use picolease_core::sim::set::{SetSimConfig, SetSimulation};
    use std::time::Duration;
    for by_liveness in [true, false] {
        let mut paused = SetSimConfig::new(3, 30, 7);
        paused.by_liveness = by_liveness;
        paused.pauses = vec![(Duration::from_secs(6), 1, Duration::from_secs(4))];
        // Node 1 joins just before the release: short of its share, it
        // takes the lease freed, so its old holder, now over its share,
        // does not take it back.
        let mut forced = SetSimConfig::new(2, 10, 5);
        forced.by_liveness = by_liveness;
        forced.starts[1] = Duration::from_millis(5_990);
        forced.forced_releases = vec![(Duration::from_secs(6), 3)];
        // What is caught: the thawed node working on at the thaw; the
        // forced term's work outliving its holder's deadline (excused
        // before it), beside the lease's new holder.
        for (config, mutation, caught) in [
            (paused, Mutation::NoDeadline, "at 10s: node 1 works lease"),
            (
                forced,
                Mutation::WorkKeptOnDemotion,
                "node 0 works lease s3 at epoch 1",
            ),
        ] {
            let clean = SetSimulation::new(config.clone()).expect("valid").run();
            assert!(clean.violations.is_empty(), "{:#?}", clean.violations);
            let mut sim = SetSimulation::new(config).expect("valid");
            sim.set_node_mutation(mutation);
            let report = sim.run();
            let found = report.violations.iter().find(|v| v.contains(caught));
            println!("{mutation:?}, by liveness {by_liveness}: {found:?}");
            assert!(
                found.is_some(),
                "{mutation:?} (by liveness {by_liveness}) not caught: {:#?}",
                report.violations
            );
        }
    }
}
