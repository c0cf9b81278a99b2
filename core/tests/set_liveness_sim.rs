//! A lease set that renews by liveness (DESIGN §9 "Renewal by liveness", issue 45), on the
//! simulator with the model database in that shape
//! (`ModelDb::by_liveness`): the unchanged `LeaseSet` over statements that
//! link what a node takes to its membership row and confirm it by reading.
//! The same safety on the database's truth as `set_sim.rs` (work only on
//! the node's row at its epoch, unexpired by its liveness), every lease
//! held, fair shares, no lease moving without cause, a crashed node's
//! leases taken within ttl + interval; and what it is for: in steady state
//! the database writes about one row per node per interval, not one per
//! lease. The drivers' statements do not do this yet.
//!
//! `cargo test -p picolease-core --features sim --test set_liveness_sim`

use std::time::Duration;

use picolease_core::sim::set::{SetReport, SetSimConfig, SetSimulation};
use proptest::prelude::*;

fn by_liveness(nodes: usize, leases: usize, seed: u64) -> SetSimConfig {
    SetSimConfig {
        by_liveness: true,
        ..SetSimConfig::new(nodes, leases, seed)
    }
}

fn run(config: SetSimConfig) -> SetReport {
    SetSimulation::new(config).expect("valid config").run()
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Rows written per interval over the samples from `from` on (one sample
/// per interval), the most in any one interval.
fn writes_per_interval(report: &SetReport, from: Duration) -> u64 {
    let samples: Vec<_> = report.samples.iter().filter(|s| s.at >= from).collect();
    samples
        .windows(2)
        .map(|w| w[1].row_writes - w[0].row_writes)
        .max()
        .expect("two samples")
}

/// How long after `from` each work that started on `node` after it
/// started.
fn started_after(report: &SetReport, from: Duration, node: usize) -> Vec<Duration> {
    report
        .starts
        .iter()
        .filter(|&&(t, _, n)| t > from && n == node)
        .map(|&(t, _, _)| t - from)
        .collect()
}

/// The leases whose work ran on `node` at `at`.
fn held_by(report: &SetReport, node: usize, at: Duration) -> Vec<usize> {
    let mut last = std::collections::BTreeMap::new();
    for &(t, lease, n) in &report.starts {
        if t < at {
            last.insert(lease, n);
        }
    }
    last.into_iter()
        .filter(|&(_, n)| n == node)
        .map(|(l, _)| l)
        .collect()
}

/// 10 nodes over 1,000 leases settle, and then each interval the database
/// writes at most 2 rows per node (each node's membership row, renewed
/// once or twice an interval), where renewing every lease wrote 1,000 and
/// more: measured in the same test on the per-lease shape.
#[test]
fn ten_nodes_over_a_thousand_leases_write_a_row_or_two_each_per_interval() {
    let report = run(by_liveness(10, 1_000, 11));
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let settled = report.settled_at().expect("settles");
    assert!(settled <= secs(5.0), "settled at {settled:?}");
    assert_eq!(report.moves_since(settled), 0);
    let linked = writes_per_interval(&report, settled + secs(1.0));
    let per_lease = {
        let report = run(SetSimConfig::new(10, 1_000, 11));
        let settled = report.settled_at().expect("settles");
        writes_per_interval(&report, settled + secs(1.0))
    };
    println!(
        "row writes per interval in steady state: {linked} by liveness, {per_lease} per lease"
    );
    assert!(linked <= 2 * 10, "{linked} row writes in an interval");
    assert!(per_lease >= 1_000, "{per_lease}");
}

/// 10 nodes started together over 10,000 leases: every lease held within
/// 10 intervals (issue 45's bound; the settling printed), each lease
/// started once, none lapsing under a live holder, whichever the shape.
/// With each node reaching first for the leases it ranked first for
/// (plain rendezvous), a few dozen leases that no node's ranking reached
/// for were found a few at a time, seconds later.
#[test]
fn ten_nodes_over_ten_thousand_leases_settle_within_ten_intervals() {
    for by in [true, false] {
        let mut config = SetSimConfig::new(10, 10_000, 5);
        config.by_liveness = by;
        config.duration = secs(8.0);
        let report = run(config.clone());
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        let settled = report.settled_at().expect("settles");
        println!(
            "10 x 10,000 (by liveness: {by}): every lease held {settled:?} after the start, {:.1} intervals",
            settled.as_secs_f64() / config.interval.as_secs_f64()
        );
        assert!(settled <= config.interval * 10, "{settled:?}");
        assert_eq!(
            report.moves_since(Duration::ZERO),
            10_000,
            "each lease started once"
        );
    }
}

/// A crashed node's leases (its share of 1,000 among 4) are taken by the
/// others within ttl + interval of the crash, each at the next epoch.
#[test]
fn a_crashed_nodes_leases_are_taken_within_ttl_and_an_interval() {
    let mut config = by_liveness(4, 1_000, 7);
    let crash = secs(8.0);
    config.crashes = vec![(crash, 0)];
    let report = run(config);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let orphans = held_by(&report, 0, crash);
    assert_eq!(orphans.len(), 250, "node 0 held its share before the crash");
    let mut latest = Duration::ZERO;
    for lease in orphans {
        let taken = report
            .starts
            .iter()
            .find(|&&(t, l, n)| t > crash && l == lease && n != 0)
            .map(|&(t, _, _)| t)
            .expect("taken over");
        latest = latest.max(taken - crash);
    }
    println!("the last of the crashed node's 250 leases taken {latest:?} after the crash");
    // ttl 2 s + interval 0.5 s.
    assert!(latest <= secs(2.5), "{latest:?}");
    let last = report.samples.last().unwrap();
    let mut held: Vec<usize> = last.held.iter().flatten().copied().collect();
    held.sort();
    assert_eq!(held, vec![333, 333, 334]);
}

#[test]
fn a_node_that_joins_gets_its_share_without_stealing() {
    let mut config = by_liveness(3, 30, 3);
    let join = secs(6.0);
    config.starts[2] = join;
    let report = run(config);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let settled = report.settled_at().expect("settles");
    assert!(settled - join <= secs(5.0));
    assert_eq!(report.moves_since(join), 10, "only node 2's share moved");
}

#[test]
fn a_clean_shutdown_hands_its_leases_over_at_once() {
    let mut config = by_liveness(2, 20, 5);
    let stop = secs(8.0);
    config.shutdowns = vec![(stop, 1)];
    let report = run(config);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let moved = started_after(&report, stop, 0);
    assert_eq!(moved.len(), 10);
    assert!(moved.iter().all(|&d| d < secs(0.1)), "{moved:?}");
}

/// A member whose probe fails keeps its membership row, the liveness its
/// leases are linked to, and holds its unhealthy row beside it: its
/// leases move to the healthy members by its own handovers, never taken
/// while it still leads them, and once healthy again it takes its share
/// back. While it is unhealthy the database still writes a row or two per
/// node per interval. (Giving the membership row up, as a set renewing
/// every row does, ended every linked lease at once: taken by the others
/// while the sick node still led them.)
#[test]
fn an_unhealthy_member_keeps_its_liveness_and_hands_its_leases_over() {
    let mut config = by_liveness(3, 30, 11);
    let sick = secs(6.0);
    let span = secs(6.0);
    config.unhealthy = vec![(sick, 1, span)];
    config.duration = secs(18.0);
    let report = run(config.clone());
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let before = report.samples.iter().rfind(|s| s.at < sick).unwrap();
    assert_eq!(before.held, vec![Some(10), Some(10), Some(10)]);
    // Out of the share within two intervals of its probe failing, every
    // lease held by the others.
    let out = report
        .samples
        .iter()
        .find(|s| s.at > sick && s.held[1] == Some(0) && s.unheld == 0)
        .expect("node 1's leases all move")
        .at;
    println!(
        "node 1's leases all led elsewhere {:?} after its probe failed",
        out - sick
    );
    assert!(out <= sick + config.interval * 2, "{out:?}");
    let during: Vec<_> = report
        .samples
        .iter()
        .filter(|s| s.at >= out && s.at < sick + span)
        .collect();
    assert!(during
        .iter()
        .all(|s| !s.healthy[1] && s.held[1] == Some(0) && s.unheld == 0));
    let writes = during
        .windows(2)
        .map(|w| w[1].row_writes - w[0].row_writes)
        .max()
        .expect("samples");
    assert!(
        writes <= 6,
        "{writes} rows written in an interval while node 1 is unhealthy"
    );
    // Healthy again: its share back, and then nothing moves.
    let last = report.samples.last().unwrap();
    assert_eq!(last.held, vec![Some(10), Some(10), Some(10)]);
    assert!(last.healthy[1]);
}

/// A node frozen (SIGSTOP) for twice the ttl: the others take its leases
/// once its liveness lapses, each within ttl + interval of the pause (its
/// last renewal went out before it), while its frozen works cannot act;
/// when it thaws its set finds its deadline past and stops every work
/// before anything else (the check would flag a work running on a row
/// that is another's), and it gets its share back.
#[test]
fn a_paused_node_loses_its_leases_and_stops_their_work_when_it_thaws() {
    let mut config = by_liveness(3, 30, 7);
    let (pause, span) = (secs(6.0), secs(4.0));
    config.pauses = vec![(pause, 1, span)];
    let report = run(config.clone());
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let frozen = held_by(&report, 1, pause);
    assert_eq!(frozen.len(), 10, "node 1 held its share");
    let bound = config.ttl + config.interval;
    for &lease in &frozen {
        let taken = report
            .starts
            .iter()
            .find(|&&(t, l, n)| t > pause && l == lease && n != 1)
            .map(|&(t, _, _)| t - pause)
            .expect("taken during the pause");
        assert!(taken <= bound, "s{lease} taken {taken:?} after the pause");
    }
    // Every frozen work stopped at the thaw, not a moment later.
    let thaw = pause + span;
    let stopped: Vec<_> = report
        .stops
        .iter()
        .filter(|&&(t, _, n)| t > pause && n == 1)
        .collect();
    assert_eq!(stopped.len(), 10, "{stopped:?}");
    assert!(stopped.iter().all(|&&(t, _, _)| t == thaw), "{stopped:?}");
    let settled = report.settled_after(thaw).expect("settles after the thaw");
    assert!(settled <= thaw + secs(2.0 + 5.0 * 0.5), "{settled:?}");
    let last = report.samples.last().unwrap();
    assert_eq!(last.held, vec![Some(10), Some(10), Some(10)]);
}

/// An operator forces one of a live node's leases free (`release
/// --force`): with release notices its holder hears it, renews at once and
/// stops the work within milliseconds; without them (MySQL) it learns at
/// its next renewal, within an interval, and in both well before the
/// deadline it had. The lease is led again at a later epoch.
#[test]
fn a_lease_forced_free_stops_on_its_holder_by_its_deadline() {
    for notify in [true, false] {
        let mut config = by_liveness(2, 10, 5);
        config.notify = notify;
        let force = secs(6.0);
        config.forced_releases = vec![(force, 3)];
        let report = run(config.clone());
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        let holder = (0..2)
            .find(|&n| held_by(&report, n, force).contains(&3))
            .expect("s3 led when forced");
        let stop = report
            .stops
            .iter()
            .find(|&&(t, l, n)| t >= force && l == 3 && n == holder)
            .map(|&(t, _, _)| t - force)
            .expect("its holder stops it");
        let again = report
            .starts
            .iter()
            .find(|&&(t, l, _)| t >= force && l == 3)
            .map(|&(t, _, _)| t - force)
            .expect("led again");
        println!("notify {notify}: stopped {stop:?} and led again {again:?} after the force");
        let bound = if notify {
            Duration::from_millis(10)
        } else {
            config.interval + Duration::from_millis(10)
        };
        assert!(stop <= bound, "notify {notify}: stopped {stop:?} after");
        assert!(again >= stop, "never two at once: {again:?} < {stop:?}");
    }
}

/// A fleet mid-upgrade: nodes 0 and 2 renew every row, 1 and 3 by
/// liveness, over 40 leases; node 3 crashes. The older survivors read its
/// linked rows as held far ahead and never take them; the newer one takes
/// them up to its share (3 of its 10), and then, once the rest have stayed
/// lapsed and untaken a whole ttl, takes them anyway and gives its surplus
/// back as plain free rows, which the older ones take: every lease is led
/// again, 14, 13 and 13, within 2·ttl + 4 intervals of the crash, never by
/// two nodes. Without the orphan rule (`plan.rs::take_outside_share`) the
/// other 7 waited for good, as
/// `tools/tests/cli_set_liveness.rs::a_mixed_fleet_*` found through the
/// CLI before the rule.
#[test]
fn a_mixed_fleet_takes_a_crashed_newer_nodes_leases_all_the_same() {
    for notify in [true, false] {
        let mut config = by_liveness(4, 40, 3);
        config.notify = notify;
        config.renewing_every_row = vec![0, 2];
        let crash = secs(6.0);
        config.crashes = vec![(crash, 3)];
        let report = run(config.clone());
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        assert_eq!(
            held_by(&report, 3, crash).len(),
            10,
            "node 3 held its share"
        );
        let settled = report.settled_after(crash).expect("settles");
        let led_again = settled - crash;
        println!("notify {notify}: every lease led again {led_again:?} after the crash");
        let bound = config.ttl * 2 + config.interval * 4;
        assert!(led_again <= bound, "settled {led_again:?} after the crash");
        let last = report.samples.last().unwrap();
        assert_eq!(last.held, vec![Some(14), Some(13), Some(13), None]);
        assert_eq!(last.unheld, 0);
    }
}

/// The same with two newer survivors (nodes 1 and 3 of 5; 0, 2 and 4
/// renew every row), which both reach for each orphan: one takes it, the
/// other, answered "held", drops it, so no lease of the crashed node
/// starts more than twice after the crash (taken as an orphan, given
/// back), and every lease is led again within 2·ttl + 4 intervals, over
/// 20 seeds. (The answer clears the orphan, `batch.rs::answer`: a review
/// found, by reading, a loser left with it trying again before its next
/// survey. These schedules do not reach that timing: they pass without
/// the clearing too, the loser's survey clearing it first.)
#[test]
fn two_newer_survivors_take_each_orphan_once() {
    for seed in 0..20 {
        let mut config = by_liveness(5, 50, seed);
        config.renewing_every_row = vec![0, 2, 4];
        let crash = secs(6.0);
        config.crashes = vec![(crash, 3)];
        let report = run(config.clone());
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:#?}",
            report.violations
        );
        let orphans = held_by(&report, 3, crash);
        assert_eq!(orphans.len(), 10, "seed {seed}: node 3 held its share");
        for &lease in &orphans {
            let starts = report
                .starts
                .iter()
                .filter(|&&(t, l, _)| t > crash && l == lease)
                .count();
            assert!(
                starts <= 2,
                "seed {seed}: s{lease} started {starts} times after the crash"
            );
        }
        let settled = report.settled_after(crash).expect("settles");
        let bound = config.ttl * 2 + config.interval * 4;
        assert!(
            settled - crash <= bound,
            "seed {seed}: settled {:?} after the crash",
            settled - crash
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    /// 1,000 random clusters with a crash, a late join, a shutdown, a
    /// planned handover, a pause (SIGSTOP, up to 3 s: longer than the ttl
    /// in about a third of them) and an operator's forced release: never a
    /// lease worked without its row (its holder's liveness live), but for
    /// a frozen node and a term forced free, which runs on only until its
    /// holder's deadline; once calm every lease is held, shares differ by
    /// at most one, and then nothing moves. In about half of them one
    /// node renews every row (a fleet mid-upgrade): a crashed newer node's
    /// linked rows are then taken as orphans, a ttl later.
    #[test]
    fn random_schedules_stay_safe_and_settle(
        nodes in 2usize..6,
        leases in 1usize..120,
        seed in any::<u64>(),
        crash in proptest::option::of((0u64..6_000, 0usize..6)),
        join in proptest::option::of((0u64..6_000, 0usize..6)),
        shutdown in proptest::option::of((0u64..6_000, 0usize..6)),
        hand_over in proptest::option::of((0u64..6_000, 0usize..6, 0usize..120, 0usize..6)),
        pause in proptest::option::of((0u64..6_000, 0usize..6, 1u64..3_000)),
        forced in proptest::option::of((0u64..6_000, 0usize..120)),
        older in proptest::option::of(0usize..6),
    ) {
        let mut config = by_liveness(nodes, leases, seed);
        config.renewing_every_row.extend(older.map(|node| node % nodes));
        config.duration = secs(16.0);
        let mut last_event = Duration::ZERO;
        if let Some((at, node)) = crash {
            let at = Duration::from_millis(at);
            config.crashes.push((at, node % nodes));
            last_event = last_event.max(at);
        }
        if let Some((at, node)) = join {
            let at = Duration::from_millis(at);
            config.starts[node % nodes] = at;
            last_event = last_event.max(at);
        }
        if let Some((at, node)) = shutdown {
            let at = Duration::from_millis(at);
            config.shutdowns.push((at, node % nodes));
            last_event = last_event.max(at);
        }
        if let Some((at, from, lease, to)) = hand_over {
            let at = Duration::from_millis(at);
            config.hand_overs.push((at, from % nodes, lease % leases, to % nodes));
            last_event = last_event.max(at);
        }
        if let Some((at, node, span)) = pause {
            let (at, span) = (Duration::from_millis(at), Duration::from_millis(span));
            config.pauses.push((at, node % nodes, span));
            last_event = last_event.max(at + span);
        }
        if let Some((at, lease)) = forced {
            let at = Duration::from_millis(at);
            config.forced_releases.push((at, lease % leases));
            last_event = last_event.max(at);
        }
        let gone: Vec<usize> = config.crashes.iter().chain(&config.shutdowns).map(|&(_, n)| n).collect();
        let newer = |n: &usize| !config.renewing_every_row.contains(n);
        // Once no node renewing by liveness runs, a crashed one's linked
        // rows wait for good (DESIGN §9 "Renewal by liveness"): only safety is checked then.
        let stranded = config.crashes.iter().any(|(_, n)| newer(n))
            && !(0..nodes).any(|n| !gone.contains(&n) && newer(&n));
        let all_gone = { let mut g = gone.clone(); g.sort(); g.dedup(); g.len() == nodes };
        // An orphan in a mixed fleet is taken a ttl after it lapsed.
        let bound = if config.renewing_every_row.is_empty() { 2.0 + 5.0 * 0.5 } else { 2.0 * 2.0 + 5.0 * 0.5 };
        let report = run(config);
        prop_assert!(report.violations.is_empty(), "{:#?}", report.violations);
        if !stranded && !all_gone {
            let settled = report.settled_after(last_event);
            prop_assert!(settled.is_some(), "never settled: {:?}", report.samples.last());
            let settled = settled.unwrap();
            prop_assert!(settled <= last_event + secs(bound),
                "settled at {:?}, last event at {:?}", settled, last_event);
            prop_assert_eq!(report.moves_since(settled + secs(0.5)), 0);
        }
    }
}

/// A clean shutdown whose works take 300 ms to stop: the node's
/// membership row, the liveness its leases follow, is released only after
/// the last of them, so no lease is takeable while its work still runs.
#[test]
fn a_shutdown_releases_the_liveness_after_the_leases_whose_work_stops_slowly() {
    let mut config = by_liveness(2, 20, 9);
    config.work_stop = Duration::from_millis(300);
    let stop = secs(8.0);
    config.shutdowns = vec![(stop, 1)];
    let report = run(config);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let moved = started_after(&report, stop, 0);
    println!("taken after the shutdown began: {moved:?}");
    assert_eq!(moved.len(), 10, "the leaving node's share moved");
    // Not before the leaving node's works stopped.
    assert!(
        moved.iter().all(|&d| d >= Duration::from_millis(300)),
        "{moved:?}"
    );
}
