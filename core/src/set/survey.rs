//! The survey: one read per interval of the live membership rows and the
//! free or stale lease rows, and what the set learns from it.

use std::time::Duration;

use super::{read_member_row, LeaseSet, Member, Seen};
use crate::sql::{LeaseRow, MEMBER_PREFIX};
use crate::time::Instant;

impl LeaseSet {
    /// The survey's staleness bound in milliseconds: a lease row with less
    /// time left than this was not renewed for at least an interval, so
    /// the survey lists it (with the free and lapsed ones) and this node
    /// can try it right at its expiry. ttl − 2·interval, at least one
    /// interval.
    pub fn stale_millis(&self) -> i64 {
        let stale = self
            .template
            .ttl
            .saturating_sub(self.template.interval * 2)
            .max(self.template.interval);
        i64::try_from(stale.as_millis()).unwrap_or(i64::MAX)
    }

    /// Survey at once: the database changed in a way the driver cannot
    /// attribute to a lease (the SQLite change check), or notices may have
    /// been lost (PostgreSQL's listener reconnected).
    pub fn handle_survey_request(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        if self.shutting_down {
            return;
        }
        self.next_survey = self.next_survey.min(now);
        self.settle(now);
    }

    pub(super) fn on_survey(&mut self, now: Instant, sent_at: Instant, rows: &[LeaseRow]) {
        self.surveys = self.surveys.saturating_add(1);
        self.resurvey = false;
        self.next_survey = sent_at + self.template.interval;
        self.members.clear();
        self.wakeups.clear();
        let resting = self
            .slots
            .iter()
            .filter_map(|s| s.rest_until)
            .filter(|&t| t > now);
        self.wakeups.extend(resting);
        self.wakeups
            .extend(self.mark_known_at().filter(|&t| t > now));
        let stale = Duration::from_millis(self.stale_millis().unsigned_abs());
        let mut listed = vec![false; self.member];
        for row in rows {
            let left = row.expires_in_ms.unwrap_or(0);
            let until = sent_at + Duration::from_millis(left.max(0).unsigned_abs());
            if row.name.starts_with(MEMBER_PREFIX) {
                let Some(read) = read_member_row(&row.name, row.holder.as_deref()) else {
                    continue;
                };
                if read.holder == self.template.holder || left <= 0 {
                    continue;
                }
                self.members.push(Member {
                    holder: read.holder,
                    rank: read.rank,
                    healthy: read.healthy,
                    row: row.name.clone(),
                    until,
                });
                if until < sent_at + stale {
                    self.wakeups.push(until);
                }
                continue;
            }
            let Some(&i) = self.index.get(&row.name) else {
                continue;
            };
            if i >= self.member {
                continue;
            }
            listed[i] = true;
            let by_liveness = self.template.by_liveness;
            let ttl = self.template.ttl;
            let slot = &mut self.slots[i];
            // Lapsed under a holder (not free, not reserved): how long it
            // has stayed so decides whether it is an orphan (plan.rs).
            let lapsed = (by_liveness
                && left <= 0
                && row.holder.is_some()
                && row.reserved_for().is_none()
                && !slot.machine.leadership().is_leader())
            .then_some(row.epoch);
            slot.untaken = match (lapsed, slot.untaken) {
                (Some(term), Some((seen, since))) if seen == term => Some((term, since)),
                (Some(term), _) => Some((term, sent_at)),
                (None, _) => None,
            };
            if let Some((_, since)) = slot.untaken {
                self.wakeups.push(since + ttl);
            }
            if slot.machine.leadership().is_leader() {
                // Listed while held: stale (its renewals are late) or
                // taken away (a forced release, an adoption). Its machine
                // renews at once unless the row is still its own.
                slot.machine.handle_row_seen(now, sent_at, row);
                self.drain(now, i);
                continue;
            }
            // Handed over to this node: its to take, whatever the share.
            let reservation = self.template.holder.reservation();
            if left > 0 && row.holder.as_deref() == Some(reservation.as_str()) {
                slot.offered_until = Some(until);
            }
            // A row without a holder but with time left is in its grace
            // period after a server change (DESIGN §3 "Failover"): held
            // by nobody until then. One reserved for this node is as good
            // as free to it.
            let free = left <= 0 || slot.offered_until.is_some_and(|t| t > now);
            slot.seen = if free {
                Seen::Free
            } else {
                self.wakeups.push(until);
                Seen::Held { until: Some(until) }
            };
            slot.machine.handle_row_seen(now, sent_at, row);
            self.drain(now, i);
        }
        for (i, listed) in listed.into_iter().enumerate() {
            if !listed {
                self.slots[i].untaken = None;
            }
            if !listed && self.slots[i].seen != Seen::Unknown {
                // Not free and not stale: someone renews it on time.
                self.slots[i].seen = Seen::Held { until: None };
            }
        }
        self.wakeups.sort_unstable();
        self.wakeups.dedup();
        self.wakeups.retain(|&t| t > now);
    }
}
