//! Health as an input of `LeaseState` (DESIGN §5 "Work that fails"):
//! exact command sequences on hand-picked times, as `preference.rs` does
//! for candidates.

use std::time::Duration;

use picolease_core::{
    Candidate, Command, Config, Demotion, Epoch, HolderId, Instant, Leadership, LeaseName,
    LeaseState, Operation, Rank, Reply, RequestId, Role,
};

fn ms(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000_000)
}

fn config(holder: &str) -> Config {
    let me = HolderId::new(holder).unwrap();
    let mut c = Config::with_ttl(LeaseName::new("l").unwrap(), me, Duration::from_secs(10));
    c.jitter = Duration::ZERO;
    c
}

fn drain(s: &mut LeaseState) -> Vec<Command> {
    std::iter::from_fn(|| s.poll_command()).collect()
}

fn execute(id: u64, operation: Operation) -> Command {
    Command::Execute {
        request: RequestId(id),
        operation,
    }
}

const ONE: Epoch = Epoch::new(1);
const COOL_DOWN: Duration = Duration::from_secs(60);

fn held_by(holder: &str, expires_in: Duration) -> Reply {
    Reply::Held {
        holder: Some(HolderId::new(holder).unwrap()),
        epoch: ONE,
        expires_in,
    }
}

fn healthy_candidate(holder: &str) -> Candidate {
    Candidate {
        holder: HolderId::new(holder).unwrap(),
        rank: Rank::default(),
    }
}

/// Leader `me` at epoch 1 from an acquire sent at 0 ms, answered at 2 ms;
/// its first renewal goes out at 2,500 ms as request 2.
fn leading() -> LeaseState {
    let mut s = LeaseState::new(config("me"), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(2), RequestId(1), Reply::Acquired { epoch: ONE });
    drain(&mut s);
    s.handle_timeout(ms(2_500));
    assert_eq!(
        drain(&mut s),
        vec![execute(2, Operation::Renew { epoch: ONE })]
    );
    s
}

/// The leader stops its work for `reason` and sends request 3, a handover
/// (or, with `release`, a release).
fn steps_down(reason: Demotion, release: bool) -> Vec<Command> {
    vec![
        Command::StopWork { epoch: ONE, reason },
        Command::Publish(Leadership {
            role: Role::Follower,
            epoch: Some(ONE),
            holder: None,
            reason: Some(reason),
        }),
        execute(
            3,
            if release {
                Operation::Release { epoch: ONE }
            } else {
                Operation::HandOver { epoch: ONE }
            },
        ),
    ]
}

#[test]
fn a_node_with_a_probe_announces_while_healthy_at_the_lowest_rank_and_not_while_unhealthy() {
    let mut s = LeaseState::new(config("me"), ms(0)).unwrap();
    s.handle_health(ms(0), true);
    assert_eq!(
        drain(&mut s),
        vec![execute(1, Operation::Acquire), Command::WatchChanges(true)]
    );
    s.handle_reply(
        ms(2),
        RequestId(1),
        held_by("other", Duration::from_secs(9)),
    );
    let commands = drain(&mut s);
    assert_eq!(commands.last(), Some(&execute(2, Operation::Announce)));
    s.handle_reply(ms(3), RequestId(2), Reply::Accepted);
    assert!(drain(&mut s).is_empty());
    // Unhealthy: no announcement at the next poll, and the acquire waits.
    s.handle_health(ms(10), false);
    assert!(drain(&mut s).is_empty());
    assert!(!s.is_healthy(ms(10)));
    s.handle_timeout(ms(2_502));
    assert!(drain(&mut s).is_empty(), "an unhealthy follower steps back");
}

#[test]
fn a_node_without_a_probe_at_the_lowest_rank_announces_nothing() {
    let mut s = LeaseState::new(config("me"), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(
        ms(2),
        RequestId(1),
        held_by("other", Duration::from_secs(9)),
    );
    let commands = drain(&mut s);
    assert!(
        !commands.contains(&execute(2, Operation::Announce)),
        "{commands:?}"
    );
}

#[test]
fn an_unhealthy_follower_tries_two_intervals_after_the_expiry_it_saw() {
    let mut s = LeaseState::new(config("me"), ms(0)).unwrap();
    s.handle_health(ms(0), false);
    // The first acquire waits the degraded wait (the reservation: two
    // intervals, 5 s at ttl 10 s).
    assert_eq!(s.poll_timeout(), Some(ms(5_000)));
    s.handle_timeout(ms(5_000));
    assert_eq!(
        drain(&mut s),
        vec![execute(1, Operation::Acquire), Command::WatchChanges(true)]
    );
    // Held for 3 s more: a healthy follower would try at the expiry
    // (8,000 ms); this one at the expiry plus 5 s.
    s.handle_reply(
        ms(5_002),
        RequestId(1),
        held_by("other", Duration::from_secs(3)),
    );
    drain(&mut s);
    assert_eq!(s.poll_timeout(), Some(ms(13_000)));
    // A release notice does not hurry it.
    s.handle_release_notice(ms(6_000));
    assert!(drain(&mut s).is_empty());
    // Healthy again: it tries at once.
    s.handle_health(ms(7_000), true);
    assert_eq!(drain(&mut s), vec![execute(2, Operation::Acquire)]);
}

#[test]
fn an_unhealthy_leader_hands_over_at_once_to_the_candidate_its_last_renewal_read() {
    let mut s = leading();
    s.handle_reply(
        ms(2_503),
        RequestId(2),
        Reply::CandidateSeen {
            candidate: healthy_candidate("b"),
        },
    );
    // An equal rank: a healthy leader keeps the lease.
    assert!(drain(&mut s).is_empty());
    assert!(s.leadership().is_leader());
    s.handle_health(ms(3_000), false);
    assert_eq!(drain(&mut s), steps_down(Demotion::Unhealthy, false));
    assert_eq!(s.successor().map(HolderId::as_str), Some("b#"));
}

#[test]
fn an_unhealthy_leader_with_no_candidate_keeps_leading_then_yields_to_the_first_that_announces() {
    let mut s = leading();
    s.handle_reply(ms(2_503), RequestId(2), Reply::Accepted);
    drain(&mut s);
    s.handle_health(ms(3_000), false);
    assert!(
        drain(&mut s).is_empty(),
        "a degraded leader is better than none"
    );
    assert!(s.leadership().is_leader());
    s.handle_timeout(ms(5_000));
    assert_eq!(
        drain(&mut s),
        vec![execute(3, Operation::Renew { epoch: ONE })]
    );
    s.handle_reply(
        ms(5_003),
        RequestId(3),
        Reply::CandidateSeen {
            candidate: healthy_candidate("b"),
        },
    );
    let commands = drain(&mut s);
    assert_eq!(
        commands.first(),
        Some(&Command::StopWork {
            epoch: ONE,
            reason: Demotion::Unhealthy
        })
    );
    assert_eq!(
        commands.last(),
        Some(&execute(4, Operation::HandOver { epoch: ONE }))
    );
}

#[test]
fn an_escalation_releases_with_no_candidate_and_the_node_stands_aside_for_the_cool_down() {
    let mut s = leading();
    s.handle_reply(ms(2_503), RequestId(2), Reply::Accepted);
    drain(&mut s);
    s.handle_work_escalated(ms(3_000), Some(ONE), COOL_DOWN);
    assert_eq!(drain(&mut s), steps_down(Demotion::Escalated, true));
    s.handle_reply(ms(3_002), RequestId(3), Reply::Accepted);
    drain(&mut s);
    assert_eq!(s.cool_down_until(ms(3_002)), Some(ms(63_000)));
    // It waits the degraded wait before trying again.
    assert_eq!(s.poll_timeout(), Some(ms(8_002)));
    s.handle_timeout(ms(8_002));
    assert_eq!(drain(&mut s), vec![execute(4, Operation::Acquire)]);
}

#[test]
fn an_escalation_hands_over_to_the_candidate_seen() {
    let mut s = leading();
    s.handle_reply(
        ms(2_503),
        RequestId(2),
        Reply::CandidateSeen {
            candidate: healthy_candidate("b"),
        },
    );
    drain(&mut s);
    s.handle_work_escalated(ms(3_000), Some(ONE), COOL_DOWN);
    assert_eq!(drain(&mut s), steps_down(Demotion::Escalated, false));
    assert_eq!(s.successor().map(HolderId::as_str), Some("b#"));
}

#[test]
fn a_degraded_leader_that_escalates_again_keeps_the_lease() {
    let mut s = leading();
    s.handle_reply(ms(2_503), RequestId(2), Reply::Accepted);
    drain(&mut s);
    s.handle_health(ms(2_600), false);
    assert!(drain(&mut s).is_empty());
    s.handle_work_escalated(ms(3_000), Some(ONE), COOL_DOWN);
    assert!(drain(&mut s).is_empty());
    assert!(s.leadership().is_leader());
}

#[test]
fn the_cool_down_ends_on_its_own_and_the_follower_tries_at_once() {
    let mut s = LeaseState::new(config("me"), ms(0)).unwrap();
    s.handle_work_escalated(ms(0), None, Duration::from_secs(20));
    assert!(!s.is_healthy(ms(0)));
    // Asleep until the degraded wait, not the cool-down.
    assert_eq!(s.poll_timeout(), Some(ms(5_000)));
    s.handle_timeout(ms(5_000));
    assert_eq!(
        drain(&mut s),
        vec![execute(1, Operation::Acquire), Command::WatchChanges(true)]
    );
    s.handle_reply(
        ms(5_002),
        RequestId(1),
        held_by("other", Duration::from_secs(20)),
    );
    drain(&mut s);
    // The expiry seen is 25,000 ms, + 5 s; the cool-down ends first, and
    // healthy again the follower tries at once.
    assert_eq!(s.poll_timeout(), Some(ms(20_000)));
    s.handle_timeout(ms(20_000));
    assert_eq!(drain(&mut s), vec![execute(2, Operation::Acquire)]);
    assert!(s.is_healthy(ms(20_000)));
}

#[test]
fn a_late_escalation_of_an_earlier_term_leaves_the_current_term_alone() {
    let mut s = leading();
    s.handle_reply(ms(2_503), RequestId(2), Reply::Accepted);
    drain(&mut s);
    s.handle_work_escalated(ms(3_000), Some(Epoch::new(7)), COOL_DOWN);
    assert!(drain(&mut s).is_empty());
    assert!(s.leadership().is_leader());
    // It still stands aside: unhealthy for the cool-down.
    assert!(!s.is_healthy(ms(3_000)));
}

#[test]
fn a_node_awaiting_its_first_verdict_does_not_take_a_free_lease_before_it() {
    // Awaiting: nothing at its first timeout; its first acquire would go
    // two intervals (5 s) later.
    let mut s = LeaseState::new(config("me"), ms(0)).unwrap();
    s.await_health(ms(0));
    assert!(!s.is_healthy(ms(0)));
    s.handle_timeout(ms(0));
    assert!(!drain(&mut s)
        .iter()
        .any(|c| matches!(c, Command::Execute { .. })));
    assert_eq!(s.poll_timeout(), Some(ms(5_000)));
    // A first verdict of healthy: it tries at once, and announces.
    s.handle_health(ms(40), true);
    assert!(drain(&mut s).contains(&execute(1, Operation::Acquire)));
    // No verdict ever: it tries as an unhealthy node, two intervals on.
    let mut s = LeaseState::new(config("me"), ms(0)).unwrap();
    s.await_health(ms(0));
    s.handle_timeout(ms(4_999));
    assert!(!drain(&mut s)
        .iter()
        .any(|c| matches!(c, Command::Execute { .. })));
    s.handle_timeout(ms(5_000));
    assert!(drain(&mut s).contains(&execute(1, Operation::Acquire)));
    // A first verdict of unhealthy changes nothing; and once a verdict
    // was heard, awaiting is ignored.
    let mut s = LeaseState::new(config("me"), ms(0)).unwrap();
    s.handle_health(ms(0), true);
    s.await_health(ms(0));
    assert!(s.is_healthy(ms(0)));
}
