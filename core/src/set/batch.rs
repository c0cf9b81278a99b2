//! Batches: what goes out next (renewals first, then releases whose work
//! stopped, then acquires, then the survey), cut to [`MAX_BATCH`], and how
//! a batch's result answers each lease's machine.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{Batch, BatchKind, BatchReply, LeaseSet, Seen, SetCommand, Slot};
use crate::names::HolderId;
use crate::protocol::{Failure, Operation, Reply, RequestId};
use crate::time::Instant;

/// The most leases one renewal or release batch carries (besides the
/// node's membership row). A batch of 1,000 renews in a few milliseconds
/// on PostgreSQL (`set_scale`: 7.4–8.6 ms here), far inside any request
/// timeout the timings allow; one of 10,000 took 100 ms on a quiet machine
/// and outlived a 500 ms request timeout (ttl 2 s) on a loaded one, so a
/// node holding every lease lost them all by expiry. A node holding more
/// sends several back to back, each in name order (DESIGN §9).
pub const MAX_BATCH: usize = 1_000;

/// The batch in flight: which slots it carries, when it went out and when
/// the set gives up on it.
#[derive(Clone, Debug)]
pub(super) struct InFlight {
    pub(super) id: RequestId,
    pub(super) kind: BatchKind,
    pub(super) items: Vec<usize>,
    pub(super) sent_at: Instant,
    pub(super) give_up: Instant,
}

impl LeaseSet {
    /// The result of batch `id`; ignored unless it is the batch in flight.
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: BatchReply) {
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        let batch = match self.in_flight.take() {
            Some(batch) if batch.id == id => batch,
            other => {
                self.in_flight = other;
                return;
            }
        };
        match (batch.kind, reply) {
            (_, BatchReply::Failed(Failure::Fatal)) => {
                self.fail_items(now, &batch, Failure::Fatal);
                // The table is gone or malformed: the whole set stops, as
                // a lone lease does, whichever leases the batch carried (a
                // survey carries none).
                self.handle_shutdown(now);
            }
            (_, BatchReply::Failed(failure)) => self.fail_items(now, &batch, failure),
            (BatchKind::Acquire, BatchReply::Acquired(outcomes)) => {
                let mut by_name: HashMap<String, Reply> = outcomes.into_iter().collect();
                for &i in &batch.items {
                    let reply = by_name
                        .remove(self.slots[i].name.as_str())
                        .unwrap_or(Reply::Failed(Failure::Transient));
                    self.answer(now, &batch, i, reply);
                }
            }
            (BatchKind::Renew | BatchKind::Release, BatchReply::Matched(names)) => {
                let matched: HashSet<String> = names.into_iter().collect();
                for &i in &batch.items {
                    let reply = if matched.contains(self.slots[i].name.as_str()) {
                        Reply::Accepted
                    } else {
                        Reply::Rejected
                    };
                    self.answer(now, &batch, i, reply);
                }
            }
            (BatchKind::Renew, BatchReply::Renewed { renewed, asked }) => {
                let matched: HashSet<String> = renewed.into_iter().collect();
                let mut asked: HashMap<String, Option<HolderId>> = asked.into_iter().collect();
                for &i in &batch.items {
                    let name = self.slots[i].name.as_str();
                    // An operator's request rides on the renewal, as on a
                    // lone lease's: the renewal counts, then the lease's
                    // machine hands over.
                    let reply = match (matched.contains(name), asked.remove(name)) {
                        (true, Some(to)) if i < self.member => Reply::HandOverAsked { to },
                        (true, _) => Reply::Accepted,
                        (false, _) => Reply::Rejected,
                    };
                    self.answer(now, &batch, i, reply);
                }
            }
            (BatchKind::HandOver, BatchReply::Matched(names)) => {
                for &i in &batch.items {
                    let reply = if names.is_empty() {
                        Reply::Rejected
                    } else {
                        Reply::Accepted
                    };
                    self.answer(now, &batch, i, reply);
                }
            }
            (BatchKind::Survey, BatchReply::Survey(rows)) => {
                self.on_survey(now, batch.sent_at, &rows)
            }
            // A reply of the wrong shape is a driver bug: a failed attempt.
            _ => self.fail_items(now, &batch, Failure::Transient),
        }
        // Every input checks the deadlines: a driver that goes from one
        // batch straight to the next (a database failing fast) must not
        // keep a lapsed term alive.
        self.handle_timeout(now);
    }

    /// The answer to a [`BatchKind::HandOver`], which runs the single-row
    /// hand-over statement: its [`Reply`] (`Accepted`: handed over;
    /// `Rejected`: the term had ended; `Failed`), read as the set's reply.
    /// Ignored unless `id` is the hand-over in flight.
    pub fn handle_row_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        let Some((lease, _)) = self
            .hand_over_in_flight()
            .filter(|_| self.in_flight.as_ref().is_some_and(|b| b.id == id))
        else {
            return;
        };
        let reply = match reply {
            Reply::Accepted => BatchReply::Matched(vec![lease.as_str().to_string()]),
            Reply::Failed(failure) => BatchReply::Failed(failure),
            _ => BatchReply::Matched(Vec::new()),
        };
        self.handle_reply(now, id, reply);
    }

    /// Carries one lease's answer to its machine, if the batch still
    /// carries its request.
    pub(super) fn answer(&mut self, now: Instant, batch: &InFlight, i: usize, reply: Reply) {
        let Some(request) = self.slots[i].sent.take() else {
            return;
        };
        if matches!(reply, Reply::Acquired { .. } | Reply::Held { .. }) {
            // The row answered for itself: an orphan this node tried is
            // taken, by it or by another (tried again, it would be taken
            // from whoever holds it now once that one gives it back).
            self.slots[i].untaken = None;
        }
        match &reply {
            Reply::Acquired { .. } => {
                let outranked = self.is_outranked(now);
                let slot = &mut self.slots[i];
                slot.seen = Seen::Free;
                // A lease handed to this node: its offer is used up.
                if slot.offered_until.take().is_some_and(|t| t > now) {
                    slot.handed_at = Some(now);
                    slot.handed_past_better = outranked;
                }
            }
            Reply::Held { expires_in, .. } => {
                let until = batch.sent_at + *expires_in;
                let believed_free = match self.slots[i].seen {
                    Seen::Free => true,
                    Seen::Held { until: Some(t) } => t <= batch.sent_at,
                    _ => false,
                };
                let stale = Duration::from_millis(self.stale_millis().unsigned_abs());
                if believed_free && *expires_in >= stale && i < self.member {
                    self.resurvey = true;
                    self.next_survey = self.next_survey.min(now);
                }
                self.slots[i].seen = Seen::Held { until: Some(until) };
                // Tried a little early (a lapsing row still had a few
                // milliseconds left): plan again right at its expiry
                // instead of waiting for the next survey.
                if *expires_in < stale {
                    let at = self.wakeups.partition_point(|&t| t < until);
                    if self.wakeups.get(at) != Some(&until) {
                        self.wakeups.insert(at, until);
                    }
                }
            }
            _ => {}
        }
        let held_elsewhere = matches!(reply, Reply::Held { .. });
        self.slots[i].machine.handle_reply(now, request, reply);
        if held_elsewhere && i < self.member {
            // Held by another node: no stealing, and no retrying at its
            // expiry either unless the survey shows it going stale.
            self.slots[i].machine.set_contending(now, false);
        }
        self.drain(now, i);
    }

    pub(super) fn fail_items(&mut self, now: Instant, batch: &InFlight, failure: Failure) {
        for &i in &batch.items {
            self.answer(now, batch, i, Reply::Failed(failure));
        }
    }

    /// Sends the next batch: renewals, then a hand-over and releases whose
    /// work stopped, then acquires, then the survey when due.
    pub(super) fn send_next(&mut self, now: Instant) {
        // Renewals first: a held lease's term never waits behind a batch
        // of another kind (a release of the surplus, an acquire), however
        // many batches a node holding thousands of leases needs.
        if self.send_due(now, BatchKind::Renew) {
            return;
        }
        // A hand-over whose work stopped: one lease, its own statement.
        if let Some(i) = (0..self.slots.len()).find(|&i| {
            let s = &self.slots[i];
            !s.stopping && matches!(s.queued, Some((_, Operation::HandOver { .. })))
        }) {
            return self.send(now, BatchKind::HandOver, vec![i]);
        }
        // Shutting down, the membership row goes last: while a lease of
        // this node is still held, stopping or being given up, its
        // membership row stays (renewing by liveness it is the liveness
        // those leases follow, DESIGN §9 "Renewal by liveness"; releasing it first made them
        // takeable while their works still stopped, on the simulator).
        let leases_out = !self.shutting_down
            || !self.template.by_liveness
            || (0..self.member).all(|i| {
                let s = &self.slots[i];
                s.machine.is_finished()
                    || (!s.machine.leadership().is_leader() && !s.stopping && s.queued.is_none())
            });
        let release: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                let s = &self.slots[i];
                !s.stopping
                    && matches!(s.queued, Some((_, Operation::Release { .. })))
                    && (i < self.member || leases_out)
            })
            .collect();
        if !release.is_empty() {
            return self.send(now, BatchKind::Release, release);
        }
        if self.resurvey && !self.shutting_down {
            return self.send(now, BatchKind::Survey, Vec::new());
        }
        // Nothing is written before the first survey has read the table:
        // a malformed table stops the set before its membership row is
        // written into it, as a lone lease's first acquire stops it.
        if self.surveys > 0 && self.send_due(now, BatchKind::Acquire) {
            return;
        }
        if !self.shutting_down && now >= self.next_survey {
            self.send(now, BatchKind::Survey, Vec::new());
        }
    }

    /// Sends the renewals (or the acquires) that are due, if any, with
    /// every one due within half an interval brought forward, so the
    /// leases of a node keep renewing (and polling) together.
    fn send_due(&mut self, now: Instant, kind: BatchKind) -> bool {
        // A lease whose last term's work has not stopped yet is not
        // acquired again: as a lone lease's, the next term starts only
        // once the work of the last has returned (DESIGN §5).
        let due = |s: &Slot| {
            matches!(
                (kind, s.queued),
                (BatchKind::Renew, Some((_, Operation::Renew { .. })))
            ) || (kind == BatchKind::Acquire
                && !s.stopping
                && matches!(s.queued, Some((_, Operation::Acquire))))
        };
        if !self.slots.iter().any(due) {
            return false;
        }
        let half = self.template.interval / 2;
        for i in 0..self.slots.len() {
            if self.slots[i].queued.is_none() {
                let leading = self.slots[i].machine.leadership().is_leader();
                if leading == (kind == BatchKind::Renew) {
                    self.slots[i].machine.hasten(now, half);
                    self.drain(now, i);
                }
            }
        }
        let items: Vec<usize> = (0..self.slots.len())
            .filter(|&i| due(&self.slots[i]))
            .collect();
        self.send(now, kind, items);
        true
    }

    fn send(&mut self, now: Instant, kind: BatchKind, mut items: Vec<usize>) {
        // Sorted by name, byte-wise: every batch on every node then locks
        // rows in one order (DESIGN §9), so batches never deadlock.
        items.sort_unstable_by(|&a, &b| {
            self.slots[a].name.as_str().cmp(self.slots[b].name.as_str())
        });
        // A renewal or release of at most MAX_BATCH leases (the membership
        // row rides along): the rest stay queued and go in the next batch
        // of their kind, sent as soon as this one is answered. Acquires are
        // not cut: a node short of thousands takes them in one statement
        // (nothing it holds waits on it), and cutting them slowed a
        // cluster's first election from 1.3 to 3.6 intervals (set_scale).
        if kind != BatchKind::Acquire && items.len() > MAX_BATCH {
            let member = self.member;
            let mut leases = 0;
            items.retain(|&i| {
                leases += usize::from(i < member);
                i >= member || leases <= MAX_BATCH
            });
        }
        self.next_request += 1;
        let id = RequestId(self.next_request);
        let mut batch = Batch {
            kind,
            items: Vec::with_capacity(items.len()),
        };
        for &i in &items {
            let slot = &mut self.slots[i];
            let (request, operation) = slot.queued.take().expect("only queued leases are batched");
            slot.sent = Some(request);
            batch.items.push((slot.name.clone(), operation.epoch()));
        }
        if kind == BatchKind::Survey {
            // The next survey is planned from this one's send; until its
            // reply, no other is due.
            self.next_survey = now + self.template.interval;
        }
        let give_up = now + self.template.request_timeout;
        let end_by = self
            .slots
            .iter()
            .filter_map(|s| s.machine.leader_deadline())
            .fold(give_up, Instant::min);
        self.in_flight = Some(InFlight {
            id,
            kind,
            items,
            sent_at: now,
            give_up,
        });
        self.commands.push_back(SetCommand::Execute {
            request: id,
            batch,
            end_by,
        });
    }
}
