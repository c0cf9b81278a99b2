//! The events `run` prints: one line each, JSON with `--json`.
//!
//! | event | keys besides `event`, `name`, `node`, `unix_ms` |
//! | --- | --- |
//! | `leader` | `holder` (this process's stored holder id), `epoch`, `ttl_ms`, `interval_ms` (the lease's timings) |
//! | `follower` | `holder`, `epoch` (the term left), `reason` (`lost`, `expired`, `released`, `error`, `clock`, `handover`, `unhealthy`, `escalated`) |
//! | `handover` | `from` (this process's holder id), `to` (the node the row is now reserved for), `epoch` (the term handed over) |
//! | `observed` | `holder` (another holder, or null when free), `epoch` |
//! | `child` | `pid` (CMD's pid, also its process group), `epoch` (its term) |
//! | `child_exit` | `pid`, `epoch`, and `code` or `signal` (e.g. `"SIGKILL"`) |
//! | `work_failed` | `epoch`, `code` or `signal`, `restarts` (within the period, this failure's included), `escalated` (true: the lease is handed over and the node stands aside for `cool_down_ms`) |
//! | `unhealthy`, `healthy` | `epoch` (the last term seen, null before any), `reason` (the probe's exit code or signal and last line, or its timeout) |

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use picolease::{HolderId, Leadership, LeaseName, Role, Transition};
use serde_json::{json, Value};

use super::status::ChildStatus;
use crate::output::{line, unix_ms};

/// The terms whose `leader` and `follower` lines are out, per lease (the
/// highest epoch of each): a lone lease's gated work returns only once its
/// term's `follower` line is printed ([`super::child::Gated`]), so the
/// release that follows the work cannot let a successor's `leader` line
/// reach its stdout first; and a CMD's `child` line waits for its term's
/// `leader` line, which reaches the printer by another thread.
#[derive(Debug, Default)]
pub struct Printed {
    /// Per lease: (highest epoch led, highest epoch left).
    lines: Mutex<HashMap<String, (u64, u64)>>,
    changed: Condvar,
}

impl Printed {
    fn printed(&self, lease: &str, epoch: u64, leader: bool) {
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        let (led, left) = lines.entry(lease.to_string()).or_insert((0, 0));
        let seen = if leader { led } else { left };
        *seen = (*seen).max(epoch);
        self.changed.notify_all();
    }

    /// Waits until the `follower` line of `lease`'s term `epoch` (or a
    /// later one's) is printed, at most `timeout`; true if it was.
    pub fn wait_left(&self, lease: &str, epoch: u64, timeout: Duration) -> bool {
        self.wait(lease, epoch, false, timeout)
    }

    /// Waits until the `leader` line of `lease`'s term `epoch` (or a later
    /// one's) is printed, at most `timeout`; true if it was.
    pub fn wait_led(&self, lease: &str, epoch: u64, timeout: Duration) -> bool {
        self.wait(lease, epoch, true, timeout)
    }

    fn wait(&self, lease: &str, epoch: u64, leader: bool, timeout: Duration) -> bool {
        let until = std::time::Instant::now() + timeout;
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let seen = lines
                .get(lease)
                .map(|&(led, left)| if leader { led } else { left });
            if seen.is_some_and(|e| e >= epoch) {
                return true;
            }
            let rest = until.saturating_duration_since(std::time::Instant::now());
            if rest.is_zero() {
                return false;
            }
            lines = self
                .changed
                .wait_timeout(lines, rest)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Prints one contender's events, for one lease or many: every line names
/// its lease (a transition carries its own; CMD's lines are given theirs),
/// so a lone lease and a set print through the same code.
pub struct Printer {
    /// The `--node` value (or the holder id when none was given).
    pub node: String,
    /// This process's holder id, as stored in the row.
    pub holder: HolderId,
    /// JSON lines instead of text.
    pub json: bool,
    /// Where a printed term end is recorded.
    pub printed: Arc<Printed>,
    /// The last epoch each lease's lines named (led, left or observed):
    /// the `epoch` of a health line, which has no term of its own.
    pub epochs: Mutex<HashMap<String, u64>>,
    /// The lease's ttl and interval in milliseconds, on each `leader`
    /// line (`picolease timeline` bounds gaps and tells a crash takeover
    /// from two leaders by them).
    pub timing_ms: (u64, u64),
}

impl Printer {
    fn emit(&self, event: &str, lease: &str, at: SystemTime, keys: Value, text: String) {
        if self.json {
            let mut object = json!({
                "event": event,
                "name": lease,
                "node": self.node,
                "unix_ms": unix_ms(at),
            });
            if let (Some(object), Value::Object(keys)) = (object.as_object_mut(), keys) {
                object.extend(keys);
            }
            line(&object.to_string());
        } else {
            line(&text);
        }
    }

    /// The first line of the text output: a lone lease is named, a set
    /// counted.
    pub fn start(&self, leases: &[LeaseName]) {
        if self.json {
            return;
        }
        let (node, holder) = (&self.node, &self.holder);
        match leases {
            [lease] => line(&format!(
                "{node} contending for lease \"{}\" as {holder}",
                lease.as_str()
            )),
            _ => line(&format!(
                "{node} contending for {} leases as {holder} (fair share between the live members)",
                leases.len()
            )),
        }
    }

    /// A published change of leadership.
    pub fn transition(&self, transition: &Transition) {
        let Leadership {
            role,
            epoch,
            holder,
            reason,
        } = &transition.leadership;
        let epoch = epoch.map(|e| e.get());
        let shown = epoch.unwrap_or(0);
        let (node, lease) = (&self.node, transition.lease.as_str());
        if let Some(epoch) = epoch {
            self.epochs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(lease.to_string(), epoch);
        }
        // The second publication of a planned handover names the
        // reservation the row went to (DESIGN §3 "Planned handover").
        let reserved = match (reason, holder) {
            (Some(picolease::Demotion::HandedOver), Some(to)) => to.reserved_node(),
            _ => None,
        };
        if let Some(to) = reserved {
            return self.emit(
                "handover",
                lease,
                transition.at,
                json!({ "from": self.holder.as_str(), "to": to, "epoch": epoch }),
                format!("{node} handed \"{lease}\" over to {to} at epoch {shown}"),
            );
        }
        match (role, reason) {
            (Role::Leader, _) => {
                self.emit(
                    "leader",
                    lease,
                    transition.at,
                    json!({
                        "holder": self.holder.as_str(),
                        "epoch": epoch,
                        "ttl_ms": self.timing_ms.0,
                        "interval_ms": self.timing_ms.1,
                    }),
                    format!("{node} leader of \"{lease}\" at epoch {shown}"),
                );
                self.printed.printed(lease, shown, true);
            }
            (Role::Follower, Some(reason)) => {
                self.emit(
                    "follower",
                    lease,
                    transition.at,
                    json!({ "holder": self.holder.as_str(), "epoch": epoch, "reason": reason.as_str() }),
                    format!(
                        "{node} follower of \"{lease}\": left epoch {shown} ({})",
                        reason.as_str()
                    ),
                );
                self.printed.printed(lease, shown, false);
            }
            (Role::Follower, None) if epoch.is_some() || holder.is_some() => self.emit(
                "observed",
                lease,
                transition.at,
                json!({ "holder": holder.as_ref().map(HolderId::as_str), "epoch": epoch }),
                match holder {
                    Some(holder) => format!(
                        "{node} follower of \"{lease}\": held by {} at epoch {shown}",
                        holder.node()
                    ),
                    None => format!("{node} follower of \"{lease}\": free at epoch {shown}"),
                },
            ),
            // The state before anything is known.
            (Role::Follower, None) => {}
        }
    }

    /// CMD started.
    pub fn child(&self, lease: &LeaseName, pid: u32, epoch: u64) {
        self.emit(
            "child",
            lease.as_str(),
            SystemTime::now(),
            json!({ "pid": pid, "epoch": epoch }),
            format!("{} started the command (pid {pid})", self.node),
        );
    }

    /// CMD failed by itself under `--restart on-failure`.
    pub fn work_failed(
        &self,
        lease: &LeaseName,
        epoch: u64,
        status: &ChildStatus,
        restarts: u32,
        escalated: Option<Duration>,
    ) {
        let mut keys = match status {
            ChildStatus::Code(code) => json!({ "epoch": epoch, "code": code }),
            ChildStatus::Signal(name) => json!({ "epoch": epoch, "signal": name }),
        };
        keys["restarts"] = json!(restarts);
        keys["escalated"] = json!(escalated.is_some());
        if let Some(cool_down) = escalated {
            keys["cool_down_ms"] = json!(u64::try_from(cool_down.as_millis()).unwrap_or(u64::MAX));
        }
        let what = match escalated {
            Some(cool_down) => format!(
                "failed {restarts} times within the restart limit: handing \"{}\" over and standing aside for {}",
                lease.as_str(),
                crate::duration::show(cool_down)
            ),
            None => format!("failed (restart {restarts} within the limit)"),
        };
        self.emit(
            "work_failed",
            lease.as_str(),
            SystemTime::now(),
            keys,
            format!("{} the command {what}", self.node),
        );
    }

    /// The health probe's verdict changed (or gave its first).
    pub fn health(&self, lease: &LeaseName, healthy: bool, reason: &str) {
        let event = if healthy { "healthy" } else { "unhealthy" };
        let epoch = self
            .epochs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(lease.as_str())
            .copied();
        self.emit(
            event,
            lease.as_str(),
            SystemTime::now(),
            json!({ "epoch": epoch, "reason": reason }),
            format!("{} is {event}: {reason}", self.node),
        );
    }

    /// CMD ended.
    pub fn child_exit(&self, lease: &LeaseName, pid: u32, epoch: u64, status: &ChildStatus) {
        let (keys, how) = match status {
            ChildStatus::Code(code) => (
                json!({ "pid": pid, "epoch": epoch, "code": code }),
                format!("exited with code {code}"),
            ),
            ChildStatus::Signal(name) => (
                json!({ "pid": pid, "epoch": epoch, "signal": name }),
                format!("was ended by {name}"),
            ),
        };
        self.emit(
            "child_exit",
            lease.as_str(),
            SystemTime::now(),
            keys,
            format!("{} the command (pid {pid}) {how}", self.node),
        );
    }
}
