//! The properties of the lease-set model, on the state reached: per lease
//! mutual exclusion and validity, and work only on a row held at its
//! epoch with more than the stop lead left (DESIGN §9: no lease is worked
//! by two nodes, work runs only while its row is the node's at that epoch
//! and unexpired). Gating and fencing are checked on each command
//! (`relation`), no stealing on each acquire the database runs.

use std::fmt::Write as _;

use super::SetWorld;
use crate::check::bounds::TICK;
use crate::check::world::Setup;
use crate::check::{Property, Violation};
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

impl SetWorld {
    /// Every lease: at most one node leads it, a leader's row is its own at
    /// its epoch, unexpired, and work runs only on such a row, stopped by
    /// its local `deadline − g`.
    pub(super) fn check_state(&self, setup: &Setup) -> Option<Violation> {
        let now_ms = DB_EPOCH_MS + self.db_clock as i64;
        let g = u64::from(setup.bounds.stop_lead_ticks);
        for (k, name) in setup.names.iter().enumerate() {
            let leaders: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].leading(k))
                .collect();
            if let [a, b, ..] = leaders[..] {
                return Some(violation(
                    Property::MutualExclusion,
                    format!(
                        "n{a} and n{b} both lead {name} at db tick {} (epochs {:?} and {:?})",
                        self.db_clock,
                        self.nodes[a].leader_epoch(k),
                        self.nodes[b].leader_epoch(k)
                    ),
                ));
            }
            let row = self.db.row(name.as_str());
            for &i in &leaders {
                let n = &self.nodes[i];
                let Some(epoch) = n.leader_epoch(k) else {
                    continue;
                };
                let valid = row.is_some_and(|row| {
                    row.holder.as_deref() == Some(n.holder.as_str())
                        && (row.epoch == epoch.to_i64() || n.fenced_out[k])
                        && row.expires_at > now_ms
                });
                if !valid {
                    let mut detail = format!(
                        "n{i} ({}) leads {name} at epoch {epoch} at db tick {}, but the row is ",
                        n.holder, self.db_clock
                    );
                    let _ = write!(detail, "{}", row_text(row));
                    return Some(violation(Property::Validity, detail));
                }
            }
            for (i, n) in self.nodes.iter().enumerate() {
                let (Some(epoch), true) = (n.work[k], n.running()) else {
                    continue;
                };
                let deadline = n
                    .set
                    .as_ref()
                    .and_then(|s| s.slot_view(k).machine.leader_deadline());
                if let Some(deadline) = deadline {
                    let stop = (deadline.as_nanos() / TICK.as_nanos() as u64).saturating_sub(g);
                    if n.clock > stop || (n.clock == stop && !n.due()) {
                        return Some(violation(
                            Property::StopLead,
                            format!(
                                "n{i} runs the work of {name} at epoch {epoch} at local tick {}, its deadline − stop lead being {stop}",
                                n.clock
                            ),
                        ));
                    }
                }
                let held = row.filter(|r| {
                    r.holder.as_deref() == Some(n.holder.as_str())
                        && (r.epoch == epoch.to_i64() || n.fenced_out[k])
                });
                let left = held.map(|r| r.expires_at - now_ms);
                if left.is_none_or(|left| left <= g as i64) {
                    return Some(violation(
                        Property::StopLead,
                        format!(
                            "n{i} runs the work of {name} at epoch {epoch} at db tick {}, the row being {} (stop lead {g})",
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
