//! Fingerprints of the lease-set model. As `check::canon` for a lone lease,
//! with two differences:
//!
//! - **No node symmetry, and holder ids kept whole.** A set ranks the live
//!   members by holder id and prefers leases by a hash of it
//!   (`set::share`), so nodes, and a node's incarnations, are not
//!   interchangeable: a holder is encoded as (node, incarnation).
//! - **Request ids relative to their counter.** Each machine of a set, and
//!   the set itself, numbers its own requests; an id is encoded as its
//!   distance below its counter, and a batch on its way to the database as
//!   whether the database would drop it (abandoned).
//!
//! Epochs are ranked over every epoch present, of every lease together
//! (only epochs of one lease are ever compared, and the ranking keeps
//! their order).

use super::{SetDelivery, SetNode, SetRequest, SetWorld};
use crate::check::canon::{demotion, hand_over, hash128, local, operation, reply};
use crate::check::world::{parse_holder, Setup};
use crate::names::Epoch;
use crate::protocol::{Failure, Operation, Reply, RequestId, Role};
use crate::set::{BatchKind, BatchReply, LeaseSet};
use crate::sim::{ModelDb, DB_EPOCH_MS};
use crate::sql::MEMBER_PREFIX;
use crate::state::{LeaseState, Snapshot};
use crate::time::Instant;

/// Reused buffers.
#[derive(Default)]
pub(crate) struct SetFingerprinter {
    epochs: Vec<u64>,
    out: Vec<i64>,
}

struct Ctx<'a> {
    world: &'a SetWorld,
    epochs: &'a [u64],
    horizon: i64,
    ttl: i64,
}

impl SetFingerprinter {
    /// The 128-bit fingerprint of `world`.
    pub(crate) fn fingerprint(&mut self, world: &SetWorld, setup: &Setup) -> u128 {
        collect_epochs(world, &mut self.epochs);
        let b = &setup.bounds;
        let ctx = Ctx {
            world,
            epochs: &self.epochs,
            horizon: i64::from(b.ttl_ticks + b.interval_ticks + 2),
            ttl: i64::from(b.ttl_ticks),
        };
        self.out.clear();
        ctx.encode(&mut self.out);
        hash128(&self.out)
    }
}

fn collect_epochs(world: &SetWorld, e: &mut Vec<u64>) {
    e.clear();
    for (_, row) in world.db.rows() {
        e.push(u64::try_from(row.epoch).unwrap_or(0));
        // The liveness term a linked row follows is an epoch too.
        e.extend(ModelDb::link(row).map(|term| u64::try_from(term).unwrap_or(0)));
    }
    e.extend(world.last_epoch.iter().flatten().map(|x| x.get()));
    let batch_epochs = |e: &mut Vec<u64>, r: &SetRequest| {
        e.extend(r.batch.items.iter().filter_map(|(_, x)| x.map(Epoch::get)));
    };
    if let Some(r) = &world.stray {
        batch_epochs(e, r);
    }
    for n in &world.nodes {
        e.extend(n.work.iter().flatten().map(|x| x.get()));
        if let Some(set) = n.set.as_ref().filter(|s| !s.is_finished()) {
            for j in 0..set.slot_count() {
                let slot = set.slot_view(j);
                let s = slot.machine.snapshot();
                if !s.finished {
                    e.extend(s.leading.map(|(x, _)| x.get()));
                    e.extend(
                        s.in_flight
                            .and_then(|(_, op, _)| op.epoch())
                            .map(Epoch::get),
                    );
                    e.extend(s.shutting_down.flatten().map(Epoch::get));
                    e.extend(s.published.epoch.map(Epoch::get));
                }
                e.extend(slot.queued.and_then(|(_, op)| op.epoch()).map(Epoch::get));
                e.extend(slot.untaken.map(|(x, _)| x.get()));
            }
        }
        for r in &n.to_db.queue {
            batch_epochs(e, r);
        }
        for d in &n.to_node.queue {
            match d {
                SetDelivery::Reply(_, BatchReply::Acquired(outcomes)) => {
                    for (_, r) in outcomes {
                        match r {
                            Reply::Acquired { epoch } | Reply::Held { epoch, .. } => {
                                e.push(epoch.get());
                            }
                            _ => {}
                        }
                    }
                }
                SetDelivery::Reply(_, BatchReply::Survey(rows)) => {
                    e.extend(rows.iter().map(|r| r.epoch.get()));
                }
                _ => {}
            }
        }
    }
    e.sort_unstable();
    e.dedup();
}

fn rank(values: &[u64], v: u64) -> i64 {
    values.partition_point(|&x| x < v) as i64
}

/// A request id as its distance below `counter` (the next id drawn is
/// `counter + 1`).
fn offset(counter: u64, id: RequestId) -> i64 {
    counter as i64 - id.0 as i64
}

impl Ctx<'_> {
    fn epoch(&self, e: Option<Epoch>) -> i64 {
        e.map_or(-1, |e| rank(self.epochs, e.get()))
    }

    fn holder(&self, holder: Option<&str>) -> i64 {
        // A reservation (`<holder id>#`, a planned handover): in the
        // upper half of that holder's band.
        if let Some(reserved) = holder.and_then(|h| h.strip_suffix('#')) {
            return match parse_holder(reserved) {
                Some((node, inc)) => 1 + node as i64 * 4096 + 2048 + i64::from(inc),
                None => -4,
            };
        }
        match holder.map(parse_holder) {
            Some(Some((node, inc))) => 1 + node as i64 * 4096 + i64::from(inc),
            Some(None) => -2,
            None => -1,
        }
    }

    fn name(&self, name: &str) -> i64 {
        if let Some(k) = name.strip_prefix('s').and_then(|k| k.parse::<i64>().ok()) {
            return k;
        }
        // A ranked node's row name carries its rank after a space (the
        // checker's holder ids have none); the rank follows the node.
        match name.strip_prefix(MEMBER_PREFIX) {
            Some(h) => 1_000_000 + self.holder(h.split(' ').next()),
            None => -3,
        }
    }

    fn local(&self, node: &SetNode, at: Instant) -> i64 {
        local(node.clock, at, self.horizon)
    }

    fn operation(&self, out: &mut Vec<i64>, op: Operation) {
        operation(out, op, |e| self.epoch(e));
    }

    fn request(&self, out: &mut Vec<i64>, req: &SetRequest) {
        let n = &self.world.nodes[req.node];
        let current = n.incarnation == req.incarnation;
        out.push(self.holder(Some(req.holder.as_str())));
        let dropped = current && req.id.0 <= n.abandoned_upto;
        out.push(i64::from(dropped));
        out.push(match (&n.set, current) {
            (Some(set), true) => offset(set.view().next_request, req.id),
            _ => -1,
        });
        out.push(kind(req.batch.kind));
        for (name, epoch) in &req.batch.items {
            out.extend([self.name(name.as_str()), self.epoch(*epoch)]);
        }
        out.push(self.holder(req.successor.as_ref().map(|h| h.as_str())));
        out.push(-4);
    }

    fn encode(&self, out: &mut Vec<i64>) {
        let w = self.world;
        out.push(i64::from(w.faults));
        out.extend(w.leaderless.iter().map(|&l| i64::from(l)));
        out.extend(w.last_epoch.iter().map(|&e| self.epoch(e)));
        for (name, row) in w.db.rows() {
            // A linked row (DESIGN §9 "Renewal by liveness") is encoded by its term, beyond
            // every clamped time left: which liveness it follows matters.
            let left = match ModelDb::link(row) {
                Some(term) => {
                    self.ttl + 2 + self.epoch(Some(Epoch::new(u64::try_from(term).unwrap_or(0))))
                }
                None => (row.expires_at - DB_EPOCH_MS - w.db_clock as i64).clamp(0, self.ttl + 1),
            };
            out.extend([
                self.name(name),
                self.holder(row.holder.as_deref()),
                self.epoch(Epoch::new(u64::try_from(row.epoch).unwrap_or(0)).into()),
                left,
            ]);
        }
        out.push(-9);
        match &w.stray {
            Some(req) => self.request(out, req),
            None => out.push(-9),
        }
        for n in &w.nodes {
            self.node(out, n);
        }
    }

    fn node(&self, out: &mut Vec<i64>, n: &SetNode) {
        out.extend([-7, i64::from(n.incarnation)]);
        out.extend([i64::from(n.to_db.age), i64::from(n.to_db.late)]);
        for req in &n.to_db.queue {
            self.request(out, req);
        }
        out.push(-6);
        match &n.set {
            None => out.push(0),
            Some(s) if s.is_finished() => out.push(1),
            Some(set) => {
                out.extend([2, i64::from(n.paused), i64::from(n.skew)]);
                let anchor = |a: Option<i32>| a.map_or(-99, |a| i64::from(a - n.skew));
                for a in &n.anchors {
                    out.extend([anchor(a.flight.map(|(_, _, s)| s)), anchor(a.term)]);
                }
                self.set(out, n, set);
                out.extend(n.work.iter().map(|&e| self.epoch(e)));
                out.extend(n.fenced_out.iter().map(|&f| i64::from(f)));
                out.extend([i64::from(n.to_node.age), i64::from(n.to_node.late)]);
                let counter = set.view().next_request;
                for d in &n.to_node.queue {
                    self.delivery(out, n, counter, d);
                }
            }
        }
    }

    fn set(&self, out: &mut Vec<i64>, n: &SetNode, set: &LeaseSet) {
        let v = set.view();
        match v.in_flight {
            Some((id, k, items, sent, give_up)) => {
                out.extend([offset(v.next_request, id), kind(k)]);
                out.extend(items.iter().map(|&i| i as i64));
                out.extend([-4, self.local(n, sent), self.local(n, give_up)]);
            }
            None => out.push(-9),
        }
        out.extend([
            self.local(n, v.next_survey),
            i64::from(v.surveys.min(2)),
            i64::from(v.resurvey),
            i64::from(v.shutting_down),
            i64::from(v.finished),
            v.members.len() as i64,
            v.probe.map_or(-1, i64::from),
            v.marked_at.map_or(-99, |t| self.local(n, t)),
        ]);
        for m in v.members {
            out.extend([
                self.holder(Some(m.holder.as_str())),
                self.local(n, m.until),
                i64::from(m.healthy),
            ]);
        }
        out.push(v.wakeups.len() as i64);
        out.extend(v.wakeups.iter().map(|&t| self.local(n, t)));
        for j in 0..set.slot_count() {
            let slot = set.slot_view(j);
            let counter = self.machine(out, n, slot.machine);
            match slot.queued {
                Some((id, op)) => {
                    out.push(offset(counter, id));
                    self.operation(out, op);
                }
                None => out.push(-9),
            }
            out.push(slot.sent.map_or(-9, |id| offset(counter, id)));
            let (seen, until) = match slot.seen {
                crate::set::SeenView::Unknown => (0, None),
                crate::set::SeenView::Free => (1, None),
                crate::set::SeenView::Held(until) => (2, until),
            };
            out.extend([seen, until.map_or(-99, |t| self.local(n, t))]);
            out.extend([
                i64::from(slot.stopping),
                i64::from(slot.yielding),
                slot.rest_until.map_or(-99, |t| self.local(n, t)),
                slot.offered_until.map_or(-99, |t| self.local(n, t)),
                slot.handed_at.map_or(-99, |t| self.local(n, t)),
                i64::from(slot.handed_past_better),
            ]);
            match slot.untaken {
                Some((term, since)) => out.extend([self.epoch(Some(term)), self.local(n, since)]),
                None => out.push(-99),
            }
        }
    }

    /// A machine's state; returns its request counter.
    fn machine(&self, out: &mut Vec<i64>, n: &SetNode, m: &LeaseState) -> u64 {
        let s: Snapshot = m.snapshot();
        out.push(-5);
        if s.finished {
            out.push(1);
            return s.next_request;
        }
        out.push(i64::from(m.is_contending()));
        match s.in_flight {
            Some((id, op, sent)) => {
                out.extend([offset(s.next_request, id), self.local(n, sent)]);
                self.operation(out, op);
            }
            None => out.push(-9),
        }
        match s.leading {
            Some((epoch, deadline)) => {
                out.extend([self.epoch(Some(epoch)), self.local(n, deadline)]);
            }
            None => out.push(-9),
        }
        out.push(s.release_by.map_or(-9, |by| self.local(n, by)));
        hand_over(
            out,
            &s,
            n.now(),
            |e| self.epoch(e),
            |h| self.holder(h),
            |t| self.local(n, t),
        );
        out.push(self.local(n, s.next_attempt));
        out.push(i64::from(s.notice_pending));
        out.push(match s.shutting_down {
            None => -9,
            Some(release) => self.epoch(release),
        });
        let l = &s.published;
        if l.role != Role::Leader {
            // As for a lone lease: a follower's last publication only
            // decides whether the next one is news.
            out.push(-8);
        } else {
            out.extend([
                self.epoch(l.epoch),
                self.holder(l.holder.as_ref().map(|h| h.as_str())),
                l.reason.map_or(-1, demotion),
            ]);
        }
        s.next_request
    }

    fn delivery(&self, out: &mut Vec<i64>, _n: &SetNode, counter: u64, d: &SetDelivery) {
        match d {
            SetDelivery::Notice(names) => {
                out.push(-5);
                out.extend(names.iter().map(|n| self.name(n.as_str())));
            }
            SetDelivery::Reply(id, reply) => {
                out.push(offset(counter, *id));
                match reply {
                    BatchReply::Acquired(outcomes) => {
                        out.push(0);
                        for (name, r) in outcomes {
                            out.push(self.name(name));
                            self.reply(out, r);
                        }
                    }
                    BatchReply::Matched(names) => {
                        out.push(1);
                        out.extend(names.iter().map(|n| self.name(n)));
                    }
                    BatchReply::Renewed { renewed, asked } => {
                        out.push(5);
                        out.extend(renewed.iter().map(|n| self.name(n)));
                        out.push(-6);
                        for (name, to) in asked {
                            out.push(self.name(name));
                            out.push(self.holder(to.as_ref().map(crate::HolderId::as_str)));
                        }
                    }
                    BatchReply::Survey(rows) => {
                        out.push(2);
                        for r in rows {
                            out.extend([
                                self.name(&r.name),
                                self.holder(r.holder.as_deref()),
                                self.epoch(Some(r.epoch)),
                                r.expires_in_ms
                                    .map_or(-99_999, |ms| ms.clamp(-(self.ttl + 1), self.ttl + 1)),
                            ]);
                        }
                    }
                    BatchReply::Failed(f) => out.push(3 + i64::from(*f == Failure::Fatal)),
                }
                out.push(-4);
            }
        }
    }

    fn reply(&self, out: &mut Vec<i64>, r: &Reply) {
        reply(out, r, |e| self.epoch(Some(e)), |h| self.holder(Some(h)));
    }
}

fn kind(k: BatchKind) -> i64 {
    match k {
        BatchKind::Acquire => 0,
        BatchKind::Renew => 1,
        BatchKind::Release => 2,
        BatchKind::Survey => 3,
        BatchKind::HandOver => 4,
    }
}
