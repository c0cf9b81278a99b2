//! `LeaseSet` renewing by liveness (DESIGN §9 "Renewal by liveness"): the rule for a term that
//! ends at its deadline. One node, leases `a` and `b`, ttl 10 s (interval
//! and request timeout 2.5 s), no jitter, driven by hand: every renewal
//! fails until the terms end.
//!
//! Renewing by liveness, a lease's row is linked to the node's membership
//! row, which the node's other renewals keep extending; a row whose own
//! renewals failed for a ttl stays linked to a liveness that lives on, so
//! no survey lists it and no other node takes it. The node releases it,
//! at its epoch, before trying for it again. Renewing every row, its row
//! lapses by itself and the node tries again at once, as a lone lease
//! does.
//!
//! `cargo test -p picolease-core --test lease_set_liveness`

use std::time::Duration;

use picolease_core::sql::MEMBER_PREFIX;
use picolease_core::{
    BatchKind, BatchReply, Demotion, Epoch, Failure, HolderId, Instant, LeaseName, LeaseSet, Reply,
    SetCommand, SetConfig,
};

const TTL: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000_000)
}

fn me() -> HolderId {
    HolderId::new("me").unwrap()
}

fn name(n: &str) -> LeaseName {
    LeaseName::new(n).unwrap()
}

/// `me`'s membership row.
fn member() -> String {
    format!("{MEMBER_PREFIX}me")
}

/// A batch as sent: its time, kind and `(name, epoch)` items.
type Sent = (u64, BatchKind, Vec<(String, Option<u64>)>);

/// What one run sent and told, in order.
#[derive(Debug, Default)]
struct Run {
    /// Each batch sent.
    batches: Vec<Sent>,
    /// Each demotion told: its time, lease and reason.
    demotions: Vec<(u64, String, Demotion)>,
}

impl Run {
    /// The batches that carried `lease` after `from` ms, in order.
    fn batches_of(&self, lease: &str, from: u64) -> Vec<(BatchKind, Option<u64>)> {
        self.batches
            .iter()
            .filter(|(at, _, _)| *at >= from)
            .filter_map(|(_, kind, items)| {
                items
                    .iter()
                    .find(|(n, _)| n == lease)
                    .map(|(_, epoch)| (*kind, *epoch))
            })
            .collect()
    }
}

/// One node over `a` and `b`, `by_liveness` or not, for 25 s: surveys
/// read an empty table, the first acquire wins both leases (`a` at epoch
/// 1, `b` at 4) and the membership row, every renewal fails from then on,
/// later acquires of a lease are refused as held, releases match, and
/// every work stops 1 ms after it is told to.
fn run(by_liveness: bool) -> Run {
    let mut template = SetConfig::with_ttl(me(), TTL);
    template.jitter = Duration::ZERO;
    template.by_liveness = by_liveness;
    let mut set = LeaseSet::new(template, vec![name("a"), name("b")], ms(0)).unwrap();
    let mut record = Run::default();
    let mut won = false;
    let mut now = 0;
    let mut pending: Vec<(u64, SetCommand)> = Vec::new();
    set.handle_timeout(ms(0));
    while now < 25_000 {
        while let Some(command) = set.poll_command() {
            pending.push((now + 1, command));
        }
        if let Some((at, command)) = (!pending.is_empty()).then(|| pending.remove(0)) {
            now = now.max(at);
            match command {
                SetCommand::Execute { request, batch, .. } => {
                    let items: Vec<(String, Option<u64>)> = batch
                        .items
                        .iter()
                        .map(|(n, e)| (n.as_str().to_string(), e.map(Epoch::get)))
                        .collect();
                    record.batches.push((now, batch.kind, items.clone()));
                    let reply = match batch.kind {
                        BatchKind::Survey => BatchReply::Survey(Vec::new()),
                        BatchKind::Acquire => BatchReply::Acquired(
                            items
                                .iter()
                                .map(|(n, _)| {
                                    let reply = if n == &member() {
                                        Reply::Acquired {
                                            epoch: Epoch::new(1),
                                        }
                                    } else if !won {
                                        Reply::Acquired {
                                            epoch: Epoch::new(if n == "a" { 1 } else { 4 }),
                                        }
                                    } else {
                                        Reply::Held {
                                            holder: Some(HolderId::new("other").unwrap()),
                                            epoch: Epoch::new(9),
                                            expires_in: TTL,
                                        }
                                    };
                                    (n.clone(), reply)
                                })
                                .collect(),
                        ),
                        BatchKind::Renew => BatchReply::Failed(Failure::Transient),
                        BatchKind::Release | BatchKind::HandOver => {
                            BatchReply::Matched(items.iter().map(|(n, _)| n.clone()).collect())
                        }
                    };
                    if batch.kind == BatchKind::Acquire && items.iter().any(|(n, _)| n == "a") {
                        won = true;
                    }
                    set.handle_reply(ms(now + 1), request, reply);
                }
                SetCommand::StopWork { lease, reason, .. } => {
                    record
                        .demotions
                        .push((now, lease.as_str().to_string(), reason));
                    set.handle_work_stopped(ms(now + 1), lease.as_str());
                }
                _ => {}
            }
            continue;
        }
        match set.poll_timeout() {
            Some(at) => {
                now = now.max(at.as_nanos().div_ceil(1_000_000));
                set.handle_timeout(ms(now));
            }
            None => break,
        }
    }
    record
}

/// The instant a lease's term ended at its deadline.
fn expired_at(run: &Run, lease: &str) -> u64 {
    run.demotions
        .iter()
        .find(|(_, n, reason)| n == lease && *reason == Demotion::Expired)
        .unwrap_or_else(|| panic!("{lease} never expired: {:?}", run.demotions))
        .0
}

#[test]
fn by_liveness_a_term_that_ends_at_its_deadline_is_released_at_its_epoch_before_any_acquire() {
    let run = run(true);
    for (lease, epoch) in [("a", 1), ("b", 4)] {
        let ended = expired_at(&run, lease);
        let after = run.batches_of(lease, ended);
        assert_eq!(
            after.first(),
            Some(&(BatchKind::Release, Some(epoch))),
            "{lease}: the first batch after its term ended at {ended} ms: {after:?}"
        );
        assert_eq!(
            after
                .iter()
                .filter(|(kind, _)| *kind == BatchKind::Release)
                .count(),
            1,
            "{lease}: released once: {after:?}"
        );
        assert!(
            after[1..]
                .iter()
                .all(|(kind, _)| *kind == BatchKind::Acquire),
            "{lease}: only acquires after the release: {after:?}"
        );
    }
    // The membership row is not released: its term is the liveness, and
    // a lapsed one is over for everyone already.
    assert!(
        run.batches
            .iter()
            .all(|(_, kind, items)| *kind != BatchKind::Release
                || items.iter().all(|(n, _)| n != &member())),
        "{:?}",
        run.batches
    );
}

#[test]
fn renewing_every_row_a_term_that_ends_at_its_deadline_is_tried_again_without_a_release() {
    let run = run(false);
    for lease in ["a", "b"] {
        let ended = expired_at(&run, lease);
        let after = run.batches_of(lease, ended);
        assert!(
            matches!(after.first(), Some((BatchKind::Acquire, None))),
            "{lease}: the first batch after its term ended at {ended} ms: {after:?}"
        );
        assert!(
            after.iter().all(|(kind, _)| *kind != BatchKind::Release),
            "{lease}: {after:?}"
        );
    }
}
