//! A planned handover (DESIGN §3 "Planned handover") in `LeaseState`: exact
//! command sequences on hand-picked times, as `lease_state.rs` does for
//! the rest of DESIGN §4.

use std::time::Duration;

use picolease_core::sql::LeaseRow;
use picolease_core::{
    Command, Config, Demotion, Epoch, HolderId, Instant, Leadership, LeaseName, LeaseState,
    Operation, Reply, RequestId, Role,
};

fn ms(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000_000)
}

fn config() -> Config {
    let me = HolderId::new("me").unwrap();
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

fn b() -> HolderId {
    HolderId::reserved_for("b").unwrap()
}

fn follower(holder: Option<HolderId>, reason: Option<Demotion>) -> Command {
    Command::Publish(Leadership {
        role: Role::Follower,
        epoch: Some(Epoch::new(1)),
        holder,
        reason,
    })
}

/// The work stops, the follower is published with its reason.
fn handed_over() -> Vec<Command> {
    vec![
        Command::StopWork {
            epoch: Epoch::new(1),
            reason: Demotion::HandedOver,
        },
        follower(None, Some(Demotion::HandedOver)),
    ]
}

const ONE: Epoch = Epoch::new(1);

/// Leader at epoch 1 from an acquire sent at 0 ms, answered at 2 ms;
/// its first renewal is due at 2,500 ms.
fn leading() -> LeaseState {
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(2), RequestId(1), Reply::Acquired { epoch: ONE });
    drain(&mut s);
    assert!(s.leadership().is_leader());
    s
}

#[test]
fn a_leader_stops_its_work_then_reserves_the_row_and_follows() {
    let mut s = leading();
    assert!(s.handle_hand_over(ms(1_000), Some(b())));
    let mut expected = handed_over();
    expected.push(execute(2, Operation::HandOver { epoch: ONE }));
    assert_eq!(drain(&mut s), expected);
    // What the driver binds as the reservation, while it is in flight.
    assert_eq!(s.successor(), Some(&b()));
    s.handle_reply(ms(1_003), RequestId(2), Reply::Accepted);
    // The row now names the reservation (published, for the driver's
    // `handover` event); the node polls an interval after the send, by
    // which time the successor has it.
    assert_eq!(
        drain(&mut s),
        vec![follower(Some(b()), Some(Demotion::HandedOver))]
    );
    assert_eq!(s.successor(), None);
    assert_eq!(s.poll_timeout(), Some(ms(3_500)));
    // Handed to another node, it still answers a release notice: a
    // handover back to it must not wait for its poll (the reservation
    // keeps it out of the row meanwhile anyway).
    s.handle_release_notice(ms(1_010));
    assert_eq!(drain(&mut s), vec![execute(3, Operation::Acquire)]);
}

#[test]
fn without_a_successor_a_handover_is_a_release_and_the_node_stays() {
    let mut s = leading();
    assert!(s.handle_hand_over(ms(1_000), None));
    let mut expected = handed_over();
    expected.push(execute(2, Operation::Release { epoch: ONE }));
    assert_eq!(drain(&mut s), expected);
    s.handle_reply(ms(1_003), RequestId(2), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![]);
    assert!(!s.is_finished());
    assert_eq!(s.poll_timeout(), Some(ms(3_500)));
    // Its own release's notice (and any other) does not bring it back
    // before its poll: whoever was told takes the lease first.
    s.handle_release_notice(ms(1_004));
    s.handle_row_observed(
        ms(1_005),
        &LeaseRow {
            name: "l".into(),
            holder: None,
            epoch: ONE,
            expires_in_ms: Some(0),
        },
    );
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.poll_timeout(), Some(ms(3_500)));
    // After it, notices count again.
    s.handle_timeout(ms(3_500));
    assert_eq!(drain(&mut s), vec![execute(3, Operation::Acquire)]);
    s.handle_reply(
        ms(3_502),
        RequestId(3),
        Reply::Held {
            holder: Some(HolderId::new("other").unwrap()),
            epoch: Epoch::new(2),
            expires_in: Duration::from_secs(9),
        },
    );
    drain(&mut s);
    s.handle_release_notice(ms(3_600));
    assert_eq!(drain(&mut s), vec![execute(4, Operation::Acquire)]);
}

#[test]
fn a_follower_has_nothing_to_hand_over() {
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    assert!(!s.handle_hand_over(ms(1), Some(b())));
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.successor(), None);
}

#[test]
fn an_operators_request_on_a_renewal_hands_over_after_accepting_it() {
    for (to, operation) in [
        (Some(b()), Operation::HandOver { epoch: ONE }),
        (None, Operation::Release { epoch: ONE }),
    ] {
        let mut s = leading();
        s.handle_timeout(ms(2_500));
        assert_eq!(
            drain(&mut s),
            vec![execute(2, Operation::Renew { epoch: ONE })]
        );
        s.handle_reply(
            ms(2_510),
            RequestId(2),
            Reply::HandOverAsked { to: to.clone() },
        );
        let mut expected = handed_over();
        expected.push(execute(3, operation));
        assert_eq!(drain(&mut s), expected, "{to:?}");
        // The hand-over may take until the renewed term's deadline.
        assert_eq!(s.poll_timeout(), Some(ms(12_399)));
    }
}

#[test]
fn a_renewal_in_flight_goes_first_and_a_shutdown_meanwhile_still_hands_over() {
    let mut s = leading();
    s.handle_timeout(ms(2_500));
    drain(&mut s);
    assert!(s.handle_hand_over(ms(2_501), Some(b())));
    let expected = handed_over();
    assert_eq!(drain(&mut s), expected);
    s.handle_shutdown(ms(2_505));
    assert_eq!(drain(&mut s), vec![Command::WatchChanges(false)]);
    s.handle_reply(ms(2_510), RequestId(2), Reply::Accepted);
    assert_eq!(
        drain(&mut s),
        vec![execute(3, Operation::HandOver { epoch: ONE })]
    );
    s.handle_reply(ms(2_512), RequestId(3), Reply::Accepted);
    assert_eq!(
        drain(&mut s),
        vec![
            follower(Some(b()), Some(Demotion::HandedOver)),
            Command::Finished
        ]
    );
}

#[test]
fn a_handover_that_fails_is_not_retried_and_the_node_polls_after_an_interval() {
    let mut s = leading();
    s.handle_hand_over(ms(1_000), Some(b()));
    drain(&mut s);
    s.handle_reply(
        ms(1_010),
        RequestId(2),
        Reply::Failed(picolease_core::Failure::Transient),
    );
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.successor(), None);
    assert_eq!(s.poll_timeout(), Some(ms(3_500)));
}

#[test]
fn a_row_reserved_for_this_node_is_a_release_notice_and_one_for_another_is_not() {
    let row = |holder: &str| LeaseRow {
        name: "l".into(),
        holder: Some(holder.into()),
        epoch: ONE,
        expires_in_ms: Some(4_000),
    };
    let idle_follower = || {
        let mut s = LeaseState::new(config(), ms(0)).unwrap();
        s.handle_timeout(ms(0));
        drain(&mut s);
        let held = Reply::Held {
            holder: Some(HolderId::new("other").unwrap()),
            epoch: ONE,
            expires_in: Duration::from_secs(9),
        };
        s.handle_reply(ms(1), RequestId(1), held);
        drain(&mut s);
        s
    };
    // "me" is its own node: its reservation is "me#".
    let mut s = idle_follower();
    s.handle_row_observed(ms(100), &row("me#"));
    assert_eq!(drain(&mut s), vec![execute(2, Operation::Acquire)]);
    let mut s = idle_follower();
    s.handle_row_observed(ms(100), &row("b#"));
    assert_eq!(drain(&mut s), vec![]);
}

#[test]
fn reservations_name_a_node_and_no_holder_id_can_look_like_one() {
    let cli = HolderId::incarnation("web-2", 0xa1b2c3).unwrap();
    assert_eq!(cli.as_str(), "web-2#a1b2c3");
    assert_eq!(cli.reservation(), "web-2#");
    assert_eq!(HolderId::reserved_for("web-2").unwrap().as_str(), "web-2#");
    assert_eq!(
        HolderId::reserved_for("web-2").unwrap().reserved_node(),
        Some("web-2")
    );
    // A library id without '#' is its own node.
    assert_eq!(
        HolderId::new("host-1-abc").unwrap().reservation(),
        "host-1-abc#"
    );
    let err = HolderId::new("web-2#").unwrap_err().to_string();
    assert!(err.contains("ends with '#'"), "{err}");
    assert!(HolderId::reserved_for("").is_err());
    assert!(HolderId::reserved_for(&"x".repeat(255)).is_err());
    assert!(HolderId::reserved_for(&"x".repeat(254)).is_ok());
}
