//! The invariants checked on every state reached, per lease, for both
//! models: mutual exclusion, validity and the stop lead (DESIGN §6; for a
//! set, §9's "no lease is worked by two nodes, work runs only while its
//! row is the node's at that epoch and unexpired"). Gating and fencing are
//! checked on each command, in each model's hooks; liveness and progress
//! in the step relation; no stealing on each acquire a set's batch runs.

use super::bounds::TICK;
use super::contender::Contender;
use super::world::{Setup, World};
use super::{Property, Violation};
use crate::sim::{ModelRow, DB_EPOCH_MS};

pub(super) fn violation(property: Property, detail: String) -> Violation {
    Violation {
        property,
        detail,
        trace: String::new(),
        depth: 0,
    }
}

fn row_text(row: Option<&ModelRow>) -> String {
    match row {
        Some(r) => format!(
            "({}, epoch {}, expires at db tick {})",
            r.holder.as_deref().unwrap_or("free"),
            r.epoch,
            r.expires_at - DB_EPOCH_MS
        ),
        None => "absent".to_string(),
    }
}

impl<N: Contender> World<N> {
    /// Every lease: at most one node leads it (twins included), a leader's
    /// row is its own at its epoch, unexpired (after a stray acquire of its
    /// own, `fenced_out`, its own at any epoch), and work runs only on such
    /// a row with more than the stop lead `g` left, stopped by its local
    /// `deadline − g` (at that very tick only while its timer, due then,
    /// has yet to run). A paused process's work is frozen with it; its
    /// timer runs first on resuming. With `g = 0` this is the deadline
    /// itself, and validity.
    pub(super) fn check_state(&self, setup: &Setup) -> Option<Violation> {
        let now_ms = DB_EPOCH_MS + self.db_clock as i64;
        let g = u64::from(setup.bounds.stop_lead_ticks);
        let lone = setup.bounds.leases == 0;
        for (k, name) in setup.names.iter().enumerate() {
            // How the lease is named in a detail: not at all when it is
            // the only one.
            let lease = || {
                if lone {
                    String::new()
                } else {
                    format!(" {name}")
                }
            };
            let of_lease = || {
                if lone {
                    String::new()
                } else {
                    format!(" of {name}")
                }
            };
            let leaders: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].leading(k))
                .collect();
            if let [a, b, ..] = leaders[..] {
                return Some(violation(
                    Property::MutualExclusion,
                    format!(
                        "n{a} and n{b} both lead{} at db tick {} (epochs {:?} and {:?})",
                        lease(),
                        self.db_clock,
                        self.nodes[a].leader_epoch(k),
                        self.nodes[b].leader_epoch(k)
                    ),
                ));
            }
            let row = self.db.row(name.as_str());
            // An epoch the current server wrote that an earlier one had
            // issued already: a lost term and a new one share it.
            if let Some(r) = row.filter(|r| {
                lone && r.incarnation == self.db.incarnation() && self.db.incarnation() > 0
            }) {
                if r.epoch <= self.issued_before {
                    return Some(violation(
                        Property::Fencing,
                        format!(
                            "server incarnation {} wrote epoch {} at db tick {}, but an earlier server had issued up to {}",
                            self.db.incarnation(),
                            r.epoch,
                            self.db_clock,
                            self.issued_before
                        ),
                    ));
                }
            }
            let mine = |n: &N, epoch: crate::names::Epoch| {
                row.filter(|r| {
                    r.holder.as_deref() == Some(n.holder().as_str())
                        && (r.epoch == epoch.to_i64() || n.fenced_out(k))
                })
            };
            // A term the lost history may have held (`Bounds::failovers`).
            let outlived = |i: usize, epoch| lone && self.outlived[i] == Some(epoch);
            for &i in &leaders {
                let n = &self.nodes[i];
                let Some(epoch) = n.leader_epoch(k) else {
                    continue;
                };
                if outlived(i, epoch) {
                    continue;
                }
                if mine(n, epoch).is_none_or(|r| self.db.expiry(r, now_ms) <= now_ms) {
                    return Some(violation(
                        Property::Validity,
                        format!(
                            "n{i} ({}) leads{} at epoch {epoch} at db tick {}, but the row is {}",
                            n.holder(),
                            lease(),
                            self.db_clock,
                            row_text(row)
                        ),
                    ));
                }
            }
            for (i, n) in self.nodes.iter().enumerate() {
                let (Some(epoch), true) = (n.work(k), n.running()) else {
                    continue;
                };
                if let Some(deadline) = n.leader_deadline(k) {
                    let stop = (deadline.as_nanos() / TICK.as_nanos() as u64).saturating_sub(g);
                    if n.clock() > stop || (n.clock() == stop && !n.due()) {
                        return Some(violation(
                            Property::StopLead,
                            format!(
                                "n{i} runs the work{} of epoch {epoch} at local tick {}, its deadline − stop lead being {stop}",
                                of_lease(),
                                n.clock()
                            ),
                        ));
                    }
                }
                if outlived(i, epoch) {
                    continue;
                }
                let left = mine(n, epoch).map(|r| self.db.expiry(r, now_ms) - now_ms);
                if left.is_none_or(|left| left <= g as i64) {
                    return Some(violation(
                        Property::StopLead,
                        format!(
                            "n{i} runs the work{} of epoch {epoch} at db tick {}, the row being {} (stop lead {g})",
                            of_lease(),
                            self.db_clock,
                            row_text(row)
                        ),
                    ));
                }
            }
        }
        None
    }
}
