//! Planned handover in a lease set (DESIGN §3 "Planned handover", §9):
//! one lease handed to a named node by its own machine, a whole node
//! leaving ("hand over, then exit"), and what the set does around a
//! lease being handed over. The statement itself is the lone lease's
//! single-row hand-over, sent as a [`BatchKind::HandOver`] (`batch.rs`);
//! the node a lease is handed to takes it in `plan.rs::take_outside_share`.

use super::{share, BatchKind, LeaseSet, Seen};

/// How many leases an outranked node hands over at once.
pub const YIELD_WINDOW: usize = 8;
use crate::names::{HolderId, LeaseName};
use crate::protocol::Demotion;
use crate::time::Instant;

impl LeaseSet {
    /// Hands `lease` over (DESIGN §3 "Planned handover"), as a lone
    /// lease's [`handle_hand_over`](crate::LeaseState::handle_hand_over)
    /// does: if this node leads it, its work stops, then one statement (a [`BatchKind::HandOver`])
    /// reserves the row for `to`, or with `None` releases it. The node
    /// stays in the set and does not try that lease again while the
    /// reservation lasts: the share may bring it back later. Returns
    /// whether it led, and so hands over.
    pub fn handle_hand_over(&mut self, now: Instant, lease: &str, to: Option<HolderId>) -> bool {
        if self.finished {
            return false;
        }
        self.step_deadlines(now);
        if self.shutting_down {
            return false;
        }
        let Some(&i) = self.index.get(lease).filter(|&&i| i < self.member) else {
            return false;
        };
        // A lease already given up for the share is on its way out.
        if self.slots[i].yielding {
            return false;
        }
        let led = self.slots[i].machine.handle_hand_over(now, to);
        self.drain(now, i);
        self.settle(now);
        led
    }

    /// Leave the set's contention by handing every lease this node leads
    /// over, then shut down: "hand over, then exit" (`run`'s SIGUSR1 with
    /// several names). Each lease goes to the live member of the best rank
    /// among the others (by the last survey) that ranks first for it
    /// ([`share::preference`], the rendezvous order the share uses), so it
    /// lands where the share will keep it once this node is gone; with no
    /// other live member it is released. Then [`LeaseSet::handle_shutdown`]:
    /// no lease is reached for meanwhile, the membership row is released,
    /// `Finished` once every statement is answered. Returns how many
    /// leases are handed to a member.
    pub fn handle_leave(&mut self, now: Instant) -> usize {
        if self.finished {
            return 0;
        }
        self.step_deadlines(now);
        if self.shutting_down {
            return 0;
        }
        let others = self.successors(now);
        let mut handed = 0;
        for i in 0..self.member {
            let slot = &self.slots[i];
            if slot.yielding || !slot.machine.leadership().is_leader() {
                continue;
            }
            let to = Self::successor_for(&others, slot.name.as_str())
                .and_then(|h| HolderId::reserved_for(h.node()).ok());
            handed += usize::from(to.is_some());
            self.slots[i].machine.handle_hand_over(now, to);
            self.drain(now, i);
        }
        self.handle_shutdown(now);
        handed
    }

    /// The live members other than this node of the best standing among
    /// them (healthy first, then by rank), by the last survey: where this node's leases go when it leaves or
    /// is outranked.
    fn successors(&self, now: Instant) -> Vec<HolderId> {
        let others: Vec<_> = self
            .standings(now)
            .into_iter()
            .filter(|(h, _)| *h != self.template.holder)
            .collect();
        let best = others.iter().map(|(_, s)| s).max().cloned();
        others
            .into_iter()
            .filter(|(_, s)| Some(s) == best.as_ref())
            .map(|(h, _)| h)
            .collect()
    }

    /// The one of `successors` that ranks first for `lease`.
    fn successor_for<'a>(successors: &'a [HolderId], lease: &str) -> Option<&'a HolderId> {
        successors
            .iter()
            .max_by_key(|h| share::preference(h, lease))
    }

    /// A live member outranks this node (DESIGN §9 "Preferred members",
    /// "Members' health"): the leases in `held` go to the best members,
    /// each by its own planned handover, at most [`YIELD_WINDOW`] at a
    /// time so the others stay led (and renewed) until their turn. What
    /// this node holds (and is handing over) is split among the best
    /// members as the share splits leases ([`share::target`], by holder
    /// id), and each lease goes to the member still owed one that ranks
    /// first for it ([`share::preference`]), so that no member is handed
    /// more than its part and has to give a lease up again at once. A lease whose successor runs on this node's own node
    /// is released instead: a reservation names a node, and this node
    /// would read it as its own.
    pub(super) fn hand_to_better(&mut self, now: Instant, held: &[usize]) {
        let better = self.successors(now);
        let reservations: Vec<Option<HolderId>> = better
            .iter()
            .map(|h| HolderId::reserved_for(h.node()).ok())
            .collect();
        // What is on its way already, to whom.
        let mut in_flight = vec![0usize; better.len()];
        let mut handing = 0;
        for i in 0..self.member {
            let Some(to) = self.slots[i]
                .machine
                .successor()
                .filter(|_| self.slots[i].machine.is_handing_over())
            else {
                continue;
            };
            handing += 1;
            if let Some(k) = reservations.iter().position(|r| r.as_ref() == Some(to)) {
                in_flight[k] += 1;
            }
        }
        // What this node holds, split among them as the share splits.
        let total = held.len() + handing;
        let mut owed: Vec<usize> = (0..better.len())
            .map(|k| share::target(total, better.len(), k).saturating_sub(in_flight[k]))
            .collect();
        let mine = self.template.holder.node().to_string();
        // Outranked for health (a healthy member is live), or for rank.
        let for_health = self
            .standings(now)
            .iter()
            .any(|(h, s)| *h != self.template.holder && s.healthy);
        for &i in held.iter().take(YIELD_WINDOW.saturating_sub(handing)) {
            let lease = self.slots[i].name.as_str();
            let pick = |owing: bool| {
                (0..better.len())
                    .filter(|&k| !owing || owed[k] > 0)
                    .max_by_key(|&k| share::preference(&better[k], lease))
            };
            let k = pick(true).or_else(|| pick(false));
            if let Some(k) = k {
                owed[k] = owed[k].saturating_sub(1);
            }
            let to = k
                .filter(|&k| better[k].node() != mine)
                .and_then(|k| reservations[k].clone());
            if to.is_some() {
                // Said as what moved it: a better rank, or this node's
                // failing probe (DESIGN §9 "Members' health").
                let reason = if self.own_standing().healthy || !for_health {
                    Demotion::HandedOver
                } else {
                    Demotion::Unhealthy
                };
                self.slots[i].machine.hand_over_because(now, to, reason);
            } else {
                self.slots[i].yielding = true;
                self.slots[i].machine.handle_shutdown(now);
            }
            self.drain(now, i);
        }
    }

    /// The lease and the reservation of the [`BatchKind::HandOver`] in
    /// flight, if that is what is in flight: what the driver binds to the
    /// single-row hand-over statement it runs for it (`None` as the
    /// reservation never comes: a plain release goes in a release batch).
    pub fn hand_over_in_flight(&self) -> Option<(&LeaseName, Option<&HolderId>)> {
        let batch = self.in_flight.as_ref()?;
        if batch.kind != BatchKind::HandOver {
            return None;
        }
        let slot = &self.slots[*batch.items.first()?];
        Some((&slot.name, slot.machine.successor()))
    }

    /// A held lease is being handed over (by this node's call or an
    /// operator's request): its machine stays a follower but competes no
    /// more, and the share leaves the lease alone for the reservation, so
    /// the successor has it to itself; if the successor never takes it,
    /// this node may again once it lapses (no lease stuck on a node that
    /// went away).
    pub(super) fn after_hand_over(&mut self, now: Instant, i: usize) {
        let until = now + self.template.reservation();
        let slot = &mut self.slots[i];
        slot.rest_until = Some(until);
        slot.offered_until = None;
        slot.untaken = None;
        slot.seen = Seen::Held { until: None };
        slot.machine.set_contending(now, false);
        let at = self.wakeups.partition_point(|&t| t < until);
        self.wakeups.insert(at, until);
    }
}
