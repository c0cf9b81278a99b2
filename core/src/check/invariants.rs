//! The invariants checked on every state reached: mutual exclusion,
//! validity and the stop lead (gating and fencing are checked on each
//! command, in the step relation).

use std::fmt::Write as _;

use super::bounds::TICK;
use super::world::{Setup, World, LEASE};
use super::{Property, Violation};
use crate::names::Epoch;
use crate::sim::DB_EPOCH_MS;
use crate::state::LeaseState;

pub(super) fn violation(property: Property, detail: String) -> Violation {
    Violation {
        property,
        detail,
        trace: String::new(),
        depth: 0,
    }
}

impl World {
    /// Mutual exclusion and validity, on the state reached.
    pub(super) fn check_state(&self, setup: &Setup) -> Option<Violation> {
        let leaders: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].leading())
            .collect();
        if let [a, b, ..] = leaders[..] {
            return Some(violation(
                Property::MutualExclusion,
                format!(
                    "n{a} and n{b} both lead at db tick {} (epochs {:?} and {:?})",
                    self.db_clock,
                    self.leader_epoch(a),
                    self.leader_epoch(b)
                ),
            ));
        }
        let now_ms = DB_EPOCH_MS + self.db_clock as i64;
        for &i in &leaders {
            let n = &self.nodes[i];
            let Some(epoch) = self.leader_epoch(i) else {
                continue;
            };
            let row = self.db.row(LEASE);
            let valid = row.is_some_and(|row| {
                row.holder.as_deref() == Some(n.holder.as_str())
                    && (row.epoch == epoch.to_i64() || n.fenced_out)
                    && row.expires_at > now_ms
            });
            if !valid {
                let mut detail = format!(
                    "n{i} ({}) leads at epoch {epoch} at db tick {}, but the row is ",
                    n.holder, self.db_clock
                );
                match row {
                    Some(r) => {
                        let _ = write!(
                            detail,
                            "({}, epoch {}, expires at db tick {})",
                            r.holder.as_deref().unwrap_or("free"),
                            r.epoch,
                            r.expires_at - DB_EPOCH_MS
                        );
                    }
                    None => detail.push_str("absent"),
                }
                return Some(violation(Property::Validity, detail));
            }
        }
        self.check_stop_lead(setup)
    }

    /// The stop lead `g` (`Config::stop_lead`): a node's work is stopped
    /// no later than its local `deadline − g` (at that very tick only
    /// while its timer, due then, has yet to run), and while the work runs
    /// the row is the node's with more than `g` database ticks left. A
    /// paused process's work is frozen with it; its timer runs first on
    /// resuming. With `g = 0` this is the deadline itself and validity.
    fn check_stop_lead(&self, setup: &Setup) -> Option<Violation> {
        let g = u64::from(setup.bounds.stop_lead_ticks);
        let now_ms = DB_EPOCH_MS + self.db_clock as i64;
        for (i, n) in self.nodes.iter().enumerate() {
            let (Some(epoch), true) = (n.work, n.running()) else {
                continue;
            };
            let deadline = n.lease.as_ref().and_then(LeaseState::leader_deadline);
            if let Some(deadline) = deadline {
                let stop = (deadline.as_nanos() / TICK.as_nanos() as u64).saturating_sub(g);
                if n.clock > stop || (n.clock == stop && !n.due()) {
                    return Some(violation(
                        Property::StopLead,
                        format!(
                            "n{i} runs the work of epoch {epoch} at local tick {}, its deadline − stop lead being {stop}",
                            n.clock
                        ),
                    ));
                }
            }
            let row = self.db.row(LEASE);
            let left = row
                .filter(|r| r.holder.as_deref() == Some(n.holder.as_str()))
                .map(|r| r.expires_at - now_ms);
            if left.is_none_or(|left| left <= g as i64) {
                return Some(violation(
                    Property::StopLead,
                    format!(
                        "n{i} runs the work of epoch {epoch} at db tick {} with {} left on its row (stop lead {g})",
                        self.db_clock,
                        left.map_or("nothing".to_string(), |l| format!("{l} ticks"))
                    ),
                ));
            }
        }
        None
    }

    pub(super) fn leader_epoch(&self, i: usize) -> Option<Epoch> {
        self.nodes[i]
            .lease
            .as_ref()
            .and_then(|l| l.leadership().leader_epoch())
    }
}
