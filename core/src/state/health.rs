//! A node's health as an input of its machine (DESIGN §5 "Work that
//! fails"): what a health probe says, and a cool-down after the work
//! escalated ([`crate::supervision`]). The decisions are these:
//!
//! - **A healthy node that has a probe announces itself** as a candidate
//!   (DESIGN §3 "Preferred holders"), whatever its rank; an unhealthy one
//!   never does. So a live announcement names a healthy node.
//! - **An unhealthy leader yields to any live candidate** on another node
//!   (by the planned handover: no leaderless gap beyond it), at once if
//!   its last renewal read one, else at the renewal that reads one. With
//!   none it keeps the lease: a degraded leader is better than none, and
//!   the lease does not move among nodes that are all unhealthy.
//! - **An unhealthy follower leaves a lapsed lease to the healthy**: it
//!   tries only [`Config::reservation`](crate::Config::reservation) (two
//!   intervals) after the expiry it saw, while a healthy follower tries
//!   within an interval of it, and it ignores release notices. When no
//!   healthy follower is there, it still takes the lease, that much
//!   later.
//! - **Escalation** (the work failed past its restart intensity): a
//!   healthy leader hands the lease to the candidate its last renewal
//!   read, else releases it, and the node counts as unhealthy for the
//!   cool-down. A leader already unhealthy keeps the lease (degraded), so
//!   each node moves the lease at most once per cool-down.

use std::time::Duration;

use super::{LeaseState, Phase, Standing};
use crate::names::Epoch;
use crate::protocol::Demotion;
use crate::time::Instant;

impl LeaseState {
    /// Whether this node counts as healthy at `now`: its probe (if it has
    /// one) last said so, and no cool-down after an escalation runs.
    pub fn is_healthy(&self, now: Instant) -> bool {
        self.probe != Some(false) && self.cool_down_until.is_none_or(|until| now >= until)
    }

    /// The health probe's verdict at `now`. The first report makes the
    /// node one that announces itself while healthy. Unhealthy, a leader
    /// hands the lease to the live candidate its last renewal read (if
    /// any; else at the renewal that reads one); a follower steps back.
    /// Healthy again, a follower tries and announces at once.
    pub fn handle_health(&mut self, now: Instant, healthy: bool) {
        if self.phase != Phase::Electing {
            self.probe = Some(healthy);
            return;
        }
        self.check_deadline(now);
        let was = self.is_healthy(now);
        self.probe = Some(healthy);
        self.health_changed(now, was, Demotion::Unhealthy);
        self.advance(now);
    }

    /// A health probe will report (DESIGN §5 "Work that fails"): until
    /// its first verdict the node counts as unhealthy, so a node started
    /// with a bad release does not win a free lease before its probe has
    /// run. It announces nothing and tries only
    /// [`Config::reservation`](crate::Config::reservation) (two intervals)
    /// from `now`, or after the expiry it saw; a first verdict of healthy
    /// lets it try at once. Given before any other input; ignored once a
    /// verdict was heard or a term began.
    pub fn await_health(&mut self, now: Instant) {
        if self.probe.is_some() || self.standing != Standing::Follower {
            return;
        }
        self.probe = Some(false);
        if let Some(wait) = self.degraded_wait(now) {
            self.next_attempt = self.next_attempt.max(now + wait);
        }
    }

    /// The work of term `term` failed more often than its restart policy
    /// allows ([`crate::supervision::Verdict::Escalate`]): the node counts
    /// as unhealthy for `cool_down`. A healthy leader of that term (`None`:
    /// of whatever term it leads) hands the lease to the candidate its
    /// last renewal read, else releases it; one already unhealthy keeps it
    /// (degraded), and so does the leader of a later term (the escalation
    /// came late).
    pub fn handle_work_escalated(
        &mut self,
        now: Instant,
        term: Option<Epoch>,
        cool_down: Duration,
    ) {
        if self.phase != Phase::Electing {
            return;
        }
        self.check_deadline(now);
        let was = self.is_healthy(now);
        let until = now + cool_down;
        self.cool_down_until = Some(self.cool_down_until.map_or(until, |u| u.max(until)));
        let of_this_term = match self.standing {
            Standing::Leader { epoch, .. } => term.is_none_or(|term| term == epoch),
            Standing::Follower => false,
        };
        if was && of_this_term && !self.ignores_own_health() {
            let to = self
                .preferred
                .as_ref()
                .and_then(|candidate| candidate.successor_from(self.config.holder.node()));
            self.hand_over_because(now, to, Demotion::Escalated);
        } else {
            self.health_changed(now, was, Demotion::Escalated);
        }
        self.advance(now);
    }

    /// The end of the running cool-down, if one runs at `now`.
    pub fn cool_down_until(&self, now: Instant) -> Option<Instant> {
        self.cool_down_until.filter(|&until| now < until)
    }

    /// Acts on a change of health (`was` before, now after).
    fn health_changed(&mut self, now: Instant, was: bool, reason: Demotion) {
        let is = self.is_healthy(now);
        match (was, is, &self.standing) {
            (true, false, Standing::Leader { .. }) => {
                if self.ignores_own_health() {
                    return;
                }
                let to = self
                    .preferred
                    .as_ref()
                    .and_then(|candidate| candidate.successor_from(self.config.holder.node()));
                if to.is_some() {
                    self.hand_over_because(now, to, reason);
                }
            }
            (true, false, Standing::Follower) => {
                if let Some(wait) = self.degraded_wait(now) {
                    self.next_attempt = self.next_attempt.max(now + wait);
                }
            }
            (false, true, Standing::Follower) => {
                self.next_attempt = self.next_attempt.min(now);
                self.next_announce = self.next_announce.min(now);
            }
            _ => {}
        }
    }

    /// Whether a follower announces itself (with its announcement, when
    /// due): with a rank above the lowest, or with a probe that says it
    /// is healthy; never while unhealthy (a cool-down counts until
    /// [`LeaseState::end_cool_down`] has seen it pass).
    pub(super) fn announces(&self) -> bool {
        (!self.config.rank.is_lowest() || self.probe == Some(true))
            && self.probe != Some(false)
            && self.cool_down_until.is_none()
    }

    /// Ends a cool-down that has passed at `now`, acting as on any other
    /// return to health (called by every input, before anything is sent).
    pub(super) fn end_cool_down(&mut self, now: Instant) {
        if self.cool_down_until.is_some_and(|until| now >= until) {
            self.cool_down_until = None;
            if self.phase == Phase::Electing && self.probe != Some(false) {
                // Healthy again: a follower tries and announces at once.
                if self.standing == Standing::Follower {
                    self.next_attempt = self.next_attempt.min(now);
                    self.next_announce = self.next_announce.min(now);
                }
            }
        }
    }

    /// How long after a lapse an unhealthy follower waits before it tries
    /// (two intervals, the reservation), `None` while healthy.
    pub(super) fn degraded_wait(&self, now: Instant) -> Option<Duration> {
        (!self.is_healthy(now)).then(|| self.config.reservation())
    }

    /// True when an unhealthy leader yields to any live candidate.
    pub(super) fn yields_for_health(&self, now: Instant) -> bool {
        !self.is_healthy(now) && !self.ignores_own_health()
    }
}
