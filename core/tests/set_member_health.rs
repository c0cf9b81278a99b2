//! Members' health in a lease set (DESIGN §9 "Members' health", §5 "Work
//! that fails") as exact command sequences: the unhealthy row written
//! before anything moves, the leases handed to a healthy member, the
//! membership row given up only once the unhealthy row is held, all
//! members unhealthy sharing as before, and the way back. One node `me`,
//! leases `a` and `b`, ttl 10 s (interval 2.5 s), no jitter, renewing
//! every row (`by_liveness` off: the membership row swaps with health;
//! renewing by liveness it stays, `set_liveness_sim.rs`).

use std::time::Duration;

use picolease_core::set::share::preference;
use picolease_core::set::{member_row_name, unhealthy_row_name};
use picolease_core::sql::LeaseRow;
use picolease_core::{
    BatchKind, BatchReply, Demotion, Epoch, HolderId, Instant, LeaseSet, Rank, Reply, RequestId,
    SetCommand, SetConfig,
};

#[allow(dead_code)] // the helpers the other exact-vector files use
mod exact;

use exact::{me, member, ms, name, TTL};

fn drain(s: &mut LeaseSet) -> Vec<SetCommand> {
    std::iter::from_fn(|| s.poll_command()).collect()
}

/// A live row of `holder`'s: its membership row, or its unhealthy row.
fn row_of(holder: &str, healthy: bool) -> LeaseRow {
    let h = HolderId::new(holder).unwrap();
    let name = if healthy {
        member_row_name(&h, &Rank::default())
    } else {
        unhealthy_row_name(&h, &Rank::default())
    };
    LeaseRow {
        name: name.unwrap(),
        holder: Some(holder.into()),
        epoch: Epoch::new(1),
        expires_in_ms: Some(9_000),
    }
}

fn unhealthy_row() -> String {
    unhealthy_row_name(&me(), &Rank::default()).unwrap()
}

/// What one batch asked, as (kind, names).
type Asked = (BatchKind, Vec<String>);

/// Answers every statement at `now` (a survey with `rows`, acquires won
/// at epoch 1, renewals and releases matched, hand-overs accepted) and
/// confirms every work stop, until the set has nothing more to do;
/// returns the batches it sent and the work stops, in order.
fn answer_at(
    s: &mut LeaseSet,
    now: Instant,
    rows: &[LeaseRow],
) -> (Vec<Asked>, Vec<(String, Demotion)>) {
    let (mut asked, mut stops) = (Vec::new(), Vec::new());
    for _ in 0..32 {
        let commands = drain(s);
        if commands.is_empty() {
            break;
        }
        for command in commands {
            match command {
                SetCommand::StopWork { lease, reason, .. } => {
                    stops.push((lease.as_str().to_string(), reason));
                    s.handle_work_stopped(now, lease.as_str());
                }
                SetCommand::Execute { request, batch, .. } => {
                    let names: Vec<String> = batch
                        .items
                        .iter()
                        .map(|(n, _)| n.as_str().to_string())
                        .collect();
                    asked.push((batch.kind, names.clone()));
                    answer(s, now, request, batch.kind, names, rows);
                }
                _ => {}
            }
        }
    }
    (asked, stops)
}

fn answer(
    s: &mut LeaseSet,
    now: Instant,
    request: RequestId,
    kind: BatchKind,
    names: Vec<String>,
    rows: &[LeaseRow],
) {
    match kind {
        BatchKind::Survey => s.handle_reply(now, request, BatchReply::Survey(rows.to_vec())),
        BatchKind::Acquire => {
            let won = names
                .into_iter()
                .map(|n| {
                    let epoch = Epoch::new(1);
                    (n, Reply::Acquired { epoch })
                })
                .collect();
            s.handle_reply(now, request, BatchReply::Acquired(won))
        }
        BatchKind::HandOver => s.handle_row_reply(now, request, Reply::Accepted),
        _ => s.handle_reply(now, request, BatchReply::Matched(names)),
    }
}

/// `me` over `a` and `b` that surveyed twice, reading `rows` the second
/// time (at 2.5 s), and took its share.
fn settled(rows: &[LeaseRow]) -> LeaseSet {
    let mut c = SetConfig::with_ttl(me(), TTL);
    c.jitter = Duration::ZERO;
    c.by_liveness = false;
    let mut s = LeaseSet::new(c, vec![name("a"), name("b")], ms(0)).unwrap();
    s.handle_timeout(ms(0));
    answer_at(&mut s, ms(1), &[]);
    s.handle_timeout(ms(2_500));
    answer_at(&mut s, ms(2_501), rows);
    s
}

/// Steps `s` through every timeout up to `until`, answering as
/// [`answer_at`] does; returns what it sent and stopped.
fn advance(
    s: &mut LeaseSet,
    until: Instant,
    rows: &[LeaseRow],
) -> (Vec<Asked>, Vec<(String, Demotion)>) {
    let (mut asked, mut stops) = (Vec::new(), Vec::new());
    while let Some(t) = s.poll_timeout().filter(|&t| t <= until) {
        s.handle_timeout(t);
        let (a, st) = answer_at(s, t, rows);
        asked.extend(a);
        stops.extend(st);
    }
    (asked, stops)
}

fn held(s: &LeaseSet) -> Vec<String> {
    s.held().map(|(n, _)| n.as_str().to_string()).collect()
}

fn holder(id: &str) -> HolderId {
    HolderId::new(id).unwrap()
}

#[test]
fn an_unhealthy_member_writes_its_mark_first_then_hands_its_leases_to_a_healthy_one() {
    let peer = row_of("x", true);
    let mut s = settled(std::slice::from_ref(&peer));
    let mine = held(&s);
    assert_eq!(mine.len(), 1, "one of two leases each: {mine:?}");
    // The verdict alone moves nothing: the others cannot read it yet. The
    // one statement is the unhealthy row's acquire.
    s.handle_health(ms(2_600), false);
    let commands = drain(&mut s);
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, SetCommand::StopWork { .. })),
        "{commands:?}"
    );
    let batches: Vec<Asked> = commands
        .iter()
        .filter_map(|c| match c {
            SetCommand::Execute { batch, .. } => Some((
                batch.kind,
                batch.items.iter().map(|(n, _)| n.as_str().into()).collect(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(batches, vec![(BatchKind::Acquire, vec![unhealthy_row()])]);
    assert!(!s.is_outranked(ms(2_600)));
    assert_eq!(s.target(ms(2_600)), Some(1));
    // Held: the node counts as unhealthy, gives its membership row up
    // (now that the unhealthy row says it is here) and hands its lease
    // to the healthy member, by a hand-over, not a release, said as
    // `unhealthy`.
    let SetCommand::Execute { request, .. } = &commands[0] else {
        panic!("{commands:?}")
    };
    let won = vec![(
        unhealthy_row(),
        Reply::Acquired {
            epoch: Epoch::new(1),
        },
    )];
    s.handle_reply(ms(2_602), *request, BatchReply::Acquired(won));
    assert!(s.is_outranked(ms(2_602)));
    assert_eq!(s.target(ms(2_602)), Some(0));
    // In its share's reckoning it turns unhealthy only once the others
    // have all read the row: an interval and a request timeout on.
    assert!(s.unhealthy_members(ms(2_602)).is_empty());
    assert_eq!(s.unhealthy_members(ms(7_602)), vec![me()]);
    assert_eq!(s.contenders(ms(7_602)), vec![holder("x")]);
    let (asked, stops) = answer_at(&mut s, ms(2_603), std::slice::from_ref(&peer));
    assert_eq!(stops, vec![(mine[0].clone(), Demotion::Unhealthy)]);
    assert!(
        asked.contains(&(BatchKind::Release, vec![member()])),
        "{asked:?}"
    );
    assert!(asked.contains(&(BatchKind::HandOver, vec![mine[0].clone()])));
    assert!(
        !asked.iter().any(|(k, _)| *k == BatchKind::Acquire),
        "an unhealthy member reaches for nothing: {asked:?}"
    );
    assert!(held(&s).is_empty());
    // Every later interval renews the unhealthy row alone.
    let (asked, _) = advance(&mut s, ms(10_000), std::slice::from_ref(&peer));
    let renewals: Vec<&Asked> = asked
        .iter()
        .filter(|(k, _)| *k == BatchKind::Renew)
        .collect();
    assert!(renewals.len() >= 2, "{asked:?}");
    assert!(renewals
        .iter()
        .all(|(_, names)| *names == vec![unhealthy_row()]));
    assert!(held(&s).is_empty());
}

#[test]
fn when_every_member_is_unhealthy_they_share_as_before_and_nothing_moves() {
    let sick_peer = row_of("x", false);
    let mut s = settled(std::slice::from_ref(&sick_peer));
    // x is unhealthy and this node healthy: it takes both leases.
    assert_eq!(s.unhealthy_members(ms(2_502)), vec![holder("x")]);
    assert_eq!(s.contenders(ms(2_502)), vec![me()]);
    assert_eq!(held(&s).len(), 2);
    // Now this node is unhealthy too: both stand equal, and the share is
    // one each, by the share's release (x takes the free one), never by
    // a hand-over to an unhealthy member. But only once x has read its
    // unhealthy row (an interval and a request timeout after it was
    // written, 7.601 s): until then x counts it healthy and aims for
    // nothing, so a lease released sooner would be left to nobody.
    s.handle_health(ms(2_600), false);
    let (asked, stops) = answer_at(&mut s, ms(2_601), std::slice::from_ref(&sick_peer));
    assert_eq!(asked[0], (BatchKind::Acquire, vec![unhealthy_row()]));
    assert!(stops.is_empty(), "{stops:?}");
    assert_eq!(s.contenders(ms(2_601)), vec![me()]);
    assert_eq!(held(&s).len(), 2);
    let (_, stops) = advance(&mut s, ms(7_600), std::slice::from_ref(&sick_peer));
    assert!(stops.is_empty(), "{stops:?}");
    assert_eq!(held(&s).len(), 2);
    let (_, stops) = advance(&mut s, ms(7_700), std::slice::from_ref(&sick_peer));
    assert_eq!(s.contenders(ms(7_700)), vec![me(), holder("x")]);
    assert_eq!(s.target(ms(7_700)), Some(1));
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(stops[0].1, Demotion::Released);
    assert_eq!(held(&s).len(), 1);
    // Alone and unhealthy (x is gone, the lease it held lapsed), it
    // leads every lease: a degraded leader is better than none.
    let lapsed = ["a", "b"]
        .into_iter()
        .find(|l| !held(&s).contains(&l.to_string()))
        .unwrap();
    let free = LeaseRow {
        name: lapsed.into(),
        holder: None,
        epoch: Epoch::new(1),
        expires_in_ms: Some(0),
    };
    let (asked, stops) = advance(&mut s, ms(12_000), &[free]);
    assert!(stops.is_empty(), "{stops:?}");
    assert!(
        asked.iter().any(|(k, _)| *k == BatchKind::Acquire),
        "{asked:?}"
    );
    assert_eq!(held(&s).len(), 2);
    assert_eq!(s.unhealthy_members(ms(12_000)), vec![me()]);
}

#[test]
fn healthy_again_a_member_writes_its_membership_row_before_it_drops_the_mark() {
    let peer = row_of("x", true);
    let mut s = settled(std::slice::from_ref(&peer));
    s.handle_health(ms(2_600), false);
    answer_at(&mut s, ms(2_601), std::slice::from_ref(&peer));
    assert!(held(&s).is_empty());
    s.handle_health(ms(3_000), true);
    // Healthy at once in its own reckoning; its membership row is
    // acquired first and the unhealthy row released after.
    assert!(!s.is_outranked(ms(3_000)));
    let commands = drain(&mut s);
    let acquire = commands.iter().find_map(|c| match c {
        SetCommand::Execute { request, batch, .. } if batch.kind == BatchKind::Acquire => {
            Some((*request, batch.items.clone()))
        }
        _ => None,
    });
    let (request, items) = acquire.expect("the membership row's acquire");
    assert!(
        items.iter().any(|(n, _)| n.as_str() == member()),
        "{items:?}"
    );
    assert!(
        !commands.iter().any(|c| matches!(c,
            SetCommand::Execute { batch, .. } if batch.kind == BatchKind::Release)),
        "the mark stays until the membership row is held: {commands:?}"
    );
    let names = items.iter().map(|(n, _)| n.as_str().to_string()).collect();
    answer(&mut s, ms(3_001), request, BatchKind::Acquire, names, &[]);
    let (asked, _) = answer_at(&mut s, ms(3_002), std::slice::from_ref(&peer));
    assert!(
        asked.contains(&(BatchKind::Release, vec![unhealthy_row()])),
        "{asked:?}"
    );
    assert!(s.unhealthy_members(ms(3_002)).is_empty());
    assert_eq!(s.contenders(ms(3_002)), vec![me(), holder("x")]);
    assert_eq!(s.target(ms(3_002)), Some(1));
}

#[test]
fn a_member_read_with_both_rows_is_switching_and_counts_as_unhealthy() {
    let s = settled(&[row_of("x", true), row_of("x", false), row_of("y", true)]);
    let at = ms(2_502);
    assert_eq!(s.members(at), vec![me(), holder("x"), holder("y")]);
    assert_eq!(s.unhealthy_members(at), vec![holder("x")]);
    assert_eq!(s.contenders(at), vec![me(), holder("y")]);
    assert_eq!(s.target(at), Some(1));
}

#[test]
fn a_set_whose_probe_never_reports_never_writes_the_unhealthy_row() {
    let mut s = settled(&[row_of("x", true)]);
    let (asked, _) = advance(&mut s, ms(10_000), &[row_of("x", true)]);
    assert!(asked.len() >= 4, "{asked:?}");
    assert!(
        asked
            .iter()
            .all(|(_, names)| !names.contains(&unhealthy_row())),
        "{asked:?}"
    );
    assert!(s.is_healthy());
    assert!(s.unhealthy_members(ms(10_001)).is_empty());
}

#[test]
fn an_unhealthy_members_leases_are_shared_out_by_what_each_healthy_member_is_owed() {
    // Four leases among me, x and y: me (first by holder id) holds two.
    // Every one of them ranks x before y, so handing each to the member
    // that ranks first would give x both and leave y short.
    let mut c = SetConfig::with_ttl(me(), TTL);
    c.jitter = Duration::ZERO;
    c.by_liveness = false;
    let leases: Vec<_> = (0..100)
        .map(|i| format!("l{i}"))
        .filter(|l| preference(&holder("x"), l) > preference(&holder("y"), l))
        .take(4)
        .map(|l| name(&l))
        .collect();
    let mut s = LeaseSet::new(c, leases, ms(0)).unwrap();
    let peers = [row_of("x", true), row_of("y", true)];
    s.handle_timeout(ms(0));
    answer_at(&mut s, ms(1), &[]);
    s.handle_timeout(ms(2_500));
    answer_at(&mut s, ms(2_501), &peers);
    assert_eq!(held(&s).len(), 2);
    // Out of the share, each of x and y is owed one more: the two leases
    // go one to each.
    s.handle_health(ms(2_600), false);
    let mut handed = Vec::new();
    for _ in 0..16 {
        for command in drain(&mut s) {
            match command {
                SetCommand::StopWork { lease, .. } => {
                    s.handle_work_stopped(ms(2_601), lease.as_str());
                }
                SetCommand::Execute { request, batch, .. } => {
                    if batch.kind == BatchKind::HandOver {
                        let (_, to) = s.hand_over_in_flight().expect("a hand-over in flight");
                        handed.push(to.cloned());
                    }
                    let names = batch.items.iter().map(|(n, _)| n.as_str().into()).collect();
                    answer(&mut s, ms(2_601), request, batch.kind, names, &peers);
                }
                _ => {}
            }
        }
    }
    handed.sort();
    assert_eq!(
        handed,
        vec![
            Some(HolderId::reserved_for("x").unwrap()),
            Some(HolderId::reserved_for("y").unwrap())
        ]
    );
    assert!(held(&s).is_empty());
}
