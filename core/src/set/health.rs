//! Members' health (DESIGN §9 "Members' health", §5 "Work that fails"):
//! what a set's node does with its health probe's verdicts.
//!
//! A set does not weigh health per lease: its **membership row** says it.
//! While the probe fails the node holds its unhealthy row
//! ([`super::unhealthy_row_name`]) instead of its membership row, and the
//! others read it as a member of a lower standing than every healthy one
//! ([`LeaseSet::contenders`]). So the share goes to the healthy members;
//! an unhealthy one aims for nothing and hands what it leads to the best
//! of them by the same planned handovers as an outranked member (the
//! rank's path, `hand_to_better`); when no member is healthy they all
//! stand equal and share as before, so someone leads every lease, and
//! nothing moves among them for health alone.
//!
//! The switch is make-before-break: the row of the new health is taken
//! first and the other released once it is held, so the node never drops
//! out of the members' list; the node counts itself unhealthy only once
//! its unhealthy row is written (the others cannot read it sooner).
//! Renewing by liveness (DESIGN §9 "Renewal by liveness"), the membership row is never given
//! up for health: it is the liveness everything the node holds is linked
//! to, so the unhealthy row is held beside it.

use super::{LeaseSet, Slot};
use crate::time::Instant;

impl LeaseSet {
    /// The health probe's verdict at `now`. Unhealthy, the node writes its
    /// unhealthy row, then hands its leases to the healthy members; healthy
    /// again, it writes its membership row back and takes its share again.
    /// A node whose probe never reports keeps its membership row alone.
    pub fn handle_health(&mut self, now: Instant, healthy: bool) {
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        self.probe = Some(healthy);
        if self.shutting_down {
            return;
        }
        self.settle(now);
    }

    /// Whether the health probe last passed (true without a probe).
    pub fn is_healthy(&self) -> bool {
        self.probe != Some(false)
    }

    /// Holds the row that says this node's health, and gives up the other
    /// once it is held (make before break).
    pub(super) fn steer_membership(&mut self, now: Instant) {
        if self.probe.is_none() {
            return;
        }
        let Some(unhealthy) = self.unhealthy_slot(now) else {
            return;
        };
        let (want, other) = if self.is_healthy() {
            (self.member, unhealthy)
        } else {
            (unhealthy, self.member)
        };
        let wanted = &mut self.slots[want];
        if !wanted.yielding
            && !wanted.machine.is_finished()
            && !wanted.machine.leadership().is_leader()
            && !wanted.machine.is_contending()
        {
            wanted.machine.set_contending(now, true);
            wanted.machine.handle_release_notice(now);
            self.drain(now, want);
        }
        let held = self.slots[want].machine.leadership().is_leader();
        if !self.is_healthy() && held && self.marked_at.is_none() {
            self.marked_at = Some(now);
            let known = self.mark_known_at().expect("just set");
            let at = self.wakeups.partition_point(|&t| t < known);
            self.wakeups.insert(at, known);
        } else if self.is_healthy() {
            self.marked_at = None;
        }
        // Renewing by liveness, the membership row is the liveness the
        // node's leases (and its unhealthy row) are linked to: released,
        // it would end them all at once, each takeable while this node
        // still led it. The node keeps it and holds its unhealthy row
        // beside it; the others read a member with both rows as
        // unhealthy (`standings`). Healthy again, it gives the unhealthy
        // row up as before.
        if self.template.by_liveness && other == self.member {
            return;
        }
        let rest = &mut self.slots[other];
        if rest.machine.leadership().is_leader() {
            if held && !rest.yielding {
                rest.yielding = true;
                rest.machine.handle_shutdown(now);
                self.drain(now, other);
            }
        } else if rest.machine.is_contending() && !rest.machine.is_busy() {
            rest.machine.set_contending(now, false);
            self.drain(now, other);
        }
    }

    /// When the others have all read this node's unhealthy row: an
    /// interval (each surveys once an interval) and a request timeout (the
    /// survey's own time) after it was first held.
    pub(super) fn mark_known_at(&self) -> Option<Instant> {
        self.marked_at
            .map(|t| t + self.template.interval + self.template.request_timeout)
    }

    /// The unhealthy row's slot, added at the probe's first verdict (a
    /// set without a probe never carries it).
    fn unhealthy_slot(&mut self, now: Instant) -> Option<usize> {
        let i = self.member + 1;
        if self.slots.len() == i {
            let slot = Slot::new(&self.template, i, self.unhealthy_row.clone(), now).ok()?;
            self.index.insert(slot.name.as_str().to_string(), i);
            self.slots.push(slot);
            #[cfg(feature = "mutants")]
            self.slots[i].machine.set_mutation(self.mutation);
        }
        Some(i)
    }
}
