//! The fair share: how many leases this node aims for, the surplus it
//! gives up and the free leases it competes for.

use super::{share, LeaseSet, Seen, SetCommand, Slot};
use crate::time::Instant;

impl LeaseSet {
    /// How many leases this node aims for as of `now` (its fair share), or
    /// `None` before the second survey. The first survey may miss nodes
    /// that started at the same moment (their membership rows not yet
    /// written); planning from it, the first node of a cluster started
    /// together would take every lease and then give most of them back.
    /// One interval later every node that started with it is visible.
    pub fn target(&self, now: Instant) -> Option<usize> {
        if self.surveys < 2 {
            return None;
        }
        // The share is split among the live members of the best rank; a
        // node a live member outranks aims for nothing.
        if self.is_outranked(now) {
            return Some(0);
        }
        let live = self.contenders(now);
        let Some(rank) = live.iter().position(|h| *h == self.template.holder) else {
            return Some(0);
        };
        #[cfg(feature = "mutants")]
        if self.mutation == crate::state::Mutation::SetShareRoundsDown {
            return Some(self.member / live.len().max(1));
        }
        Some(share::target(self.member, live.len(), rank))
    }

    /// How many more leases this node is after as of `now`: its target
    /// minus what it holds and what it is already trying for. A driver
    /// uses it to look for releases only while there is something to take
    /// (SQLite's change check).
    pub fn deficit(&self, now: Instant) -> usize {
        let Some(target) = self.target(now) else {
            return 0;
        };
        let have = self.slots[..self.member]
            .iter()
            .filter(|s| {
                !s.yielding && (s.machine.leadership().is_leader() || s.machine.is_contending())
            })
            .count();
        target.saturating_sub(have)
    }

    /// Whether the driver should look for other connections' commits as
    /// of `now` (SQLite: watch the file or poll its change counter, then
    /// [`LeaseSet::handle_survey_request`]): while this node is under its
    /// share (a release could give it a lease) or leads any lease (a
    /// forced release or an adoption could take one away: the survey
    /// lists the row and the lease's machine renews at once).
    pub fn wants_changes(&self, now: Instant) -> bool {
        !self.finished
            && !self.shutting_down
            && (self.deficit(now) > 0
                || self
                    .slots
                    .iter()
                    .enumerate()
                    .any(|(i, s)| i < self.member && s.machine.leadership().is_leader()))
    }

    /// After every input: plan the share, send the next batch, finish.
    pub(super) fn settle(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        self.plan(now);
        if self.in_flight.is_none() {
            self.send_next(now);
        }
        if self.shutting_down
            && self.in_flight.is_none()
            && self.slots.iter().all(|s| s.machine.is_finished())
        {
            self.finished = true;
            self.commands.push_back(SetCommand::Finished);
            return;
        }
        // Watching follows the share: told when it changes, after the
        // input's other commands.
        let wants = self.wants_changes(now);
        if wants != self.watching {
            self.watching = wants;
            self.commands.push_back(SetCommand::WatchChanges(wants));
        }
    }

    /// The fair share: give up the surplus, compete for the deficit.
    pub(super) fn plan(&mut self, now: Instant) {
        if self.shutting_down {
            return;
        }
        self.steer_membership(now);
        self.take_outside_share(now);
        let Some(target) = self.target(now) else {
            return;
        };
        let leases = self.member;
        let held: Vec<usize> = (0..leases)
            .filter(|&i| self.slots[i].machine.leadership().is_leader() && !self.slots[i].yielding)
            .collect();
        if held.len() > target {
            if self.is_outranked(now) {
                let held: Vec<usize> = held
                    .into_iter()
                    .filter(|&i| !self.kept_from_better(now, i))
                    .collect();
                self.hand_to_better(now, &held);
                return;
            }
            let mut surplus = held;
            // A lease handed to this node goes last: the handover named
            // this node, so the share moves another one instead.
            surplus.sort_by_key(|&i| (self.was_offered(now, i), self.slots[i].preference));
            for &i in &surplus[..surplus.len() - target] {
                self.slots[i].yielding = true;
                self.slots[i].machine.handle_shutdown(now);
                self.drain(now, i);
            }
            return;
        }
        let is_candidate = |s: &Slot| {
            !s.yielding
                && s.rest_until.is_none_or(|t| t <= now)
                && !s.machine.is_finished()
                && !s.machine.leadership().is_leader()
                && !s.machine.is_contending()
        };
        let mut competing: Vec<usize> = (0..leases)
            .filter(|&i| {
                let s = &self.slots[i];
                !s.yielding && !s.machine.leadership().is_leader() && s.machine.is_contending()
            })
            .collect();
        let want = target - held.len();
        if competing.len() > want {
            // Fewer needed (a lease was won, the share shrank): stop the
            // attempts this node prefers least that are not in flight.
            competing.sort_by_key(|&i| self.slots[i].preference);
            let mut extra = competing.len() - want;
            for &i in &competing {
                if extra == 0 {
                    break;
                }
                if !self.slots[i].machine.is_busy()
                    && !self.is_offered(now, i)
                    && !self.is_orphan(now, i)
                {
                    self.slots[i].machine.set_contending(now, false);
                    self.drain(now, i);
                    extra -= 1;
                }
            }
            return;
        }
        let need = want - competing.len();
        if need == 0 || self.resurvey {
            return;
        }
        self.assign_among_contenders(now);
        // The leases assigned to this node, then the others; within
        // each, free or lapsed rows before rows never seen, the most
        // preferred first.
        let mut candidates: Vec<(u8, std::cmp::Reverse<u64>, usize)> = (0..leases)
            .filter(|&i| is_candidate(&self.slots[i]))
            .filter_map(|i| {
                let rank = match self.slots[i].seen {
                    Seen::Free => 0,
                    Seen::Held { until: Some(t) } if t <= now => 0,
                    Seen::Unknown => 1,
                    Seen::Held { .. } => return None,
                };
                let rank = if self.assigned_here.get(i).copied().unwrap_or(false) {
                    rank
                } else {
                    rank + 2
                };
                Some((rank, std::cmp::Reverse(self.slots[i].preference), i))
            })
            .collect();
        // Only the best `need` are wanted: select them in linear time
        // (a set may have 100,000 leases and plans after every input).
        if candidates.len() > need {
            candidates.select_nth_unstable(need);
            candidates.truncate(need);
        }
        candidates.sort_unstable();
        for &(_, _, i) in &candidates {
            self.slots[i].machine.set_contending(now, true);
            self.slots[i].machine.handle_release_notice(now);
            self.drain(now, i);
        }
    }

    /// A lease reserved for this node (the survey read the reservation):
    /// it competes at once, whatever the share.
    fn is_offered(&self, now: Instant, i: usize) -> bool {
        self.slots[i].offered_until.is_some_and(|t| t > now)
    }

    /// A lease handed to this node that it took within the last ttl, or
    /// one offered to it now.
    fn was_offered(&self, now: Instant, i: usize) -> bool {
        self.is_offered(now, i)
            || self.slots[i]
                .handed_at
                .is_some_and(|t| now < t + self.template.ttl)
    }

    /// A lease handed to this node past a member that outranked it when
    /// taken, within the last ttl: not handed back to the better member,
    /// which would undo the handover. That member is most often the one
    /// leaving, whose membership row goes last renewing by liveness
    /// (DESIGN §9 "Renewal by liveness"): handing its leases back left
    /// them with nobody until it was gone (1.0 s at ttl 2 s on the
    /// simulator, instead of 15 ms). A lease handed here before a better
    /// member came is handed on at once, as before.
    fn kept_from_better(&self, now: Instant, i: usize) -> bool {
        let s = &self.slots[i];
        s.handed_past_better && s.handed_at.is_some_and(|t| now < t + self.template.ttl)
    }

    /// Renewing by liveness (only then is `untaken` kept): a lease the
    /// surveys have read lapsed under the same term, untaken, for a whole
    /// ttl. Every node whose share wants a lapsed lease tries it at its
    /// expiry and takes it within an interval, so one left a ttl is in
    /// nobody's reach: in a fleet mid-upgrade, a linked row of a crashed
    /// node that renewed by liveness, which the nodes renewing every row
    /// read as held far ahead (DESIGN §9 "Renewal by liveness", "Older
    /// versions never take a linked row"). A member that a live member outranks (or a healthy
    /// one, when this one is not) takes no orphan: it would only hand it
    /// on.
    fn is_orphan(&self, now: Instant, i: usize) -> bool {
        self.slots[i]
            .untaken
            .is_some_and(|(_, since)| now >= since + self.template.ttl)
            && !self.is_outranked(now)
    }

    /// Competes, whatever the share, for every lease reserved for this
    /// node that it does not hold or try for yet (DESIGN §3 "Planned
    /// handover"), and for every orphan ([`LeaseSet::is_orphan`]). The
    /// acquire never steals, so an orphan is only ever taken as a lapsed
    /// row; once held it is over this node's target, and the share gives
    /// the surplus back by a release: a plain free row, which every node
    /// can take, the ones renewing every row too.
    fn take_outside_share(&mut self, now: Instant) {
        for i in 0..self.member {
            let s = &self.slots[i];
            if (self.is_offered(now, i) || self.is_orphan(now, i))
                && !s.yielding
                && s.rest_until.is_none_or(|t| t <= now)
                && !s.machine.is_finished()
                && !s.machine.leadership().is_leader()
                && !s.machine.is_contending()
            {
                self.slots[i].machine.set_contending(now, true);
                self.slots[i].machine.handle_release_notice(now);
                self.drain(now, i);
            }
        }
    }

    /// Recomputes which leases are assigned to this node among the
    /// contenders ([`share::assign`]), when they changed: O(leases ×
    /// members), once per membership change.
    fn assign_among_contenders(&mut self, now: Instant) {
        let live = self.contenders(now);
        if live == self.assigned_among && self.assigned_here.len() == self.member {
            return;
        }
        let me = live.iter().position(|h| *h == self.template.holder);
        let names: Vec<&str> = self.slots[..self.member]
            .iter()
            .map(|slot| slot.name.as_str())
            .collect();
        self.assigned_here = share::assign(&live, &names)
            .into_iter()
            .map(|k| Some(k) == me)
            .collect();
        self.assigned_among = live;
    }
}
