//! `LeaseSet` as a specification: exact command sequences for each rule
//! of DESIGN §9, on hand-picked times, as `lease_state.rs` is for a lone
//! lease. One node, leases `a` and `b`, ttl 10 s (interval and request
//! timeout 2.5 s, drift 100 ms), no jitter.

use std::time::Duration;

use picolease_core::set::member_row_name;
use picolease_core::sql::{LeaseRow, MEMBER_PREFIX};
use picolease_core::{
    Batch, BatchKind, BatchReply, Demotion, Epoch, Failure, HolderId, Instant, Leadership,
    LeaseName, LeaseSet, Rank, Reply, RequestId, Role, SetCommand, SetConfig,
};

mod exact;

use exact::{ended, leading, me, member, ms, name, successor, TTL, VALIDITY_MS};

/// The shape that renews every held row each interval (DESIGN §9), for
/// contenders that turn renewal by liveness off; the default shape's
/// vectors are `lease_set_liveness.rs`'s.
fn template() -> SetConfig {
    let mut c = SetConfig::with_ttl(me(), TTL);
    c.jitter = Duration::ZERO;
    c.by_liveness = false;
    c
}

fn set() -> LeaseSet {
    LeaseSet::new(template(), vec![name("a"), name("b")], ms(0)).unwrap()
}

fn drain(s: &mut LeaseSet) -> Vec<SetCommand> {
    std::iter::from_fn(|| s.poll_command()).collect()
}

fn execute(id: u64, kind: BatchKind, items: &[(&str, Option<u64>)], end_by: u64) -> SetCommand {
    SetCommand::Execute {
        request: RequestId(id),
        batch: Batch {
            kind,
            items: items
                .iter()
                .map(|&(n, e)| (name(n), e.map(Epoch::new)))
                .collect(),
        },
        end_by: ms(end_by),
    }
}

fn acquired(n: &str, epoch: u64) -> (String, Reply) {
    (
        n.to_string(),
        Reply::Acquired {
            epoch: Epoch::new(epoch),
        },
    )
}

fn leader(lease: &str, epoch: u64) -> Vec<SetCommand> {
    vec![
        SetCommand::Publish {
            lease: name(lease),
            leadership: leading(epoch),
        },
        SetCommand::StartWork {
            lease: name(lease),
            epoch: Epoch::new(epoch),
        },
    ]
}

fn demoted(lease: &str, epoch: u64, reason: Demotion) -> Vec<SetCommand> {
    vec![
        SetCommand::StopWork {
            lease: name(lease),
            epoch: Epoch::new(epoch),
            reason,
        },
        SetCommand::Publish {
            lease: name(lease),
            leadership: ended(epoch, reason, None),
        },
    ]
}

/// A set that surveyed twice (alone), announced itself right after its
/// first survey (1 ms, renewed at 2.5 s) and holds `a` at epoch 1 and `b`
/// at epoch 4 from the acquire batch sent at 2502 ms (answered at
/// 2503 ms).
fn holding() -> LeaseSet {
    let mut s = set();
    s.handle_timeout(ms(0));
    assert_eq!(
        drain(&mut s),
        vec![execute(1, BatchKind::Survey, &[], 2_500)]
    );
    // The membership row's acquire, issued at the start, goes as soon as
    // the first survey has read the table, not an interval later.
    s.handle_reply(ms(1), RequestId(1), BatchReply::Survey(vec![]));
    assert_eq!(
        drain(&mut s),
        vec![execute(2, BatchKind::Acquire, &[(&member(), None)], 2_501)]
    );
    s.handle_reply(
        ms(2),
        RequestId(2),
        BatchReply::Acquired(vec![acquired(&member(), 1)]),
    );
    assert_eq!(drain(&mut s), vec![]);
    // Its term counts from the acquire's issue (0 ms): renewed at 2.5 s,
    // before the survey due then.
    s.handle_timeout(ms(2_500));
    let renew = drain(&mut s);
    assert!(
        matches!(&renew[..], [SetCommand::Execute { request: RequestId(3), batch, .. }]
            if batch.kind == BatchKind::Renew && batch.items == [(name(&member()), Some(Epoch::new(1)))]),
        "{renew:?}"
    );
    s.handle_reply(ms(2_501), RequestId(3), BatchReply::Matched(vec![member()]));
    assert_eq!(
        drain(&mut s),
        vec![execute(4, BatchKind::Survey, &[], 5_001)]
    );
    s.handle_reply(ms(2_502), RequestId(4), BatchReply::Survey(vec![]));
    assert_eq!(
        drain(&mut s),
        vec![execute(
            5,
            BatchKind::Acquire,
            &[("a", None), ("b", None)],
            5_002
        )]
    );
    s.handle_reply(
        ms(2_503),
        RequestId(5),
        BatchReply::Acquired(vec![acquired("a", 1), acquired("b", 4)]),
    );
    let mut expected = leader("a", 1);
    expected.extend(leader("b", 4));
    // Leading, it watches the rows: one taken away is heard at once.
    expected.push(SetCommand::WatchChanges(true));
    assert_eq!(drain(&mut s), expected);
    assert_eq!(s.deadline("a"), Some(ms(2_502 + VALIDITY_MS)));
    s
}

#[test]
fn a_set_surveys_announces_itself_and_takes_its_share_from_the_second_survey() {
    let s = holding();
    assert_eq!(s.target(ms(2_503)), Some(2), "alone: the whole set");
    assert_eq!(
        s.held()
            .map(|(n, e)| (n.as_str(), e.get()))
            .collect::<Vec<_>>(),
        vec![("a", 1), ("b", 4)]
    );
    assert_eq!(s.members(ms(2_503)), vec![me()]);
    assert_eq!(s.poll_timeout(), Some(ms(5_000)));
}

#[test]
fn held_leases_renew_in_one_batch_with_the_membership_row() {
    let mut s = holding();
    // The membership row is due at 5001 ms, the leases at 5002 ms: one
    // batch at the first, the others brought forward (half an interval).
    s.handle_timeout(ms(5_000));
    assert_eq!(
        drain(&mut s),
        vec![execute(
            6,
            BatchKind::Renew,
            &[("a", Some(1)), ("b", Some(4)), (&member(), Some(1))],
            7_500
        )]
    );
    s.handle_reply(
        ms(5_002),
        RequestId(6),
        BatchReply::Matched(vec!["a".into(), "b".into(), member()]),
    );
    // Renewed: nothing to tell; the survey due since 5001 ms (an interval
    // after the last one's send) goes out.
    assert_eq!(
        drain(&mut s),
        vec![execute(7, BatchKind::Survey, &[], 7_502)]
    );
    // Each lease's deadline counts from the batch's send.
    assert_eq!(s.deadline("a"), Some(ms(5_000 + VALIDITY_MS)));
    assert_eq!(s.deadline("b"), Some(ms(5_000 + VALIDITY_MS)));
}

#[test]
fn a_lease_missing_from_a_renew_result_alone_is_lost() {
    let mut s = holding();
    s.handle_timeout(ms(5_000));
    drain(&mut s);
    s.handle_reply(
        ms(5_002),
        RequestId(6),
        BatchReply::Matched(vec!["a".into(), member()]),
    );
    // Lost: its work is told to stop; the survey due since 5001 ms goes
    // out, and b is not tried again while its work runs.
    let mut expected = demoted("b", 4, Demotion::Lost);
    expected.push(execute(7, BatchKind::Survey, &[], 7_502));
    assert_eq!(drain(&mut s), expected);
    assert_eq!(s.deadline("a"), Some(ms(5_000 + VALIDITY_MS)));
    assert_eq!(s.deadline("b"), None);
    s.handle_reply(ms(5_003), RequestId(7), BatchReply::Survey(vec![]));
    assert_eq!(drain(&mut s), vec![], "b's work has not stopped");
    // Once it has, b is tried again at once (the row may be free), as a
    // lone lease is: its next term starts after the last one's work.
    s.handle_work_stopped(ms(5_004), "b");
    assert_eq!(
        drain(&mut s),
        vec![execute(8, BatchKind::Acquire, &[("b", None)], 7_504)]
    );
}

#[test]
fn a_batch_past_its_timeout_is_cancelled_and_its_leases_keep_their_deadlines() {
    let mut s = holding();
    s.handle_timeout(ms(5_000));
    drain(&mut s);
    // No answer by the give-up, a request timeout after the send.
    assert_eq!(s.poll_timeout(), Some(ms(7_500)));
    s.handle_timeout(ms(7_500));
    let commands = drain(&mut s);
    assert_eq!(
        commands[0],
        SetCommand::Cancel {
            request: RequestId(6)
        }
    );
    // Nothing demoted: the terms still run to their deadlines, and the
    // renewal is tried again in a new batch.
    assert!(
        commands[1..].iter().all(
            |c| matches!(c, SetCommand::Execute { batch, .. } if batch.kind == BatchKind::Renew)
        ),
        "{commands:?}"
    );
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert_eq!(s.deadline("a"), Some(ms(2_502 + VALIDITY_MS)));
    // A late answer to the abandoned batch is ignored.
    s.handle_reply(
        ms(7_600),
        RequestId(6),
        BatchReply::Matched(vec!["a".into(), "b".into(), member()]),
    );
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.deadline("a"), Some(ms(2_502 + VALIDITY_MS)));
}

#[test]
fn a_batch_ends_by_the_earliest_deadline_of_a_held_lease() {
    let mut s = holding();
    // Every renewal fails, until a held row's deadline comes before a
    // batch's give-up: the batch must end by the earliest one, the
    // membership row's (its acquire was sent at 2500 ms, the leases' at
    // 2502 ms).
    let deadline = 2_500 + VALIDITY_MS;
    let mut last_end_by = None;
    let mut now = 5_000;
    s.handle_timeout(ms(now));
    loop {
        let mut pending = None;
        for command in drain(&mut s) {
            if let SetCommand::Execute {
                request, end_by, ..
            } = command
            {
                // Exactly the earlier of the give-up and the earliest
                // deadline of a row still held.
                let earliest = ["a", "b", member().as_str()]
                    .iter()
                    .filter_map(|n| s.deadline(n))
                    .fold(ms(now + 2_500), Instant::min);
                assert_eq!(end_by, earliest, "sent at {now} ms");
                if now < deadline {
                    last_end_by = Some(end_by);
                }
                pending = Some(request);
            }
        }
        if now >= deadline {
            break;
        }
        match pending {
            // Each batch fails a millisecond after its send.
            Some(request) => {
                now += 1;
                s.handle_reply(ms(now), request, BatchReply::Failed(Failure::Transient));
            }
            None => {
                let wake = s.poll_timeout().expect("running");
                now = wake.as_nanos().div_ceil(1_000_000).max(now + 1);
                s.handle_timeout(ms(now));
            }
        }
    }
    assert_eq!(last_end_by, Some(ms(deadline)), "cut to the deadline");
}

#[test]
fn a_stepped_database_clock_demotes_every_held_lease_with_clock() {
    let mut s = holding();
    // Readings that agree with the local clock: nothing happens.
    assert!(!s.handle_db_clock(ms(3_000), ms(3_000), 1_000_000));
    assert!(!s.handle_db_clock(ms(4_000), ms(4_000), 1_001_000));
    assert_eq!(drain(&mut s), vec![]);
    // The wall clock jumps a minute ahead between two readings.
    assert!(s.handle_db_clock(ms(4_500), ms(4_500), 1_061_500));
    let commands = drain(&mut s);
    let mut expected = demoted("a", 1, Demotion::Clock);
    expected.extend(demoted("b", 4, Demotion::Clock));
    assert_eq!(commands[..4], expected[..], "{commands:?}");
    // The membership row competes again at once (its term was measured
    // on the same clock; it is not a lease and is not published, and has
    // no work); the leases once their work has stopped, in one batch.
    // Leading nothing, with the leases' work still to stop (nothing to
    // try for yet), it watches no more.
    assert_eq!(
        commands[4..],
        [
            execute(6, BatchKind::Acquire, &[(&member(), None)], 7_000),
            SetCommand::WatchChanges(false)
        ]
    );
    s.handle_work_stopped(ms(4_501), "a");
    s.handle_work_stopped(ms(4_501), "b");
    s.handle_reply(ms(4_502), RequestId(6), BatchReply::Acquired(vec![]));
    let commands = drain(&mut s);
    assert!(
        matches!(
            &commands[..],
            [SetCommand::Execute { batch, .. }]
                if batch.kind == BatchKind::Acquire
                    && batch.items == [(name("a"), None), (name("b"), None)]
        ),
        "{commands:?}"
    );
    assert!(s.held().next().is_none());
}

#[test]
fn shutdown_stops_every_work_and_releases_each_lease_once_its_work_has_stopped() {
    let mut s = holding();
    s.handle_shutdown(ms(3_000));
    let mut expected = demoted("a", 1, Demotion::Released);
    expected.extend(demoted("b", 4, Demotion::Released));
    // The membership row has no work: it is released at once, so the
    // other nodes plan without this one.
    expected.push(execute(
        6,
        BatchKind::Release,
        &[(&member(), Some(1))],
        5_500,
    ));
    // Shutting down, it watches no more.
    expected.push(SetCommand::WatchChanges(false));
    assert_eq!(drain(&mut s), expected);
    s.handle_reply(ms(3_001), RequestId(6), BatchReply::Matched(vec![member()]));
    assert_eq!(drain(&mut s), vec![]);
    // A lease's release waits for its work, and goes as soon as that
    // has stopped.
    s.handle_work_stopped(ms(3_002), "a");
    assert_eq!(
        drain(&mut s),
        vec![execute(7, BatchKind::Release, &[("a", Some(1))], 5_502)]
    );
    s.handle_work_stopped(ms(3_003), "b");
    assert_eq!(drain(&mut s), vec![], "one batch at a time");
    s.handle_reply(
        ms(3_004),
        RequestId(7),
        BatchReply::Matched(vec!["a".into()]),
    );
    assert_eq!(
        drain(&mut s),
        vec![execute(8, BatchKind::Release, &[("b", Some(4))], 5_504)]
    );
    s.handle_reply(
        ms(3_005),
        RequestId(8),
        BatchReply::Matched(vec!["b".into()]),
    );
    assert_eq!(drain(&mut s), vec![SetCommand::Finished]);
    assert!(s.is_finished());
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn a_node_over_its_share_gives_the_surplus_up_without_stealing() {
    // A second member appears in the survey: the share is one each.
    let (mut s, commands) = holding_then_survey(vec![member_row("other", 0)]);
    assert_eq!(s.target(ms(5_003)), Some(1));
    // Exactly one lease is given up (stop first; its release waits), the
    // one this node prefers least; the other is kept.
    assert_eq!(commands.len(), 2, "{commands:?}");
    let SetCommand::StopWork { lease, reason, .. } = &commands[0] else {
        panic!("{commands:?}");
    };
    assert_eq!(*reason, Demotion::Released);
    let given = lease.as_str().to_string();
    let kept = if given == "a" { "b" } else { "a" };
    assert!(s.leadership(kept).unwrap().is_leader());
    s.handle_work_stopped(ms(5_004), &given);
    let release = drain(&mut s);
    let SetCommand::Execute { batch, .. } = &release[0] else {
        panic!("{release:?}");
    };
    assert_eq!(batch.kind, BatchKind::Release);
    assert_eq!(batch.items.len(), 1);
    assert_eq!(batch.items[0].0.as_str(), given);
}

#[test]
fn renewals_go_in_batches_of_max_batch_leases_back_to_back_acquires_in_one() {
    use picolease_core::MAX_BATCH;
    let names: Vec<LeaseName> = (0..2_500).map(|i| name(&format!("l{i:04}"))).collect();
    let mut s = LeaseSet::new(template(), names, ms(0)).unwrap();
    // Alone: two surveys, the membership row, then every lease, in one
    // acquire (nothing this node holds waits on it).
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(1), RequestId(1), BatchReply::Survey(vec![]));
    drain(&mut s);
    s.handle_reply(
        ms(2),
        RequestId(2),
        BatchReply::Acquired(vec![acquired(&member(), 1)]),
    );
    s.handle_timeout(ms(2_500));
    drain(&mut s);
    s.handle_reply(ms(2_501), RequestId(3), BatchReply::Matched(vec![member()]));
    drain(&mut s);
    s.handle_reply(ms(2_502), RequestId(4), BatchReply::Survey(vec![]));
    let commands = drain(&mut s);
    let [SetCommand::Execute { batch, .. }] = &commands[..] else {
        panic!("{commands:?}");
    };
    assert_eq!((batch.kind, batch.items.len()), (BatchKind::Acquire, 2_500));
    let outcomes = batch
        .items
        .iter()
        .map(|(n, _)| acquired(n.as_str(), 1))
        .collect();
    s.handle_reply(ms(2_503), RequestId(5), BatchReply::Acquired(outcomes));
    drain(&mut s);
    assert_eq!(s.held().count(), 2_500);
    // The renewals: MAX_BATCH leases a batch, in name order, back to back
    // (each sent as the last is answered); the membership row rides along
    // in the first.
    s.handle_timeout(ms(5_000));
    let mut sizes = Vec::new();
    let mut first_names = Vec::new();
    let mut now = 5_000;
    for request in 6.. {
        let commands = drain(&mut s);
        let Some(batch) = commands.iter().find_map(|c| match c {
            SetCommand::Execute { batch, .. } if batch.kind == BatchKind::Renew => Some(batch),
            _ => None,
        }) else {
            break;
        };
        let leases: Vec<&str> = batch
            .items
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| *n != member())
            .collect();
        sizes.push(leases.len());
        first_names.push(leases[0].to_string());
        if request == 6 {
            assert!(batch.items.iter().any(|(n, _)| n.as_str() == member()));
        }
        let matched = batch
            .items
            .iter()
            .map(|(n, _)| n.as_str().to_string())
            .collect();
        now += 1;
        s.handle_reply(ms(now), RequestId(request), BatchReply::Matched(matched));
    }
    assert_eq!(sizes, vec![MAX_BATCH, MAX_BATCH, 500]);
    assert_eq!(first_names, vec!["l0000", "l1000", "l2000"]);
    assert_eq!(s.held().count(), 2_500);
}

/// A set watches for other connections' commits while it is short of its
/// share with nothing left to try (a lease it wants is held by another
/// node, unexpired) or leads a lease (a forced release or an adoption may
/// take it away, DESIGN §4b): `WatchChanges(true)` after the survey that
/// shows a wanted lease held elsewhere, kept while it leads `a` after
/// trying for `b`, `WatchChanges(false)` when it shuts down.
#[test]
fn a_set_watches_while_a_lease_it_wants_is_held_elsewhere_or_it_leads_one() {
    let mut s = set();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(1), RequestId(1), BatchReply::Survey(vec![]));
    drain(&mut s);
    s.handle_reply(
        ms(2),
        RequestId(2),
        BatchReply::Acquired(vec![acquired(&member(), 1)]),
    );
    assert_eq!(drain(&mut s), vec![], "no share yet: nothing to watch for");
    s.handle_timeout(ms(2_500));
    drain(&mut s);
    s.handle_reply(ms(2_501), RequestId(3), BatchReply::Matched(vec![member()]));
    drain(&mut s);
    // `b` is held by a node that is not a member (a lone lease's holder),
    // for 3 s more: this node, alone, wants both but can try for `a` only.
    let b = LeaseRow {
        name: "b".to_string(),
        holder: Some("lone".to_string()),
        epoch: Epoch::new(7),
        expires_in_ms: Some(3_000),
    };
    s.handle_reply(ms(2_502), RequestId(4), BatchReply::Survey(vec![b]));
    assert_eq!(s.target(ms(2_502)), Some(2));
    assert_eq!(
        drain(&mut s),
        vec![
            SetCommand::Publish {
                lease: name("b"),
                leadership: Leadership {
                    role: Role::Follower,
                    epoch: Some(Epoch::new(7)),
                    holder: Some(HolderId::new("lone").unwrap()),
                    reason: None,
                },
            },
            execute(5, BatchKind::Acquire, &[("a", None)], 5_002),
            SetCommand::WatchChanges(true),
        ]
    );
    s.handle_reply(
        ms(2_503),
        RequestId(5),
        BatchReply::Acquired(vec![acquired("a", 1)]),
    );
    // Leading `a` changes nothing about `b`: still watching, not told again.
    assert_eq!(drain(&mut s), leader("a", 1));
    // At `b`'s expiry (seen at 2,502 ms + 3 s) the set tries for it, and
    // goes on watching: it leads `a`.
    s.handle_timeout(ms(5_502));
    let commands = drain(&mut s);
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, SetCommand::WatchChanges(_))),
        "{commands:?}"
    );
    // Renewals go first; `b`'s acquire follows the renewal's answer.
    assert!(
        matches!(&commands[0], SetCommand::Execute { request: RequestId(6), batch, .. }
            if batch.kind == BatchKind::Renew),
        "{commands:?}"
    );
    s.handle_reply(
        ms(5_503),
        RequestId(6),
        BatchReply::Matched(vec!["a".into(), member()]),
    );
    assert_eq!(
        drain(&mut s),
        vec![execute(7, BatchKind::Acquire, &[("b", None)], 8_003)]
    );
    s.handle_shutdown(ms(5_504));
    let commands = drain(&mut s);
    assert_eq!(
        commands.last(),
        Some(&SetCommand::WatchChanges(false)),
        "a set shutting down watches no more: {commands:?}"
    );
}

/// The publication of a lease handed over to [`successor`] at `epoch`.
fn handed_over(lease: &str, epoch: u64) -> SetCommand {
    SetCommand::Publish {
        lease: name(lease),
        leadership: ended(epoch, Demotion::HandedOver, Some(successor())),
    }
}

#[test]
fn a_hand_over_stops_the_work_then_reserves_the_row_with_its_own_statement() {
    let mut s = holding();
    assert!(s.handle_hand_over(ms(3_000), "a", Some(successor())));
    // The work stops first; nothing is written while it runs. (It
    // watches already: it leads `b`.)
    let expected = demoted("a", 1, Demotion::HandedOver);
    assert_eq!(drain(&mut s), expected, "stop, then the follower");
    assert_eq!(s.deadline("a"), None);
    s.handle_work_stopped(ms(3_010), "a");
    // One lease, the lone lease's hand-over statement: the driver binds
    // the reservation the set names.
    assert_eq!(
        drain(&mut s),
        vec![execute(6, BatchKind::HandOver, &[("a", Some(1))], 5_510)]
    );
    assert_eq!(
        s.hand_over_in_flight(),
        Some((&name("a"), Some(&successor())))
    );
    s.handle_row_reply(ms(3_011), RequestId(6), Reply::Accepted);
    // Handed over: published once more naming the reservation (`run`'s
    // `handover` event); b is untouched.
    assert_eq!(drain(&mut s), vec![handed_over("a", 1)]);
    assert_eq!(s.hand_over_in_flight(), None);
    assert_eq!(
        s.held()
            .map(|(n, e)| (n.as_str(), e.get()))
            .collect::<Vec<_>>(),
        vec![("b", 4)]
    );
    // The node does not reach for `a` while the reservation lasts (2
    // intervals): at 5 s only the renewal of b and the membership go.
    s.handle_timeout(ms(5_000));
    assert_eq!(
        drain(&mut s),
        vec![execute(
            7,
            BatchKind::Renew,
            &[("b", Some(4)), (&member(), Some(1))],
            7_500
        )]
    );
}

#[test]
fn a_hand_over_of_a_lease_not_held_or_the_membership_row_is_refused() {
    let mut s = holding();
    assert!(!s.handle_hand_over(ms(3_000), "zzz", Some(successor())));
    assert!(!s.handle_hand_over(ms(3_000), &member(), Some(successor())));
    assert_eq!(drain(&mut s), vec![]);
    // A refused statement (the term had ended meanwhile) ends the
    // hand-over all the same, without naming a successor.
    assert!(s.handle_hand_over(ms(3_000), "a", Some(successor())));
    drain(&mut s);
    s.handle_work_stopped(ms(3_010), "a");
    drain(&mut s);
    s.handle_row_reply(ms(3_011), RequestId(99), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![], "not the statement in flight");
    s.handle_row_reply(ms(3_011), RequestId(6), Reply::Rejected);
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.hand_over_in_flight(), None);
    assert_eq!(s.leadership("a").map(|l| l.role), Some(Role::Follower));
}

#[test]
fn an_operators_request_read_by_the_renewal_hands_that_lease_over() {
    let mut s = holding();
    s.handle_timeout(ms(5_000));
    drain(&mut s);
    // The renewal read a request for b (to n2) and none for a.
    s.handle_reply(
        ms(5_002),
        RequestId(6),
        BatchReply::Renewed {
            renewed: vec!["a".into(), "b".into(), member()],
            asked: vec![("b".into(), Some(successor()))],
        },
    );
    // Both renewed; b's work stops for the hand-over. (The survey due
    // since 5001 ms goes first: nothing else may be sent until b's work
    // has stopped.)
    let mut expected = demoted("b", 4, Demotion::HandedOver);
    expected.push(execute(7, BatchKind::Survey, &[], 7_502));
    assert_eq!(drain(&mut s), expected);
    assert_eq!(s.deadline("a"), Some(ms(5_000 + VALIDITY_MS)));
    s.handle_reply(ms(5_003), RequestId(7), BatchReply::Survey(vec![]));
    drain(&mut s);
    s.handle_work_stopped(ms(5_004), "b");
    assert_eq!(
        drain(&mut s),
        vec![execute(8, BatchKind::HandOver, &[("b", Some(4))], 7_504)]
    );
    s.handle_row_reply(ms(5_005), RequestId(8), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![handed_over("b", 4)]);
}

#[test]
fn a_row_the_survey_reads_reserved_for_this_node_is_taken_whatever_the_share() {
    // Three leases, two other live nodes: this node's share is one.
    let mut s = LeaseSet::new(template(), vec![name("a"), name("b"), name("c")], ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(1), RequestId(1), BatchReply::Survey(vec![]));
    drain(&mut s);
    s.handle_reply(
        ms(2),
        RequestId(2),
        BatchReply::Acquired(vec![acquired(&member(), 1)]),
    );
    drain(&mut s);
    let other = |n: &str| LeaseRow {
        name: format!("{MEMBER_PREFIX}{n}"),
        holder: Some(n.to_string()),
        epoch: Epoch::new(1),
        expires_in_ms: Some(9_000),
    };
    s.handle_timeout(ms(2_500));
    drain(&mut s);
    s.handle_reply(ms(2_501), RequestId(3), BatchReply::Matched(vec![member()]));
    drain(&mut s);
    s.handle_reply(
        ms(2_502),
        RequestId(4),
        BatchReply::Survey(vec![other("x"), other("y")]),
    );
    assert_eq!(s.target(ms(2_502)), Some(1));
    let acquire = drain(&mut s);
    let [SetCommand::Execute { batch, .. }] = &acquire[..] else {
        panic!("{acquire:?}");
    };
    assert_eq!(batch.kind, BatchKind::Acquire);
    assert_eq!(batch.items.len(), 1, "one lease: the share");
    let (first, _) = batch.items[0].clone();
    s.handle_reply(
        ms(2_503),
        RequestId(5),
        BatchReply::Acquired(vec![acquired(first.as_str(), 1)]),
    );
    drain(&mut s);
    // The next survey reads another lease reserved for this node ("me#"):
    // taken at once, although the node is at its share.
    let offered = ["a", "b", "c"]
        .into_iter()
        .find(|n| *n != first.as_str())
        .unwrap();
    s.handle_timeout(ms(5_001));
    let renew = drain(&mut s);
    assert!(
        matches!(&renew[..], [SetCommand::Execute { request: RequestId(6), batch, .. }] if batch.kind == BatchKind::Renew),
        "{renew:?}"
    );
    s.handle_reply(
        ms(5_001),
        RequestId(6),
        BatchReply::Matched(vec![first.as_str().to_string(), member()]),
    );
    let survey = drain(&mut s);
    assert!(
        matches!(&survey[..], [SetCommand::Execute { batch, .. }] if batch.kind == BatchKind::Survey),
        "{survey:?}"
    );
    let id = RequestId(7);
    s.handle_reply(
        ms(5_002),
        id,
        BatchReply::Survey(vec![
            other("x"),
            other("y"),
            LeaseRow {
                name: offered.to_string(),
                holder: Some("me#".into()),
                epoch: Epoch::new(7),
                expires_in_ms: Some(4_000),
            },
        ]),
    );
    let take = drain(&mut s);
    assert!(
        matches!(&take[..], [SetCommand::Execute { batch, .. }]
            if batch.kind == BatchKind::Acquire && batch.items == [(name(offered), None)]),
        "{take:?}"
    );
}

#[test]
fn leaving_hands_each_held_lease_to_the_member_that_ranks_first_then_finishes() {
    // Another live member, x, appears in the survey after the renewal.
    // Two members, two leases: this node gives one up for the share.
    let (mut s, surplus) = holding_then_survey(vec![member_row("x", 0)]);
    let given_up: Vec<&LeaseName> = surplus
        .iter()
        .filter_map(|c| match c {
            SetCommand::StopWork { lease, reason, .. } => {
                assert_eq!(*reason, Demotion::Released);
                Some(lease)
            }
            _ => None,
        })
        .collect();
    assert_eq!(given_up.len(), 1, "{surplus:?}");
    let kept = if given_up[0].as_str() == "a" {
        "b"
    } else {
        "a"
    };
    let kept_epoch = if kept == "a" { 1 } else { 4 };
    // Leaving: the lease still held goes to x, the only other member; the
    // one on its way out is left to its release.
    assert_eq!(s.handle_leave(ms(5_003)), 1);
    let leave = drain(&mut s);
    assert_eq!(
        leave[..2],
        demoted(kept, kept_epoch, Demotion::HandedOver)[..],
        "{leave:?}"
    );
    assert!(s.leadership(kept).is_some_and(|l| !l.is_leader()));
    // Nothing is acquired while leaving; the works stop, then the
    // statements go: the hand-over with its reservation for x.
    // (The membership row's release went at once.)
    let mut sent = leave[2..].to_vec();
    s.handle_work_stopped(ms(5_004), given_up[0].as_str());
    s.handle_work_stopped(ms(5_004), kept);
    sent.extend(drain(&mut s));
    let mut finished = false;
    let mut handed_to = None;
    for _ in 0..8 {
        for command in std::mem::take(&mut sent) {
            let SetCommand::Execute { request, batch, .. } = command else {
                finished |= command == SetCommand::Finished;
                continue;
            };
            assert_ne!(batch.kind, BatchKind::Acquire, "no acquire while leaving");
            let names: Vec<String> = batch
                .items
                .iter()
                .map(|(n, _)| n.as_str().to_string())
                .collect();
            if batch.kind == BatchKind::HandOver {
                handed_to = s
                    .hand_over_in_flight()
                    .map(|(l, to)| (l.clone(), to.cloned()));
                s.handle_row_reply(ms(5_005), request, Reply::Accepted);
            } else {
                s.handle_reply(ms(5_005), request, BatchReply::Matched(names));
            }
            sent.extend(drain(&mut s));
        }
    }
    assert_eq!(
        handed_to,
        Some((name(kept), Some(HolderId::reserved_for("x").unwrap())))
    );
    assert!(
        finished,
        "the set finishes once every statement is answered"
    );
    assert!(s.is_finished());
}

/// A live membership row of `holder` with priority `priority` (DESIGN §9
/// "Preferred members": the rank rides in the row's name).
fn member_row(holder: &str, priority: u32) -> LeaseRow {
    let rank = Rank::new(priority, None).unwrap();
    LeaseRow {
        name: member_row_name(&HolderId::new(holder).unwrap(), &rank).unwrap(),
        holder: Some(holder.into()),
        epoch: Epoch::new(1),
        expires_in_ms: Some(9_000),
    }
}

/// [`holding`], then the survey after the renewal at 5 s reads `rows`.
fn holding_then_survey(rows: Vec<LeaseRow>) -> (LeaseSet, Vec<SetCommand>) {
    let mut s = holding();
    s.handle_timeout(ms(5_000));
    drain(&mut s);
    s.handle_reply(
        ms(5_001),
        RequestId(6),
        BatchReply::Matched(vec!["a".into(), "b".into(), member()]),
    );
    assert_eq!(
        drain(&mut s),
        vec![execute(7, BatchKind::Survey, &[], 7_501)]
    );
    s.handle_reply(ms(5_002), RequestId(7), BatchReply::Survey(rows));
    let commands = drain(&mut s);
    (s, commands)
}

/// Answers every statement `sent` carries (and those they lead to) as
/// done, confirming each work stop; returns the hand-overs run, in
/// order, as (lease, reservation).
fn answer_all(s: &mut LeaseSet, mut sent: Vec<SetCommand>) -> Vec<(String, Option<HolderId>)> {
    let mut handed = Vec::new();
    for _ in 0..16 {
        for command in std::mem::take(&mut sent) {
            match command {
                SetCommand::StopWork { lease, .. } => {
                    s.handle_work_stopped(ms(5_010), lease.as_str());
                }
                SetCommand::Execute { request, batch, .. } => {
                    assert_ne!(batch.kind, BatchKind::Acquire, "{batch:?}");
                    if batch.kind == BatchKind::HandOver {
                        let (l, to) = s.hand_over_in_flight().expect("a hand-over in flight");
                        handed.push((l.as_str().to_string(), to.cloned()));
                        s.handle_row_reply(ms(5_011), request, Reply::Accepted);
                    } else {
                        let names = batch.items.iter().map(|(n, _)| n.as_str().into());
                        s.handle_reply(ms(5_011), request, BatchReply::Matched(names.collect()));
                    }
                }
                _ => {}
            }
            sent.extend(drain(s));
        }
    }
    handed
}

#[test]
fn a_ranked_node_carries_its_rank_in_its_membership_rows_name() {
    let mut config = template();
    config.rank = Rank::new(3, Some("1.28.0")).unwrap();
    let mut s = LeaseSet::new(config, vec![name("a")], ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(1), RequestId(1), BatchReply::Survey(vec![]));
    // The key: priority 3, "a version", 1.28.0.0, "a release".
    let key = [
        "00000003", "1", "00000001", "0000001c", "00000000", "00000000", "1",
    ]
    .concat();
    let row = format!("{MEMBER_PREFIX}me {key} 1.28.0");
    assert_eq!(s.member_row().as_str(), row);
    assert_eq!(
        drain(&mut s),
        vec![execute(2, BatchKind::Acquire, &[(&row, None)], 2_501)]
    );
    // A holder id too long to carry the rank is refused by name.
    let mut long = template();
    long.holder = HolderId::new(&"h".repeat(200)).unwrap();
    long.rank = Rank::new(1, Some("1.2.3")).unwrap();
    let err = LeaseSet::new(long, vec![name("a")], ms(0)).unwrap_err();
    assert!(err.to_string().contains("membership row"), "{err}");
}

#[test]
fn a_member_that_outranks_this_node_is_handed_every_held_lease() {
    let (mut s, commands) = holding_then_survey(vec![member_row("x", 1)]);
    assert!(s.is_outranked(ms(5_002)));
    assert_eq!(s.contenders(ms(5_002)), vec![HolderId::new("x").unwrap()]);
    assert_eq!(s.target(ms(5_002)), Some(0));
    // Both works stop for a handover (not a release), nothing is written
    // while they run.
    let stops: Vec<(String, Demotion)> = commands
        .iter()
        .filter_map(|c| match c {
            SetCommand::StopWork { lease, reason, .. } => Some((lease.as_str().into(), *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(
        stops,
        vec![
            ("a".into(), Demotion::HandedOver),
            ("b".into(), Demotion::HandedOver)
        ]
    );
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, SetCommand::Execute { .. })),
        "{commands:?}"
    );
    // Each goes by its own hand-over statement, reserved for x's node;
    // the node reaches for nothing meanwhile or after.
    let x = HolderId::reserved_for("x").unwrap();
    assert_eq!(
        answer_all(&mut s, commands),
        vec![("a".into(), Some(x.clone())), ("b".into(), Some(x))]
    );
    assert_eq!(s.held().count(), 0);
    s.handle_timeout(ms(7_500));
    let later = drain(&mut s);
    assert!(
        later.iter().all(|c| !matches!(c,
            SetCommand::Execute { batch, .. } if batch.kind == BatchKind::Acquire)),
        "{later:?}"
    );
}

/// Drives `s` at `now`: answers every statement at once (a survey with
/// `rows`, every acquire won at epoch 1, renewals and releases matched,
/// hand-overs accepted) and confirms every work stop, until the set has
/// nothing more to do at `now`.
fn answer_at(s: &mut LeaseSet, now: Instant, rows: &[LeaseRow]) {
    for _ in 0..32 {
        let commands = drain(s);
        if commands.is_empty() {
            return;
        }
        for command in commands {
            match command {
                SetCommand::StopWork { lease, .. } => s.handle_work_stopped(now, lease.as_str()),
                SetCommand::Execute { request, batch, .. } => {
                    let names = batch.items.iter().map(|(n, _)| n.as_str().to_string());
                    match batch.kind {
                        BatchKind::Survey => {
                            s.handle_reply(now, request, BatchReply::Survey(rows.to_vec()))
                        }
                        BatchKind::Acquire => s.handle_reply(
                            now,
                            request,
                            BatchReply::Acquired(names.map(|n| acquired(&n, 1)).collect()),
                        ),
                        BatchKind::HandOver => s.handle_row_reply(now, request, Reply::Accepted),
                        _ => s.handle_reply(now, request, BatchReply::Matched(names.collect())),
                    }
                }
                _ => {}
            }
        }
    }
}

/// A set of `a` and `b` with `rank` that surveyed twice, reading `rows`
/// the second time (at 2.5 s), and took its share.
fn ranked(rank: Rank, rows: &[LeaseRow]) -> LeaseSet {
    let mut config = template();
    config.rank = rank;
    let mut s = LeaseSet::new(config, vec![name("a"), name("b")], ms(0)).unwrap();
    s.handle_timeout(ms(0));
    answer_at(&mut s, ms(1), &[]);
    s.handle_timeout(ms(2_500));
    answer_at(&mut s, ms(2_501), rows);
    s
}

#[test]
fn only_members_of_the_best_rank_share_and_lower_ones_change_nothing() {
    // A member of lower rank than the others counts for nothing; two of
    // the best rank share as before.
    let s = ranked(
        Rank::new(2, None).unwrap(),
        &[member_row("low", 1), member_row("peer", 2)],
    );
    let at = ms(2_600);
    assert!(!s.is_outranked(at));
    assert_eq!(
        s.contenders(at),
        vec![HolderId::new("me").unwrap(), HolderId::new("peer").unwrap()]
    );
    assert_eq!(s.members(at).len(), 3);
    assert_eq!(s.target(at), Some(1));
    assert_eq!(s.held().count(), 1);
}

#[test]
fn a_better_member_on_this_nodes_own_node_gets_the_leases_by_release() {
    // `me#new` runs on node `me`, as this holder does: a reservation for
    // that node would read as this holder's own, so the leases are
    // released and the better member takes them as free rows.
    let (mut s, commands) = holding_then_survey(vec![member_row("me#new", 5)]);
    assert!(s.is_outranked(ms(5_002)));
    let reasons: Vec<Demotion> = commands
        .iter()
        .filter_map(|c| match c {
            SetCommand::StopWork { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, vec![Demotion::Released, Demotion::Released]);
    assert_eq!(answer_all(&mut s, commands), vec![]);
    assert_eq!(s.held().count(), 0);
}

#[test]
fn leaving_hands_to_the_best_ranked_other_member() {
    // This node outranks both others and holds both leases; leaving, they
    // go to the better of the others, y, and none to x.
    let mut s = ranked(
        Rank::new(9, None).unwrap(),
        &[member_row("x", 0), member_row("y", 4)],
    );
    assert_eq!(s.held().count(), 2);
    assert_eq!(s.handle_leave(ms(2_600)), 2);
    let leave = drain(&mut s);
    let y = HolderId::reserved_for("y").unwrap();
    assert_eq!(
        answer_all(&mut s, leave),
        vec![("a".into(), Some(y.clone())), ("b".into(), Some(y))]
    );
    assert!(s.is_finished());
}
