//! The model database's side of a lease set's renewal by liveness (DESIGN
//! §9 "Renewal by liveness"): a linked row's effective expiry,
//! the end of a lapsed liveness, and the renewal that writes the liveness
//! and confirms linked rows by reading them. The statements that mirror
//! these rules are `sql::liveness`'s.

use std::collections::BTreeMap;

use super::{named, ModelDb, ModelRow, LINK_BASE};
use crate::names::Epoch;
use crate::sql::{Cell, MEMBER_PREFIX};

/// Whether `name` is `holder`'s liveness row: its membership row
/// (`set::member_row_name`: the prefix and the holder id, then nothing or
/// a space and a rank), not its unhealthy row (the prefix, `~`, the
/// holder id), exactly as the statements test it
/// (`sql::liveness`).
pub(super) fn is_liveness_of(name: &str, holder: &str) -> bool {
    name.strip_prefix(MEMBER_PREFIX)
        .and_then(|rest| rest.strip_prefix(holder))
        .is_some_and(|rank| rank.is_empty() || rank.starts_with(' '))
}

impl ModelDb {
    /// The liveness term a linked row names, `None` for a plain row.
    pub fn link(row: &ModelRow) -> Option<i64> {
        (row.expires_at >= LINK_BASE).then(|| row.expires_at - LINK_BASE)
    }

    /// `holder`'s liveness row at `term`, if it is still there: its
    /// membership row, held by it at that epoch, plain. As the statements
    /// look (`sql::liveness`): the row named the prefix and the id alone
    /// decides when there is one; a ranked row is looked for only when
    /// there is not.
    pub(super) fn liveness_at(&self, holder: &str, term: i64) -> Option<(&String, &ModelRow)> {
        let live = |row: &ModelRow| {
            row.holder.as_deref() == Some(holder) && row.epoch == term && row.expires_at < LINK_BASE
        };
        if let Some(exact) = self.rows.get_key_value(&format!("{MEMBER_PREFIX}{holder}")) {
            return live(exact.1).then_some(exact);
        }
        self.rows
            .range(MEMBER_PREFIX.to_string()..)
            .take_while(|(name, _)| name.starts_with(MEMBER_PREFIX))
            .find(|(name, row)| {
                is_liveness_of(name, holder)
                    && row.holder.as_deref() == Some(holder)
                    && row.epoch == term
                    && row.expires_at < LINK_BASE
            })
    }

    /// When `row` expires on the database's clock: its own expiry, or for
    /// a linked row its liveness row's (`now_ms` once that term is over).
    /// Read by a node renewing every row ([`ModelDb::as_every_row`]), a
    /// linked row's own `expires_at`, far ahead.
    pub fn expiry(&self, row: &ModelRow, now_ms: i64) -> i64 {
        if self.every_row_reader {
            return row.expires_at;
        }
        match (Self::link(row), row.holder.as_deref()) {
            (None, _) => row.expires_at,
            (Some(term), Some(holder)) => self
                .liveness_at(holder, term)
                .map_or(now_ms, |(_, live)| live.expires_at),
            (Some(_), None) => now_ms,
        }
    }

    /// Whether the linked row's liveness is over at `now_ms` (lapsed or
    /// ended); ends a lapsed one (the acquire's kill-write: its holder
    /// cleared, so the term never lives again). False for a plain row.
    pub(super) fn end_lapsed_liveness(&mut self, lease: &str, caller: &str, now_ms: i64) -> bool {
        let Some(row) = self.rows.get(lease) else {
            return false;
        };
        let (Some(term), Some(holder)) = (Self::link(row), row.holder.clone()) else {
            return false;
        };
        // The caller's own rows it takes anyway, and its own lapsed
        // liveness it takes back at its epoch: nobody ended it.
        if holder == caller {
            return false;
        }
        #[cfg(feature = "mutants")]
        if self.mutation == crate::state::Mutation::LinkedTakenWhileLive {
            return true;
        }
        let live = self
            .liveness_at(&holder, term)
            .map(|(name, live)| (name.clone(), live.expires_at));
        match live {
            None => true,
            Some((_, expires_at)) if expires_at > now_ms => false,
            Some(_) if self.keeps_lapsed => true,
            Some((name, _)) => {
                if let Some(live) = self.rows.get_mut(&name) {
                    live.holder = None;
                    live.expires_at = now_ms;
                    self.writes += 1;
                }
                true
            }
        }
    }

    /// Every live liveness row of `holder` (held, plain, unexpired, this
    /// server's), extended to `now_ms + ttl_ms`; their epochs (the
    /// terms). A row in `renewed` (renewed a moment ago by the same
    /// statement) is one write, not two.
    pub(super) fn extend_all_liveness(
        &mut self,
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
        renewed: &[&str],
    ) -> Vec<i64> {
        let incarnation = self.incarnation;
        let mut terms = Vec::new();
        for (name, row) in self.rows.iter_mut() {
            if is_liveness_of(name, holder)
                && row.holder.as_deref() == Some(holder)
                && row.expires_at < LINK_BASE
                && row.expires_at > now_ms
                && row.incarnation == incarnation
            {
                row.expires_at = now_ms + ttl_ms;
                if !renewed.contains(&name.as_str()) {
                    self.writes += 1;
                }
                terms.push(row.epoch);
            }
        }
        terms
    }

    /// The batch renew by liveness: the caller's liveness rows in the
    /// batch are renewed as [`ModelDb::renew`] renews them, and every
    /// other live liveness row of the caller is extended (a set's leases
    /// fall due apart from its membership row, and a node holding more
    /// than one batch's worth sends batches without it: what they confirm
    /// must last as long as a renewal sent now); the plain rows of the
    /// batch are renewed; a linked row is confirmed, not written, when it
    /// is the caller's at its epoch and linked to a term just renewed or
    /// extended. `name, epoch, asked` of each, in the batch's order.
    pub(super) fn renew_batch_by_liveness(
        &mut self,
        pairs: &[(&str, Epoch)],
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Vec<Vec<Cell>> {
        let mut terms = Vec::new();
        let mut answers: BTreeMap<&str, Vec<Cell>> = BTreeMap::new();
        for &(name, epoch) in pairs
            .iter()
            .filter(|(name, _)| is_liveness_of(name, holder))
        {
            let plain = self
                .rows
                .get(name)
                .is_some_and(|row| Self::link(row).is_none());
            if !plain {
                continue;
            }
            if let Some(mut row) = self.renew(name, holder, epoch, ttl_ms, now_ms).pop() {
                terms.push(epoch.to_i64());
                row.truncate(2);
                answers.insert(name, named(name, row));
            }
        }
        let renewed: Vec<&str> = answers.keys().copied().collect();
        terms.extend(self.extend_all_liveness(holder, ttl_ms, now_ms, &renewed));
        for &(name, epoch) in pairs
            .iter()
            .filter(|(name, _)| !is_liveness_of(name, holder))
        {
            let Some(link) = self
                .matching(name, holder, epoch)
                .map(|row| Self::link(row))
            else {
                continue;
            };
            let answer = match link {
                None => self.renew(name, holder, epoch, ttl_ms, now_ms).pop(),
                Some(link) if terms.contains(&link) => Some(vec![
                    Cell::Int(epoch.to_i64()),
                    self.asked_hand_over(name, epoch.to_i64()),
                ]),
                Some(_) => None,
            };
            if let Some(mut row) = answer {
                row.truncate(2);
                answers.insert(name, named(name, row));
            }
        }
        pairs
            .iter()
            .filter_map(|(name, _)| answers.remove(name))
            .collect()
    }
}
