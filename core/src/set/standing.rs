//! Who shares a set's leases (DESIGN §9 "Preferred members", "Members'
//! health"): the live members this node knows of, each with its
//! standing (healthy before unhealthy, then by rank), and the members the
//! share is split among.

use super::LeaseSet;
use crate::names::HolderId;
use crate::rank::Rank;
use crate::time::Instant;

/// A member's place in the share: healthy members before unhealthy ones,
/// then by rank (DESIGN §9 "Members' health"). The field order is the
/// order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Standing {
    pub(super) healthy: bool,
    pub(super) rank: Rank,
}

impl LeaseSet {
    /// The live members this node knows of (itself included), by holder
    /// id, as of `now`.
    pub fn members(&self, now: Instant) -> Vec<HolderId> {
        self.ranked_members(now)
            .into_iter()
            .map(|(h, _)| h)
            .collect()
    }

    /// The live members this node knows of (itself included) with the
    /// rank their membership rows carry, by holder id, as of `now`.
    pub fn ranked_members(&self, now: Instant) -> Vec<(HolderId, Rank)> {
        self.standings(now)
            .into_iter()
            .map(|(h, s)| (h, s.rank))
            .collect()
    }

    /// The live members this node knows of (itself included) that count
    /// as unhealthy (DESIGN §9 "Members' health"), by holder id, as of
    /// `now`.
    pub fn unhealthy_members(&self, now: Instant) -> Vec<HolderId> {
        self.standings(now)
            .into_iter()
            .filter(|(_, s)| !s.healthy)
            .map(|(h, _)| h)
            .collect()
    }

    /// Every live member's standing (itself included), one per holder id,
    /// by holder id. A member read with both rows (it is switching
    /// between them) counts as unhealthy.
    pub(super) fn standings(&self, now: Instant) -> Vec<(HolderId, Standing)> {
        let mut live: Vec<(HolderId, Standing)> = self
            .members
            .iter()
            .filter(|m| m.until > now)
            .map(|m| {
                let standing = Standing {
                    healthy: m.healthy,
                    rank: m.rank.clone(),
                };
                (m.holder.clone(), standing)
            })
            .chain(std::iter::once((
                self.template.holder.clone(),
                self.shared_standing(now),
            )))
            .collect();
        live.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.healthy.cmp(&b.1.healthy)));
        live.dedup_by(|a, b| a.0 == b.0);
        live
    }

    /// This node's standing as the others read it: its rank, and
    /// unhealthy once its probe failed **and** its unhealthy row is
    /// written. Until the row is written the others still count it in
    /// the share, so it keeps its part meanwhile; healthy again, it
    /// counts as healthy at once (the others catch up at their next
    /// survey, and meanwhile the shares only add up to more than every
    /// lease: contention, never a lease nobody aims for).
    pub(super) fn own_standing(&self) -> Standing {
        let marked = self
            .slots
            .get(self.member + 1)
            .is_some_and(|s| s.machine.leadership().is_leader());
        Standing {
            healthy: self.probe != Some(false) || !marked,
            rank: self.template.rank.clone(),
        }
    }

    /// This node's standing in the share as of `now`: its own standing,
    /// but unhealthy only once every other member has read its unhealthy
    /// row ([`LeaseSet::mark_known_at`]). Until then the others still
    /// count it in the share, so it keeps its part of it: giving leases
    /// up sooner (its surplus when every member is unhealthy) would leave
    /// them to nobody. An outranked node hands over at once all the same
    /// ([`LeaseSet::is_outranked`] reads its own standing): a hand-over
    /// names who takes the lease.
    fn shared_standing(&self, now: Instant) -> Standing {
        let mut standing = self.own_standing();
        if !standing.healthy && self.mark_known_at().is_none_or(|t| now < t) {
            standing.healthy = true;
        }
        standing
    }

    /// The live members the share is split among as of `now`: those of
    /// the best standing, healthy before unhealthy, then by rank (DESIGN
    /// §9 "Preferred members", "Members' health"), by holder id. This
    /// node is among them unless a live member outranks it.
    pub fn contenders(&self, now: Instant) -> Vec<HolderId> {
        let live = self.standings(now);
        let best = live.iter().map(|(_, s)| s).max().cloned();
        live.into_iter()
            .filter(|(_, s)| Some(s) == best.as_ref())
            .map(|(h, _)| h)
            .collect()
    }

    /// Whether a live member outranks this node as of `now` (a healthy
    /// one while this node is unhealthy, or one of a higher rank and the
    /// same health): then its share is nothing, and it hands what it
    /// holds to the best members.
    pub fn is_outranked(&self, now: Instant) -> bool {
        let own = self.own_standing();
        self.standings(now)
            .iter()
            .any(|(h, s)| *h != self.template.holder && *s > own)
    }
}
