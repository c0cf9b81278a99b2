//! The engine's one output language: [`Order`]s, what either machine's
//! commands become for a driver, and the statements they carry.

use crate::set::{Batch, BatchKind, BatchReply, SetCommand};
use crate::{
    Command, Demotion, Epoch, Instant, Leadership, LeaseName, Operation, Reply, RequestId,
};

/// A statement the engine asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Statement {
    /// A single-row statement: a lone lease's, or a set's hand-over of
    /// one lease ([`Engine::row_lease`](super::Engine::row_lease)). A lone
    /// lease's ended term's work must have returned before it runs: that
    /// is how its release comes after its work (DESIGN §5); a set waits
    /// for [`Input::WorkStopped`](super::Input::WorkStopped) instead, in
    /// the core, and its other leases' work is not waited for.
    Row(Operation),
    /// A set's batch.
    Batch(Batch),
}

/// What a statement ran, kept by a driver while it is in flight (for its
/// metrics and its renew latencies): a [`Statement`] without its leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ran {
    /// A single-row statement.
    Row(Operation),
    /// A batch.
    Batch(BatchKind),
}

impl Ran {
    /// What `statement` runs.
    pub fn of(statement: &Statement) -> Self {
        match statement {
            Statement::Row(operation) => Ran::Row(*operation),
            Statement::Batch(batch) => Ran::Batch(batch.kind),
        }
    }
}

/// A statement's answer, as the engine reads it
/// ([`Input::Answer`](super::Input::Answer)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A single-row statement's.
    Row(Reply),
    /// A batch's.
    Batch(BatchReply),
}

impl Answer {
    /// True if the database answered (a failure is not an answer).
    pub fn is_answered(&self) -> bool {
        !matches!(
            self,
            Answer::Row(Reply::Failed(_)) | Answer::Batch(BatchReply::Failed(_))
        )
    }
}

/// What an engine asks of its driver: a core command, either machine's,
/// carried out in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Order {
    /// Run `statement`; answer with `request`. `end_by`: when it must have
    /// ended (a leader's deadline, or a batch's give-up), which a blocking
    /// driver cuts its waits to; `None`: the request timeout bounds it.
    Execute {
        /// The id to answer with.
        request: RequestId,
        /// What to run.
        statement: Statement,
        /// When it must have ended, if sooner than the request timeout.
        end_by: Option<Instant>,
    },
    /// The statement `request` was given up on: cancel and forget it.
    Cancel {
        /// The statement given up on.
        request: RequestId,
    },
    /// Start `lease`'s work for the term `epoch`.
    StartWork {
        /// Whose work.
        lease: LeaseName,
        /// The term it runs in.
        epoch: Epoch,
    },
    /// Stop `lease`'s work of the term `epoch`.
    StopWork {
        /// Whose work.
        lease: LeaseName,
        /// The term that ends.
        epoch: Epoch,
        /// Why it ends.
        reason: Demotion,
    },
    /// Publish `lease`'s new leadership.
    Publish {
        /// Whose leadership.
        lease: LeaseName,
        /// What it is now.
        leadership: Leadership,
    },
    /// Look for other connections' commits (`true`), or stop.
    WatchChanges(bool),
    /// No more orders will come.
    Finished,
}

impl Order {
    /// A lone lease's `command`: every order names `lease`, and a
    /// statement is single-row, ending by the leader's `deadline` if any.
    pub(super) fn of_lease(command: Command, lease: &LeaseName, deadline: Option<Instant>) -> Self {
        match command {
            Command::Execute { request, operation } => Order::Execute {
                request,
                statement: Statement::Row(operation),
                end_by: deadline,
            },
            Command::Cancel { request } => Order::Cancel { request },
            Command::StartWork { epoch } => Order::StartWork {
                lease: lease.clone(),
                epoch,
            },
            Command::StopWork { epoch, reason } => Order::StopWork {
                lease: lease.clone(),
                epoch,
                reason,
            },
            Command::Publish(leadership) => Order::Publish {
                lease: lease.clone(),
                leadership,
            },
            Command::WatchChanges(on) => Order::WatchChanges(on),
            Command::Finished => Order::Finished,
        }
    }

    /// A set's `command`. Its hand-over is the lone lease's single-row
    /// statement at the lease's epoch (one lease, with a reservation the
    /// batches have no column for), bound with
    /// [`Engine::row_lease`](super::Engine::row_lease) and
    /// [`Engine::successor`](super::Engine::successor).
    pub(super) fn of_set(command: SetCommand) -> Self {
        match command {
            SetCommand::Execute {
                request,
                batch,
                end_by,
            } if batch.kind == BatchKind::HandOver => Order::Execute {
                request,
                statement: Statement::Row(Operation::HandOver {
                    epoch: batch
                        .items
                        .first()
                        .and_then(|(_, epoch)| *epoch)
                        .unwrap_or(Epoch::new(0)),
                }),
                end_by: Some(end_by),
            },
            SetCommand::Execute {
                request,
                batch,
                end_by,
            } => Order::Execute {
                request,
                statement: Statement::Batch(batch),
                end_by: Some(end_by),
            },
            SetCommand::Cancel { request } => Order::Cancel { request },
            SetCommand::StartWork { lease, epoch } => Order::StartWork { lease, epoch },
            SetCommand::StopWork {
                lease,
                epoch,
                reason,
            } => Order::StopWork {
                lease,
                epoch,
                reason,
            },
            SetCommand::Publish { lease, leadership } => Order::Publish { lease, leadership },
            SetCommand::WatchChanges(on) => Order::WatchChanges(on),
            SetCommand::Finished => Order::Finished,
        }
    }
}
