//! Candidates and preference (DESIGN §3 "Preferred holders") in
//! `LeaseState`: exact command sequences on hand-picked times, as
//! `hand_over.rs` does for a planned handover.

use std::time::Duration;

use picolease_core::{
    Candidate, Command, Config, Demotion, Epoch, HolderId, Instant, Leadership, LeaseName,
    LeaseState, Operation, Rank, Reply, RequestId, Role,
};

fn ms(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000_000)
}

fn config(holder: &str, rank: Rank) -> Config {
    let me = HolderId::new(holder).unwrap();
    let mut c = Config::with_ttl(LeaseName::new("l").unwrap(), me, Duration::from_secs(10));
    c.jitter = Duration::ZERO;
    c.rank = rank;
    c
}

fn rank(priority: u32, tag: Option<&str>) -> Rank {
    Rank::new(priority, tag).unwrap()
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

fn held_by_other() -> Reply {
    Reply::Held {
        holder: Some(HolderId::new("other").unwrap()),
        epoch: ONE,
        expires_in: Duration::from_secs(9),
    }
}

fn candidate(holder: &str, rank: Rank) -> Candidate {
    Candidate {
        holder: HolderId::new(holder).unwrap(),
        rank,
    }
}

/// Leader `me` at epoch 1 with `rank`, from an acquire sent at 0 ms and
/// answered at 2 ms; its first renewal is due at 2,500 ms and goes out as
/// request 2.
fn leading(rank: Rank) -> LeaseState {
    let mut s = LeaseState::new(config("me", rank), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(2), RequestId(1), Reply::Acquired { epoch: ONE });
    drain(&mut s);
    assert!(s.leadership().is_leader());
    assert_eq!(s.poll_timeout(), Some(ms(2_500)));
    s.handle_timeout(ms(2_500));
    assert_eq!(
        drain(&mut s),
        vec![execute(2, Operation::Renew { epoch: ONE })]
    );
    s
}

/// The leader's renewal at 2,500 ms is answered with `candidate` seen.
fn renewal_sees(s: &mut LeaseState, candidate: Candidate) -> Vec<Command> {
    s.handle_reply(ms(2_503), RequestId(2), Reply::CandidateSeen { candidate });
    drain(s)
}

/// The leader's work stops and it hands the row over (the reservation is
/// then [`LeaseState::successor`]).
fn yields() -> Vec<Command> {
    vec![
        Command::StopWork {
            epoch: ONE,
            reason: Demotion::HandedOver,
        },
        Command::Publish(Leadership {
            role: Role::Follower,
            epoch: Some(ONE),
            holder: None,
            reason: Some(Demotion::HandedOver),
        }),
        execute(3, Operation::HandOver { epoch: ONE }),
    ]
}

#[test]
fn a_follower_with_a_rank_announces_right_after_its_acquire_once_an_interval() {
    let mut s = LeaseState::new(config("me", rank(5, None)), ms(0)).unwrap();
    assert!(s.announcement().is_some());
    s.handle_timeout(ms(0));
    assert_eq!(
        drain(&mut s),
        vec![execute(1, Operation::Acquire), Command::WatchChanges(true)]
    );
    s.handle_reply(ms(2), RequestId(1), held_by_other());
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Publish(Leadership {
                role: Role::Follower,
                epoch: Some(ONE),
                holder: Some(HolderId::new("other").unwrap()),
                reason: None,
            }),
            execute(2, Operation::Announce),
        ]
    );
    // Its answer changes nothing; the next acquire is an interval after
    // the first.
    s.handle_reply(ms(4), RequestId(2), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.poll_timeout(), Some(ms(2_500)));
    s.handle_timeout(ms(2_500));
    assert_eq!(drain(&mut s), vec![execute(3, Operation::Acquire)]);
    // The next announcement was due at 2,502 ms: it follows the acquire's
    // answer, one statement at a time.
    s.handle_reply(ms(2_503), RequestId(3), held_by_other());
    assert_eq!(drain(&mut s), vec![execute(4, Operation::Announce)]);
    // A failed announcement is not retried before the next is due.
    s.handle_reply(
        ms(2_505),
        RequestId(4),
        Reply::Failed(picolease_core::Failure::Transient),
    );
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.poll_timeout(), Some(ms(5_000)));
}

#[test]
fn the_lowest_rank_announces_nothing() {
    let mut s = LeaseState::new(config("me", Rank::default()), ms(0)).unwrap();
    // The text exists (a health probe would announce it, DESIGN §5); it
    // is not sent.
    assert!(s.announcement().is_some());
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(2), RequestId(1), held_by_other());
    let commands = drain(&mut s);
    assert!(
        !commands.iter().any(|c| matches!(
            c,
            Command::Execute {
                operation: Operation::Announce,
                ..
            }
        )),
        "{commands:?}"
    );
    assert_eq!(s.poll_timeout(), Some(ms(2_500)));
}

#[test]
fn a_leader_announces_nothing() {
    let mut s = leading(rank(5, None));
    s.handle_reply(ms(2_503), RequestId(2), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.poll_timeout(), Some(ms(5_000)));
}

#[test]
fn a_leader_yields_to_a_higher_priority_on_another_node() {
    let mut s = leading(rank(1, None));
    assert_eq!(
        renewal_sees(&mut s, candidate("b", rank(2, None))),
        yields()
    );
    assert_eq!(s.successor(), Some(&HolderId::reserved_for("b").unwrap()));
    s.handle_reply(ms(2_505), RequestId(3), Reply::Accepted);
    assert!(!s.leadership().is_leader());
}

#[test]
fn a_leader_yields_to_a_newer_version_at_equal_priority() {
    let mut s = leading(rank(1, Some("1.27.3")));
    assert_eq!(
        renewal_sees(&mut s, candidate("b", rank(1, Some("v1.28.0")))),
        yields()
    );
    assert_eq!(s.successor(), Some(&HolderId::reserved_for("b").unwrap()));
}

#[test]
fn a_leader_keeps_the_lease_from_an_equal_or_lower_rank() {
    for (own, theirs) in [
        (rank(1, None), rank(1, None)),
        (rank(2, None), rank(1, Some("9.9"))),
        (rank(1, Some("1.28")), rank(1, Some("1.28.0"))),
        (rank(1, Some("1.28")), rank(1, Some("1.27"))),
        (rank(1, Some("1.29")), rank(1, Some("1.29.0-rc.1"))),
        (rank(1, Some("1.29.0-rc.2")), rank(1, Some("1.29.0-rc.10"))),
        (rank(1, Some("blue")), rank(1, Some("green"))),
        (rank(1, Some("1.0")), rank(1, Some("green"))),
    ] {
        let mut s = leading(own.clone());
        assert_eq!(
            renewal_sees(&mut s, candidate("b", theirs.clone())),
            vec![],
            "{own:?} yielded to {theirs:?}"
        );
        assert!(s.leadership().is_leader());
        assert_eq!(s.poll_timeout(), Some(ms(5_000)));
    }
}

#[test]
fn a_leader_does_not_yield_to_a_candidate_on_its_own_node() {
    // `me` and `me#000002` share node `me`: a reservation for the node
    // would be taken back by this holder itself.
    let mut s = leading(rank(1, None));
    let same_node = Candidate {
        holder: HolderId::incarnation("me", 2).unwrap(),
        rank: rank(9, None),
    };
    assert_eq!(renewal_sees(&mut s, same_node), vec![]);
    assert!(s.leadership().is_leader());
}

#[test]
fn a_candidate_seen_on_anything_but_a_renewal_changes_nothing() {
    let mut s = LeaseState::new(config("me", rank(1, None)), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    // An acquire is never answered so; were it, it is no acquisition.
    s.handle_reply(
        ms(2),
        RequestId(1),
        Reply::CandidateSeen {
            candidate: candidate("b", rank(9, None)),
        },
    );
    assert!(!s.leadership().is_leader());
}

#[test]
fn announcements_order_as_ranks_byte_by_byte() {
    let ranks = [
        rank(0, Some("blue")),
        rank(0, Some("0.9")),
        rank(0, Some("1.0.0-rc.1")),
        rank(0, Some("1.0")),
        rank(0, Some("1.0.1")),
        rank(0, Some("1.10")),
        rank(1, None),
        rank(1, Some("2.0")),
        rank(300, None),
    ];
    let texts: Vec<String> = ranks
        .iter()
        .map(|r| candidate("n", r.clone()).announcement().unwrap())
        .collect();
    for pair in texts.windows(2) {
        assert!(pair[0].as_bytes() < pair[1].as_bytes(), "{pair:?}");
    }
    for (text, rank) in texts.iter().zip(&ranks) {
        let parsed = Candidate::parse(text).unwrap();
        assert_eq!(&parsed.rank, rank, "{text:?}");
        assert_eq!(parsed.holder.as_str(), "n");
    }
}

#[test]
fn hand_over_to_preferred_goes_to_the_last_candidate_read_whatever_its_rank() {
    // A lower-ranked candidate is not yielded to, but it is where "hand
    // over, then exit" sends the lease.
    let mut s = leading(rank(5, None));
    assert_eq!(renewal_sees(&mut s, candidate("b", rank(1, None))), vec![]);
    assert_eq!(s.preferred(), Some(&candidate("b", rank(1, None))));
    assert!(s.handle_hand_over_to_preferred(ms(2_600)));
    assert_eq!(drain(&mut s), yields());
    assert_eq!(s.successor(), Some(&HolderId::reserved_for("b").unwrap()));
}

#[test]
fn hand_over_to_preferred_without_a_live_candidate_releases() {
    let mut s = leading(rank(5, None));
    // The last renewal read no candidate: whatever an earlier one read is
    // forgotten.
    s.handle_reply(ms(2_503), RequestId(2), Reply::Accepted);
    assert_eq!(s.preferred(), None);
    assert!(s.handle_hand_over_to_preferred(ms(2_600)));
    let mut released = yields();
    released[2] = execute(3, Operation::Release { epoch: ONE });
    assert_eq!(drain(&mut s), released);
    assert_eq!(s.successor(), None);
}

#[test]
fn hand_over_to_preferred_skips_a_candidate_on_its_own_node() {
    let mut s = leading(rank(5, None));
    let same_node = Candidate {
        holder: HolderId::incarnation("me", 2).unwrap(),
        rank: rank(1, None),
    };
    renewal_sees(&mut s, same_node);
    assert!(s.handle_hand_over_to_preferred(ms(2_600)));
    let commands = drain(&mut s);
    assert_eq!(commands[2], execute(3, Operation::Release { epoch: ONE }));
}

#[test]
fn a_follower_has_nothing_to_hand_over() {
    let mut s = LeaseState::new(config("me", rank(1, None)), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    assert!(!s.handle_hand_over_to_preferred(ms(1)));
    assert_eq!(drain(&mut s), vec![]);
}
