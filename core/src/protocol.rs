//! The plain data that crosses the boundary between `LeaseState` and its
//! driver: requests and their replies going in, commands coming out.

use crate::names::{Epoch, HolderId};
use std::time::Duration;

/// Tags one statement sent to the database. A reply is matched to the
/// request in flight by this id; any other reply is stale and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// What the driver must execute: one of the lease statements.
///
/// Deliberately exhaustive: each variant is a statement every driver must
/// be able to run, so a new one should break a driver's build rather than
/// fall into a catch-all arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Take the row if free, lapsed, or already ours; bump the epoch.
    Acquire,
    /// Extend our own row at our epoch.
    Renew {
        /// The epoch being renewed.
        epoch: Epoch,
    },
    /// Give the row up at our epoch.
    Release {
        /// The epoch being released.
        epoch: Epoch,
    },
    /// Give the row up at our epoch to a named node (a planned handover,
    /// DESIGN §3): the row is reserved for it for a short while. The
    /// reservation it binds is [`crate::LeaseState::successor`].
    HandOver {
        /// The epoch being handed over.
        epoch: Epoch,
    },
    /// A follower announces itself as a candidate (DESIGN §3 "Preferred
    /// holders"): its announcement ([`crate::LeaseState::announcement`])
    /// goes into the lease's preferred-candidate row if it ranks at least
    /// as high as the one there. Always answered [`Reply::Accepted`].
    Announce,
}

impl Operation {
    /// The epoch the statement is conditioned on, if any.
    pub fn epoch(self) -> Option<Epoch> {
        match self {
            Operation::Acquire | Operation::Announce => None,
            Operation::Renew { epoch }
            | Operation::Release { epoch }
            | Operation::HandOver { epoch } => Some(epoch),
        }
    }
}

/// The outcome of a statement, decoded from its rows (see
/// `Statements::decode_reply`) or from the error the driver met.
///
/// Deliberately exhaustive: the core must interpret every outcome a driver
/// can report, and a driver builds these, so a new outcome is a change to
/// both sides that the compiler should point out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Acquire: the row is now ours at `epoch`.
    Acquired {
        /// The new epoch.
        epoch: Epoch,
    },
    /// Acquire: the row cannot be taken for `expires_in` more on the
    /// database's clock when the statement ran: someone else holds it, or
    /// (`holder: None`) nobody does but it is in the grace period a row
    /// gets when it outlived a server change (DESIGN §3 "Failover").
    Held {
        /// The current holder; `None` during a grace period.
        holder: Option<HolderId>,
        /// The current epoch.
        epoch: Epoch,
        /// Time the holder has left.
        expires_in: Duration,
    },
    /// Renew, release or hand over: the row matched our holder id and
    /// epoch.
    Accepted,
    /// Renew: accepted, and an operator asked for this term to be handed
    /// over (`picolease handover`, DESIGN §3 "Planned handover") to the
    /// node whose reservation is `to` ([`HolderId::reserved_for`]), or
    /// (`None`) to whoever comes next.
    HandOverAsked {
        /// The reservation to hand the row to.
        to: Option<HolderId>,
    },
    /// Renew: accepted, and the lease's preferred-candidate row names a
    /// live candidate (DESIGN §3 "Preferred holders"); the machine hands
    /// over to it if it outranks this node ([`crate::rank::yields_to`]).
    CandidateSeen {
        /// The best live candidate announced.
        candidate: crate::rank::Candidate,
    },
    /// Renew or release: the row did not match (someone took it, or it was
    /// force-released).
    Rejected,
    /// The statement did not produce an answer.
    Failed(Failure),
}

/// Why a statement produced no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// Worth retrying: connection lost, timeout, lock contention, server
    /// restarting.
    Transient,
    /// Retrying cannot help: missing table, wrong column types, a malformed
    /// row. The state machine demotes (if leader) and finishes.
    Fatal,
}

/// Why a leader stopped leading (DESIGN §4).
///
/// Non-exhaustive: new reasons may come (a stepped clock, say), and a
/// watcher that only logs or stops its work should not break then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Demotion {
    /// A renewal was rejected: a successor bumped the epoch.
    Lost,
    /// The local deadline passed without a successful renewal.
    Expired,
    /// Shutdown: the lease is being given up.
    Released,
    /// An error that makes renewing impossible.
    Error,
    /// The database clock stepped (SQLite: the host's wall clock, by more
    /// than ρ·ttl): every expiry in the table moved at once, so the local
    /// deadline no longer matches the row.
    Clock,
    /// A planned handover: the work stops and the row goes to a named
    /// node (or is released) while this node stays a follower.
    HandedOver,
    /// This node's health probe failed, and it handed the lease to a
    /// healthy candidate (DESIGN §5 "Work that fails").
    Unhealthy,
    /// The work failed more often than its restart policy allows, and
    /// the node handed the lease over (or released it) to stand aside for
    /// a cool-down (DESIGN §5 "Work that fails").
    Escalated,
}

impl Demotion {
    /// The reason as the CLI prints it: `lost`, `expired`, `released`,
    /// `error`, `clock`, `handover`, `unhealthy`, `escalated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Demotion::Lost => "lost",
            Demotion::Expired => "expired",
            Demotion::Released => "released",
            Demotion::Error => "error",
            Demotion::Clock => "clock",
            Demotion::HandedOver => "handover",
            Demotion::Unhealthy => "unhealthy",
            Demotion::Escalated => "escalated",
        }
    }
}

/// Whether this node leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// This node holds the lease.
    Leader,
    /// Another node, or none, holds the lease.
    Follower,
}

/// The leadership state drivers publish on their watch channel.
///
/// It carries the epoch, so a watcher that missed an intermediate change
/// still knows which term it is looking at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    /// Leader or follower.
    pub role: Role,
    /// The term in view: ours while leading; the one we last saw (held by
    /// someone else, or that we just left) while following.
    pub epoch: Option<Epoch>,
    /// The holder in view, when known (ourselves while leading).
    pub holder: Option<HolderId>,
    /// Why this node stopped leading, on the update that reports it (and
    /// until the next change); `None` otherwise.
    pub reason: Option<Demotion>,
}

impl Leadership {
    /// The state before anything is known.
    pub const fn unknown() -> Self {
        Leadership {
            role: Role::Follower,
            epoch: None,
            holder: None,
            reason: None,
        }
    }

    /// True while this node leads.
    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }

    /// The epoch, if this node leads.
    pub fn leader_epoch(&self) -> Option<Epoch> {
        match self.role {
            Role::Leader => self.epoch,
            Role::Follower => None,
        }
    }
}

/// One line for logs and people: `leader at epoch 4`, `follower (lost),
/// held by web-2#a1b2c3 at epoch 5`, `follower, no holder known`. The
/// holder is named while following (while leading it is this node).
impl std::fmt::Display for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.role {
            Role::Leader => {
                f.write_str("leader")?;
                if let Some(epoch) = self.epoch {
                    write!(f, " at epoch {epoch}")?;
                }
                Ok(())
            }
            Role::Follower => {
                f.write_str("follower")?;
                if let Some(reason) = self.reason {
                    write!(f, " ({})", reason.as_str())?;
                }
                match (&self.holder, self.epoch) {
                    (Some(holder), Some(epoch)) => {
                        write!(f, ", held by {holder} at epoch {epoch}")
                    }
                    (Some(holder), None) => write!(f, ", held by {holder}"),
                    (None, Some(epoch)) => write!(f, ", no holder at epoch {epoch}"),
                    (None, None) => f.write_str(", no holder known"),
                }
            }
        }
    }
}

/// What the state machine asks of its driver, drained with
/// `LeaseState::poll_command`. Drivers carry these out **in order**.
///
/// Deliberately exhaustive: a driver that silently ignored a new command
/// could break the contract (a new kind of stop, say), so adding one must
/// fail every driver's build until it is handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Execute a lease statement and feed its outcome back with the same id.
    Execute {
        /// The id to answer with.
        request: RequestId,
        /// The statement.
        operation: Operation,
    },
    /// The request timed out: cancel it on the server if possible and
    /// forget it (a late reply will be ignored anyway).
    Cancel {
        /// The abandoned request.
        request: RequestId,
    },
    /// Start the gated work for this term.
    StartWork {
        /// The term's epoch: the fencing token to hand the work.
        epoch: Epoch,
    },
    /// Stop the gated work of this term. On shutdown the driver must wait
    /// for the work to stop before executing the release that follows.
    StopWork {
        /// The term that ended.
        epoch: Epoch,
        /// Why it ended.
        reason: Demotion,
    },
    /// Publish the new leadership state to watchers.
    Publish(Leadership),
    /// Look for other connections' commits from now on (`true`: SQLite,
    /// which has no NOTIFY, watches the file or polls its change counter
    /// and hands the row to [`crate::LeaseState::handle_row_observed`]),
    /// or stop (`false`). Only a running follower can use a release, so
    /// the machine says when that starts and ends; it comes after the
    /// input's other commands, only when the answer changes. A driver
    /// whose database tells it of releases unasked (PostgreSQL's LISTEN)
    /// may ignore it.
    WatchChanges(bool),
    /// The machine is done (shutdown complete, or a fatal failure): no
    /// more commands will come.
    Finished,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leadership(role: Role, epoch: Option<u64>, holder: Option<&str>) -> Leadership {
        Leadership {
            role,
            epoch: epoch.map(Epoch::new),
            holder: holder.map(|h| HolderId::new(h).unwrap()),
            reason: None,
        }
    }

    #[test]
    fn leadership_reads_as_one_line() {
        let leader = leadership(Role::Leader, Some(4), Some("web-1#a1b2c3"));
        assert_eq!(leader.to_string(), "leader at epoch 4");
        let mut lost = leadership(Role::Follower, Some(5), Some("web-2#d4e5f6"));
        lost.reason = Some(Demotion::Lost);
        assert_eq!(
            lost.to_string(),
            "follower (lost), held by web-2#d4e5f6 at epoch 5"
        );
        assert_eq!(
            leadership(Role::Follower, Some(7), None).to_string(),
            "follower, no holder at epoch 7"
        );
        assert_eq!(
            Leadership::unknown().to_string(),
            "follower, no holder known"
        );
    }
}
