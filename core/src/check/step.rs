//! The checker's steps and their text, the trace syntax.
//!
//! A trace is the steps joined by `;`, each naming its node as `n0`, `n1`,
//! `n2`:
//!
//! | step | meaning | fault |
//! | --- | --- | --- |
//! | `tick:db` | the database clock advances one tick | |
//! | `tick:n0` | node 0's clock advances one tick | |
//! | `n0:timer` | node 0's timer fires (`handle_timeout`) | |
//! | `db:n0` | the head of node 0's connection reaches the database | |
//! | `n0:recv` | the head of the database's messages to node 0 (a reply or a release notice) reaches it | |
//! | `db:stray` | the stray statement runs | |
//! | `n0:resume` | node 0 thaws (and runs its timer) | |
//! | `db:replicate` | the standbys copy the database (`Bounds::failovers`) | |
//! | `db:failover` | the next standby is promoted: the writes since its last copy are lost, under a new server incarnation (`Bounds::failovers` times at most; never at the tick of the previous server's adoption) | yes |
//! | `db:orphan` | first step only (`Bounds::orphan`): the row (in a set check, every lease's row) starts held by a process that died just before, lapsing an interval later | |
//! | `lose:db:n0`, `lose:n0` | the head message towards the database / node 0 is lost | yes |
//! | `late:db:n0`, `late:n0` | that head message is delayed past the delivery bound, without limit | yes |
//! | `stray:n0` | the head statement from node 0 strays on the server: its cancel will lose the race, and it runs whenever `db:stray` says, out of order | yes |
//! | `n0:pause`, `n0:crash`, `n0:restart`, `n0:shutdown` | the process freezes / dies / starts again with a new holder id / shuts down cleanly | yes |
//! | `n0:handover` | node 0, leading, hands the lease over to the next node (`Bounds::handover`) | yes |
//! | `n0:unhealthy` | node 0's health probe starts failing (`Bounds::health`) | yes |

use std::fmt;
use std::str::FromStr;

/// One step of the checker's model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The database clock advances one tick.
    TickDb,
    /// A node's clock advances one tick.
    Tick(usize),
    /// A node's timer fires.
    Timer(usize),
    /// The head of a node's connection reaches the database.
    AtDb(usize),
    /// The head of the database's messages to a node reaches it.
    Recv(usize),
    /// The stray statement runs.
    StrayAtDb,
    /// A paused node thaws.
    Resume(usize),
    /// The first step only: the row is held by a process that died just
    /// before the start (`Bounds::orphan`).
    Orphan,
    /// The standby copies the database (`Bounds::failovers`).
    Replicate,
    /// Fault: the standby is promoted, losing the writes since its last
    /// copy, under a new server incarnation (`Bounds::failovers`).
    Failover,
    /// Fault: the head message towards the database is lost.
    LoseToDb(usize),
    /// Fault: the head message towards the node is lost.
    LoseToNode(usize),
    /// Fault: the head message towards the database is late, without limit.
    LateToDb(usize),
    /// Fault: the head message towards the node is late, without limit.
    LateToNode(usize),
    /// Fault: the head statement from the node strays on the server.
    Stray(usize),
    /// Fault: the process freezes (its clock keeps running).
    Pause(usize),
    /// Fault: the process dies, leaving its row.
    Crash(usize),
    /// Fault: a dead or finished process starts again, with a new holder id.
    Restart(usize),
    /// Fault: a clean shutdown begins.
    Shutdown(usize),
    /// Fault: the leader hands the lease over to the next node by index
    /// (`Bounds::handover`, a lone lease only).
    HandOver(usize),
    /// Fault: the node's health probe starts failing (`Bounds::health`, a
    /// lone lease only; DESIGN §5 "Work that fails").
    Unhealthy(usize),
}

impl Step {
    /// Whether the step counts against the fault bound.
    pub fn is_fault(self) -> bool {
        !matches!(
            self,
            Step::TickDb
                | Step::Replicate
                | Step::Tick(_)
                | Step::Timer(_)
                | Step::AtDb(_)
                | Step::Recv(_)
                | Step::StrayAtDb
                | Step::Resume(_)
                | Step::Orphan
        )
    }

    /// The node the step concerns, if any.
    pub fn node(self) -> Option<usize> {
        match self {
            Step::TickDb | Step::StrayAtDb | Step::Orphan | Step::Replicate | Step::Failover => {
                None
            }
            Step::Tick(n)
            | Step::Timer(n)
            | Step::AtDb(n)
            | Step::Recv(n)
            | Step::Resume(n)
            | Step::LoseToDb(n)
            | Step::LoseToNode(n)
            | Step::LateToDb(n)
            | Step::LateToNode(n)
            | Step::Stray(n)
            | Step::Pause(n)
            | Step::Crash(n)
            | Step::Restart(n)
            | Step::Shutdown(n)
            | Step::HandOver(n)
            | Step::Unhealthy(n) => Some(n),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Step::TickDb => write!(f, "tick:db"),
            Step::Tick(n) => write!(f, "tick:n{n}"),
            Step::Timer(n) => write!(f, "n{n}:timer"),
            Step::AtDb(n) => write!(f, "db:n{n}"),
            Step::Recv(n) => write!(f, "n{n}:recv"),
            Step::StrayAtDb => write!(f, "db:stray"),
            Step::Orphan => write!(f, "db:orphan"),
            Step::Replicate => write!(f, "db:replicate"),
            Step::Failover => write!(f, "db:failover"),
            Step::Resume(n) => write!(f, "n{n}:resume"),
            Step::LoseToDb(n) => write!(f, "lose:db:n{n}"),
            Step::LoseToNode(n) => write!(f, "lose:n{n}"),
            Step::LateToDb(n) => write!(f, "late:db:n{n}"),
            Step::LateToNode(n) => write!(f, "late:n{n}"),
            Step::Stray(n) => write!(f, "stray:n{n}"),
            Step::Pause(n) => write!(f, "n{n}:pause"),
            Step::Crash(n) => write!(f, "n{n}:crash"),
            Step::Restart(n) => write!(f, "n{n}:restart"),
            Step::Shutdown(n) => write!(f, "n{n}:shutdown"),
            Step::HandOver(n) => write!(f, "n{n}:handover"),
            Step::Unhealthy(n) => write!(f, "n{n}:unhealthy"),
        }
    }
}

/// A step's text that is not one of the forms above.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown step {0:?}: expected tick:db, tick:nN, nN:timer, db:nN, nN:recv, db:stray, db:orphan, db:replicate, db:failover, nN:resume, lose:db:nN, lose:nN, late:db:nN, late:nN, stray:nN, nN:pause, nN:crash, nN:restart, nN:shutdown, nN:handover or nN:unhealthy")]
pub struct UnknownStep(pub String);

fn node(text: &str) -> Option<usize> {
    let digits = text.strip_prefix('n')?;
    if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl FromStr for Step {
    type Err = UnknownStep;

    fn from_str(text: &str) -> Result<Step, UnknownStep> {
        let unknown = || UnknownStep(text.chars().take(40).collect());
        let parts: Vec<&str> = text.trim().split(':').collect();
        let step = match parts.as_slice() {
            ["tick", "db"] => Step::TickDb,
            ["db", "stray"] => Step::StrayAtDb,
            ["db", "orphan"] => Step::Orphan,
            ["db", "replicate"] => Step::Replicate,
            ["db", "failover"] => Step::Failover,
            ["tick", n] => Step::Tick(node(n).ok_or_else(unknown)?),
            ["db", n] => Step::AtDb(node(n).ok_or_else(unknown)?),
            ["lose", "db", n] => Step::LoseToDb(node(n).ok_or_else(unknown)?),
            ["late", "db", n] => Step::LateToDb(node(n).ok_or_else(unknown)?),
            ["lose", n] => Step::LoseToNode(node(n).ok_or_else(unknown)?),
            ["late", n] => Step::LateToNode(node(n).ok_or_else(unknown)?),
            ["stray", n] => Step::Stray(node(n).ok_or_else(unknown)?),
            [n, what] => {
                let n = node(n).ok_or_else(unknown)?;
                match *what {
                    "timer" => Step::Timer(n),
                    "recv" => Step::Recv(n),
                    "resume" => Step::Resume(n),
                    "pause" => Step::Pause(n),
                    "crash" => Step::Crash(n),
                    "restart" => Step::Restart(n),
                    "shutdown" => Step::Shutdown(n),
                    "handover" => Step::HandOver(n),
                    "unhealthy" => Step::Unhealthy(n),
                    _ => return Err(unknown()),
                }
            }
            _ => return Err(unknown()),
        };
        Ok(step)
    }
}
