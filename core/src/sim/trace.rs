//! What a simulation run recorded, and the invariants of DESIGN §6 checked
//! over it.

use std::fmt;
use std::time::Duration;

use crate::names::Epoch;
use crate::protocol::{Demotion, Leadership, Operation, Reply};

/// One thing that happened, at a real (virtual) time, on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// Real time in nanoseconds since the start of the run.
    pub at: u64,
    /// The node it happened on (for database events, the node whose request
    /// it was).
    pub node: usize,
    /// What happened.
    pub what: Happening,
}

/// The kinds of trace entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Happening {
    /// The node started (or restarted) with this holder id.
    Started {
        /// Its holder id.
        holder: String,
    },
    /// The node sent a statement.
    Sent {
        /// Request id.
        request: u64,
        /// The statement.
        operation: Operation,
    },
    /// The database executed a statement.
    Executed {
        /// Request id.
        request: u64,
        /// The statement.
        operation: Operation,
        /// Its outcome.
        reply: Reply,
    },
    /// A message was lost (loss, partition, or a cancelled request).
    Lost {
        /// Request id.
        request: u64,
        /// Why.
        cause: &'static str,
    },
    /// The node abandoned a request past its timeout.
    Abandoned {
        /// Request id.
        request: u64,
    },
    /// The node published a leadership state.
    Published(Leadership),
    /// Gated work started: the node leads at `epoch`.
    Leader {
        /// The term.
        epoch: Epoch,
    },
    /// Gated work stopped: the node's term at `epoch` ended.
    Follower {
        /// The term that ended.
        epoch: Epoch,
        /// Why.
        reason: Demotion,
    },
    /// The node was frozen.
    Paused,
    /// The node was thawed.
    Resumed,
    /// The node was partitioned from the database until the given time.
    Partitioned {
        /// Real time at which the partition heals.
        until: u64,
    },
    /// The process died (ending any term it had).
    Crashed,
    /// A clean shutdown began.
    ShutdownBegun,
    /// The node's health probe changed its verdict (DESIGN §5).
    Health {
        /// The new verdict.
        healthy: bool,
    },
    /// The node's work escalated: it stands aside for a cool-down.
    Escalated,
    /// A planned handover was asked of the node (it hands over if it
    /// leads), to the reservation `to`.
    HandOverBegun {
        /// The reservation (`<node>#`), if the next node has one.
        to: Option<String>,
    },
    /// The state machine finished.
    Finished,
    /// A fault found no target (e.g. "crash the leader" with no leader).
    FaultSkipped {
        /// The fault, as text.
        fault: String,
    },
    /// The database failed over to a server that lacks the writes of the
    /// last `lost` nanoseconds (recorded on node 0; it hits no node).
    ServerReplaced {
        /// How much of the history was lost, real nanoseconds.
        lost: u64,
    },
    /// The machine kept asking to be woken at the same instant without
    /// doing anything (a spinning driver loop); the simulator stopped it.
    Stuck,
    /// Validity violated: the node believes it leads at `epoch` while the row
    /// says otherwise.
    Invalid {
        /// The believed term.
        epoch: Epoch,
        /// The row as the database held it.
        row: String,
    },
}

/// One stretch of real time during which a node led and could act (not
/// paused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeadershipInterval {
    /// The node.
    pub node: usize,
    /// The term.
    pub epoch: Epoch,
    /// Start (inclusive), real nanoseconds.
    pub start: u64,
    /// End (exclusive), real nanoseconds.
    pub end: u64,
}

/// The record of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Every entry, in the order it happened.
    pub entries: Vec<TraceEntry>,
    /// Real time at which the run stopped.
    pub end: u64,
    /// Number of nodes.
    pub nodes: usize,
}

/// An invariant that did not hold, with the evidence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{invariant} violated: {detail}")]
pub struct Violation {
    /// Which invariant of DESIGN §6.
    pub invariant: &'static str,
    /// What was seen.
    pub detail: String,
}

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

fn ms(nanos: u64) -> f64 {
    nanos as f64 / 1e6
}

impl Trace {
    /// Every leadership interval, paused stretches excluded: a frozen
    /// process cannot act, and when it thaws it demotes before acting if
    /// its deadline passed (an interval that ends the instant it reopens is
    /// empty and dropped).
    pub fn leadership_intervals(&self) -> Vec<LeadershipInterval> {
        let mut open: Vec<Option<(Epoch, u64)>> = vec![None; self.nodes];
        let mut leading: Vec<Option<Epoch>> = vec![None; self.nodes];
        let mut paused = vec![false; self.nodes];
        let mut out = Vec::new();
        let mut close = |node: usize, open: &mut Option<(Epoch, u64)>, at: u64| {
            if let Some((epoch, start)) = open.take() {
                if at > start {
                    out.push(LeadershipInterval {
                        node,
                        epoch,
                        start,
                        end: at,
                    });
                }
            }
        };
        for e in &self.entries {
            let n = e.node;
            match &e.what {
                Happening::Leader { epoch } => {
                    leading[n] = Some(*epoch);
                    if !paused[n] {
                        open[n] = Some((*epoch, e.at));
                    }
                }
                Happening::Follower { .. } | Happening::Crashed => {
                    leading[n] = None;
                    paused[n] = false;
                    close(n, &mut open[n], e.at);
                }
                Happening::Paused => {
                    paused[n] = true;
                    close(n, &mut open[n], e.at);
                }
                Happening::Resumed => {
                    paused[n] = false;
                    if let Some(epoch) = leading[n] {
                        open[n] = Some((epoch, e.at));
                    }
                }
                _ => {}
            }
        }
        for (n, slot) in open.iter_mut().enumerate() {
            close(n, slot, self.end);
        }
        out.sort_by_key(|i| (i.start, i.node));
        out
    }

    /// Invariant 1: no two nodes' leadership intervals overlap in real time.
    pub fn check_mutual_exclusion(&self) -> Result<(), Violation> {
        let intervals = self.leadership_intervals();
        let mut latest: Option<LeadershipInterval> = None;
        for i in intervals {
            if let Some(prev) = latest {
                if i.start < prev.end && i.node != prev.node {
                    return Err(violation(
                        "mutual exclusion",
                        format!(
                            "node {} led at epoch {} during [{:.3}ms, {:.3}ms) and node {} at epoch {} from {:.3}ms",
                            prev.node, prev.epoch, ms(prev.start), ms(prev.end), i.node, i.epoch, ms(i.start)
                        ),
                    ));
                }
            }
            if latest.is_none_or(|prev| i.end > prev.end) {
                latest = Some(i);
            }
        }
        Ok(())
    }

    /// Invariant 2: every leadership has its own epoch, and successive
    /// leaderships have strictly increasing epochs. Work stopped early by a
    /// stop lead and started again by a renewal of the same term is the
    /// same leadership: the same node may start its epoch again.
    pub fn check_fencing(&self) -> Result<(), Violation> {
        let mut last: Option<(usize, Epoch, u64)> = None;
        for e in &self.entries {
            if let Happening::Leader { epoch } = e.what {
                if let Some((node, prev, at)) = last {
                    if epoch < prev || (epoch == prev && node != e.node) {
                        return Err(violation(
                            "fencing",
                            format!(
                                "node {} led at epoch {} ({:.3}ms) after node {} led at epoch {} ({:.3}ms)",
                                e.node, epoch, ms(e.at), node, prev, ms(at)
                            ),
                        ));
                    }
                }
                last = Some((e.node, epoch, e.at));
            }
        }
        Ok(())
    }

    /// Invariant 2, across terms: an epoch begins one term only. A term
    /// begins with a node's first publication as leader after it started,
    /// crashed or published anything else (the gated work's starts and
    /// stops are not term boundaries: a stop lead stops and restarts it
    /// within one term). Two beginnings at one epoch, even on one node, as
    /// after two lossy failovers that adopt the same old row alike, are
    /// two terms a fence of that epoch cannot tell apart.
    pub fn check_epochs_once(&self) -> Result<(), Violation> {
        let mut leading: Vec<Option<Epoch>> = vec![None; self.nodes];
        let mut begun: std::collections::BTreeMap<Epoch, (usize, u64)> = Default::default();
        for e in &self.entries {
            let now = match &e.what {
                Happening::Published(l) if l.is_leader() => l.leader_epoch(),
                Happening::Published(_) | Happening::Crashed | Happening::Started { .. } => None,
                _ => continue,
            };
            let before = std::mem::replace(&mut leading[e.node], now);
            let Some(epoch) = now.filter(|&epoch| before != Some(epoch)) else {
                continue;
            };
            if let Some((node, at)) = begun.insert(epoch, (e.node, e.at)) {
                return Err(violation(
                    "fencing",
                    format!(
                        "node {} began a term at epoch {epoch} ({:.3}ms), which began node {node}'s term at {:.3}ms",
                        e.node,
                        ms(e.at),
                        ms(at)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Invariant 3: while a node believes it leads at epoch e, the row holds
    /// (that node, e) unexpired. The simulator checks the row after every
    /// event and records any mismatch.
    pub fn check_validity(&self) -> Result<(), Violation> {
        match self
            .entries
            .iter()
            .find(|e| matches!(e.what, Happening::Invalid { .. }))
        {
            Some(TraceEntry {
                at,
                node,
                what: Happening::Invalid { epoch, row },
            }) => Err(violation(
                "validity",
                format!(
                    "at {:.3}ms node {node} believed it led at epoch {epoch}; row: {row}",
                    ms(*at)
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Invariant 4: per node, starts and stops of gated work alternate with
    /// matching epochs; work starts only right after a leader publication
    /// and every exit (crash, shutdown included) stops it; no node finishes
    /// with work running.
    pub fn check_gating(&self) -> Result<(), Violation> {
        let mut running: Vec<Option<Epoch>> = vec![None; self.nodes];
        let mut last_published: Vec<Option<Leadership>> = vec![None; self.nodes];
        for e in &self.entries {
            let n = e.node;
            let fail = |detail: String| {
                Err(violation(
                    "gating",
                    format!("node {n} at {:.3}ms: {detail}", ms(e.at)),
                ))
            };
            match &e.what {
                Happening::Published(l) => last_published[n] = Some(l.clone()),
                Happening::Leader { epoch } => {
                    if let Some(prev) = running[n] {
                        return fail(format!(
                            "work started at epoch {epoch} while epoch {prev} ran"
                        ));
                    }
                    let announced = last_published[n]
                        .as_ref()
                        .is_some_and(|l| l.leader_epoch() == Some(*epoch));
                    if !announced {
                        return fail(format!(
                            "work started at epoch {epoch} without a leader publication"
                        ));
                    }
                    running[n] = Some(*epoch);
                }
                Happening::Follower { epoch, .. } => {
                    if running[n] != Some(*epoch) {
                        return fail(format!(
                            "work stopped at epoch {epoch}, but {:?} ran",
                            running[n]
                        ));
                    }
                    running[n] = None;
                }
                Happening::Crashed => running[n] = None,
                Happening::Finished => {
                    if let Some(epoch) = running[n] {
                        return fail(format!("finished with work of epoch {epoch} running"));
                    }
                }
                _ => {}
            }
            if let (Happening::Published(l), Some(epoch)) = (&e.what, running[n]) {
                if !l.is_leader() {
                    return fail(format!(
                        "published follower while work of epoch {epoch} ran"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Progress: no machine asked to be woken again and again at the same
    /// instant without doing anything.
    pub fn check_progress(&self) -> Result<(), Violation> {
        match self
            .entries
            .iter()
            .find(|e| matches!(e.what, Happening::Stuck))
        {
            Some(e) => Err(violation(
                "progress",
                format!(
                    "node {} at {:.3}ms spun on its own timeout",
                    e.node,
                    ms(e.at)
                ),
            )),
            None => Ok(()),
        }
    }

    /// Invariants 1–4 together, and progress.
    pub fn check_safety(&self) -> Result<(), Violation> {
        self.check_progress()?;
        self.check_mutual_exclusion()?;
        self.check_fencing()?;
        self.check_epochs_once()?;
        self.check_validity()?;
        self.check_gating()
    }

    /// Real time at which the first leadership began.
    pub fn first_leader_at(&self) -> Option<u64> {
        self.entries
            .iter()
            .find(|e| matches!(e.what, Happening::Leader { .. }))
            .map(|e| e.at)
    }

    /// The first leadership that began at or after `at`: `(node, epoch,
    /// time)`.
    pub fn next_leader_after(&self, at: u64) -> Option<(usize, Epoch, u64)> {
        self.entries.iter().find_map(|e| match e.what {
            Happening::Leader { epoch } if e.at >= at => Some((e.node, epoch, e.at)),
            _ => None,
        })
    }

    /// The gaps between a leadership ending (for any reason, a crash
    /// included) and the next one beginning.
    pub fn handovers(&self) -> Vec<Handover> {
        let mut leading: Vec<bool> = vec![false; self.nodes];
        let mut out = Vec::new();
        for e in &self.entries {
            let cause = match &e.what {
                Happening::Leader { .. } => {
                    leading[e.node] = true;
                    None
                }
                Happening::Follower { reason, .. } if leading[e.node] => {
                    leading[e.node] = false;
                    Some(reason.as_str())
                }
                // A frozen leader cannot act: its leadership ends with the
                // pause, and the handover is measured from there.
                Happening::Paused if leading[e.node] => {
                    leading[e.node] = false;
                    Some("paused")
                }
                Happening::Crashed if leading[e.node] => {
                    leading[e.node] = false;
                    Some("crashed")
                }
                _ => None,
            };
            if let Some(cause) = cause {
                let next = self.next_leader_after(e.at);
                out.push(Handover {
                    from_node: e.node,
                    cause,
                    ended_at: e.at,
                    next: next
                        .map(|(node, epoch, at)| (node, epoch, Duration::from_nanos(at - e.at))),
                });
            }
        }
        out
    }

    /// The trace as readable lines, one per entry of interest (leadership
    /// changes and faults; statements only when `verbose`).
    pub fn timeline(&self, verbose: bool) -> String {
        let mut out = String::new();
        for e in &self.entries {
            let line = match &e.what {
                Happening::Sent { .. }
                | Happening::Executed { .. }
                | Happening::Lost { .. }
                | Happening::Abandoned { .. }
                    if !verbose =>
                {
                    continue
                }
                Happening::Published(_) if !verbose => continue,
                _ => e.to_string(),
            };
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// A leadership that ended, and how long until the next began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handover {
    /// The node whose term ended.
    pub from_node: usize,
    /// `crashed`, `paused`, `lost`, `expired`, `released` or `error`.
    pub cause: &'static str,
    /// When the term ended (real nanoseconds).
    pub ended_at: u64,
    /// The next leader, its epoch and the gap, if there was one.
    pub next: Option<(usize, Epoch, Duration)>,
}

impl fmt::Display for TraceEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>10.3}ms  node {}  ", ms(self.at), self.node)?;
        match &self.what {
            Happening::Started { holder } => write!(f, "started as {holder}"),
            Happening::Sent { request, operation } => write!(f, "sent #{request} {operation:?}"),
            Happening::Executed {
                request,
                operation,
                reply,
            } => write!(f, "db ran #{request} {operation:?} -> {reply:?}"),
            Happening::Lost { request, cause } => write!(f, "#{request} lost ({cause})"),
            Happening::Abandoned { request } => write!(f, "abandoned #{request} (timeout)"),
            Happening::Published(l) => write!(f, "publishes {l:?}"),
            Happening::Leader { epoch } => write!(f, "LEADER at epoch {epoch}"),
            Happening::Follower { epoch, reason } => {
                write!(f, "follower (epoch {epoch} ended: {})", reason.as_str())
            }
            Happening::Paused => write!(f, "paused"),
            Happening::Resumed => write!(f, "resumed"),
            Happening::Partitioned { until } => write!(f, "partitioned until {:.3}ms", ms(*until)),
            Happening::Crashed => write!(f, "CRASHED"),
            Happening::ShutdownBegun => write!(f, "shutting down"),
            Happening::HandOverBegun { to } => {
                write!(f, "handing over to {}", to.as_deref().unwrap_or("anyone"))
            }
            Happening::Health { healthy: true } => write!(f, "healthy (probe passes)"),
            Happening::Health { healthy: false } => write!(f, "UNHEALTHY (probe fails)"),
            Happening::Escalated => write!(f, "work escalated: standing aside"),
            Happening::Finished => write!(f, "finished"),
            Happening::FaultSkipped { fault } => write!(f, "fault {fault} skipped (no target)"),
            Happening::ServerReplaced { lost } => write!(
                f,
                "DATABASE FAILED OVER, losing the last {:.3}ms of writes",
                ms(*lost)
            ),
            Happening::Stuck => write!(
                f,
                "STUCK: woken 100 times at one instant with nothing to do"
            ),
            Happening::Invalid { epoch, row } => {
                write!(f, "INVALID: believes it leads at epoch {epoch}, row {row}")
            }
        }
    }
}
