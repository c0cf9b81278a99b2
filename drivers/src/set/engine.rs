//! `Engine`: the one machine a driver's loop runs, a lone lease or a set.
//!
//! A driver has one loop per database whatever the number of leases: the
//! loop drives an [`Engine`] through [`SetRunner`](super::SetRunner), and
//! the engine is either a lone lease's `LeaseState` (single-row
//! statements, the measured floor of DESIGN §4) or a `LeaseSet` (batched
//! statements, DESIGN §9). Both speak the same [`Order`]s, so the loop,
//! its connection, its notices, its watchdog and its gates are written
//! once. Nothing here decides anything: each method hands an input to the
//! core machine and each order is a core command, renamed.

use picolease_core::sql::LeaseRow;
use picolease_core::{
    Batch, BatchKind, BatchReply, Command, Demotion, Epoch, HolderId, Instant, Leadership,
    LeaseName, LeaseSet, LeaseState, Operation, Reply, RequestId, SetCommand, SetConfig,
};

/// The core machine of one driver loop.
#[derive(Debug)]
pub(crate) enum Engine {
    /// One lease, one row, single-row statements.
    Lease(Box<LeaseState>),
    /// Many leases, batched statements, a fair share between nodes.
    Set(Box<LeaseSet>),
}

/// A statement the engine asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Statement {
    /// A single-row statement: a lone lease's, or a set's hand-over of
    /// one lease ([`Engine::row_lease`]). A lone lease's ended term's work
    /// must have returned before it runs: that is how its release comes
    /// after its work (DESIGN §5); a set waits for `handle_work_stopped`
    /// instead, in the core, and its other leases' work is not waited for.
    Row(Operation),
    /// A set's batch.
    Batch(Batch),
}

/// What a statement ran, kept while it is in flight (for its metrics and
/// its renew latencies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    /// A single-row statement.
    Row(Operation),
    /// A batch.
    Batch(BatchKind),
}

impl Ran {
    pub(crate) fn of(statement: &Statement) -> Self {
        match statement {
            Statement::Row(operation) => Ran::Row(*operation),
            Statement::Batch(batch) => Ran::Batch(batch.kind),
        }
    }
}

/// A statement's answer, as the core reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A single-row statement's.
    Row(Reply),
    /// A batch's.
    Batch(BatchReply),
}

impl Answer {
    /// True if the database answered (a failure is not an answer).
    pub(crate) fn is_answered(&self) -> bool {
        !matches!(
            self,
            Answer::Row(Reply::Failed(_)) | Answer::Batch(BatchReply::Failed(_))
        )
    }
}

/// What an engine asks of its driver: a core command, either machine's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// Run `statement`; answer with `request`. `end_by`: when it must have
    /// ended (a leader's deadline, or a batch's give-up), which a blocking
    /// driver cuts its waits to; `None`: the request timeout bounds it.
    Execute {
        request: RequestId,
        statement: Statement,
        end_by: Option<Instant>,
    },
    /// The statement `request` was given up on: cancel and forget it.
    Cancel { request: RequestId },
    /// Start `lease`'s work for the term `epoch`.
    StartWork { lease: LeaseName, epoch: Epoch },
    /// Stop `lease`'s work of the term `epoch`.
    StopWork {
        lease: LeaseName,
        epoch: Epoch,
        reason: Demotion,
    },
    /// Publish `lease`'s new leadership.
    Publish {
        lease: LeaseName,
        leadership: Leadership,
    },
    /// Look for other connections' commits (`true`), or stop.
    WatchChanges(bool),
    /// No more orders will come.
    Finished,
}

impl Engine {
    /// The holder id and timings (a lone lease's without its name).
    pub(crate) fn config(&self) -> SetConfig {
        match self {
            Engine::Lease(state) => state.config().without_lease(),
            Engine::Set(set) => set.config().clone(),
        }
    }

    /// The lease a single-row statement binds: a lone lease's name, or
    /// the lease of a set's hand-over in flight; `None` otherwise (a set's
    /// batches name their leases).
    pub(crate) fn row_lease(&self) -> Option<&LeaseName> {
        match self {
            Engine::Lease(state) => Some(&state.config().lease),
            Engine::Set(set) => set.hand_over_in_flight().map(|(lease, _)| lease),
        }
    }

    /// True for a set (its metrics are the set's, `metrics::set`).
    pub(crate) fn is_set(&self) -> bool {
        matches!(self, Engine::Set(_))
    }

    /// The next order, in order.
    pub(crate) fn poll_order(&mut self) -> Option<Order> {
        match self {
            Engine::Lease(state) => {
                let command = state.poll_command()?;
                let lease = &state.config().lease;
                let order = match command {
                    Command::Execute { request, operation } => Order::Execute {
                        request,
                        statement: Statement::Row(operation),
                        end_by: state.leader_deadline(),
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
                };
                Some(order)
            }
            Engine::Set(set) => Some(match set.poll_command()? {
                // A set's hand-over is the lone lease's single-row
                // statement, bound with `row_lease` and `successor`.
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
            }),
        }
    }

    /// When the machine next needs [`Engine::handle_timeout`].
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Engine::Lease(state) => state.poll_timeout(),
            Engine::Set(set) => set.poll_timeout(),
        }
    }

    /// True once finished: it ignores every input.
    pub(crate) fn is_finished(&self) -> bool {
        match self {
            Engine::Lease(state) => state.is_finished(),
            Engine::Set(set) => set.is_finished(),
        }
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        match self {
            Engine::Lease(state) => state.handle_timeout(now),
            Engine::Set(set) => set.handle_timeout(now),
        }
    }

    pub(crate) fn handle_shutdown(&mut self, now: Instant) {
        match self {
            Engine::Lease(state) => state.handle_shutdown(now),
            Engine::Set(set) => set.handle_shutdown(now),
        }
    }

    /// A planned handover to the reservation `to` (DESIGN §3 "Planned
    /// handover") of a lone lease (`lease` is `None`), or of one lease
    /// of a set.
    pub(crate) fn handle_hand_over(
        &mut self,
        now: Instant,
        lease: Option<&LeaseName>,
        to: Option<HolderId>,
    ) {
        // Each handle sends its own kind: a lone lease names none.
        let _led = match (self, lease) {
            (Engine::Lease(state), None) => state.handle_hand_over(now, to),
            (Engine::Set(set), Some(lease)) => set.handle_hand_over(now, lease.as_str(), to),
            (Engine::Lease(_), Some(_)) | (Engine::Set(_), None) => false,
        };
    }

    /// "Hand over, then exit": a lone lease hands over to its preferred
    /// candidate (DESIGN §3 "Preferred holders"), else releases (its
    /// shutdown follows); a set hands each lease to the member that ranks
    /// first for it and shuts down (`LeaseSet::handle_leave`).
    pub(crate) fn handle_hand_over_to_preferred(&mut self, now: Instant) {
        let _handed = match self {
            Engine::Lease(state) => usize::from(state.handle_hand_over_to_preferred(now)),
            Engine::Set(set) => set.handle_leave(now),
        };
    }

    /// The reservation a hand-over binds, a lone lease's or a set's in
    /// flight (`""` otherwise).
    pub(crate) fn successor(&self) -> &str {
        let successor = match self {
            Engine::Lease(state) => state.successor(),
            Engine::Set(set) => set.hand_over_in_flight().and_then(|(_, to)| to),
        };
        successor.map_or("", HolderId::as_str)
    }

    /// A lone lease's announcement as a candidate (DESIGN §3 "Preferred
    /// holders"; `""` when it announces nothing, and for a set).
    pub(crate) fn announcement(&self) -> &str {
        match self {
            Engine::Lease(state) => state.announcement().unwrap_or(""),
            Engine::Set(_) => "",
        }
    }

    /// A set's node gives `lease` up (a lone lease's handle has no such
    /// call, so it never comes for one).
    pub(crate) fn handle_give_up(&mut self, now: Instant, lease: &str) {
        if let Engine::Set(set) = self {
            set.handle_give_up(now, lease);
        }
    }

    /// `lease`'s work has returned. A lone lease's driver joins it before
    /// the next [`Statement::Row`] instead, so its machine needs no word.
    pub(crate) fn handle_work_stopped(&mut self, now: Instant, lease: &str) {
        if let Engine::Set(set) = self {
            set.handle_work_stopped(now, lease);
        }
    }

    /// A statement's answer.
    pub(crate) fn handle_answer(&mut self, now: Instant, request: RequestId, answer: Answer) {
        match (self, answer) {
            (Engine::Lease(state), Answer::Row(reply)) => state.handle_reply(now, request, reply),
            (Engine::Set(set), Answer::Batch(reply)) => set.handle_reply(now, request, reply),
            // A set's hand-over, a single-row statement.
            (Engine::Set(set), Answer::Row(reply)) => set.handle_row_reply(now, request, reply),
            (engine, answer) => {
                debug_assert!(false, "{answer:?} answers no statement of {engine:?}");
            }
        }
    }

    /// A database-clock reading taken after a statement sent at `sent_at`;
    /// true if it stepped (every held lease demotes, DESIGN §4b).
    pub(crate) fn handle_db_clock(
        &mut self,
        now: Instant,
        sent_at: Instant,
        db_millis: i64,
    ) -> bool {
        match self {
            Engine::Lease(state) => state.handle_db_clock(now, sent_at, db_millis),
            Engine::Set(set) => set.handle_db_clock(now, sent_at, db_millis),
        }
    }

    /// Release notices for `leases` (PostgreSQL's NOTIFY payloads).
    pub(crate) fn handle_release_notices<'a>(
        &mut self,
        now: Instant,
        leases: impl IntoIterator<Item = &'a str>,
    ) {
        match self {
            Engine::Lease(state) => {
                let mine = state.config().lease.as_str().to_owned();
                if leases.into_iter().any(|lease| lease == mine) {
                    state.handle_release_notice(now);
                }
            }
            Engine::Set(set) => set.handle_release_notices(now, leases),
        }
    }

    /// Notices may have been lost (the listener reconnected): a lone lease
    /// tries at once, as on a notice; a set surveys.
    pub(crate) fn handle_notices_lost(&mut self, now: Instant) {
        match self {
            Engine::Lease(state) => state.handle_release_notice(now),
            Engine::Set(set) => set.handle_survey_request(now),
        }
    }

    /// Another connection committed: a lone lease hands its row, read by
    /// `read_row`, to the core (which tells a release from anything else);
    /// a set surveys.
    pub(crate) fn handle_change(
        &mut self,
        now: Instant,
        read_row: impl FnOnce(&LeaseName) -> Option<LeaseRow>,
    ) {
        match self {
            Engine::Lease(state) => {
                if let Some(row) = read_row(&state.config().lease) {
                    state.handle_row_observed(now, &row);
                }
            }
            Engine::Set(set) => set.handle_survey_request(now),
        }
    }

    /// `lease`'s leader deadline, while this node leads it.
    pub(crate) fn deadline(&self, lease: &str) -> Option<Instant> {
        match self {
            Engine::Lease(state) => state
                .leader_deadline()
                .filter(|_| state.config().lease.as_str() == lease),
            Engine::Set(set) => set.deadline(lease),
        }
    }

    /// A set's live members and this node's share (a lone lease has none).
    pub(crate) fn share(&self, now: Instant) -> Option<(Vec<HolderId>, Option<usize>)> {
        match self {
            Engine::Lease(_) => None,
            Engine::Set(set) => Some((set.members(now), set.target(now))),
        }
    }

    /// A set's survey threshold (0 for a lone lease, which never surveys).
    pub(crate) fn stale_millis(&self) -> i64 {
        match self {
            Engine::Lease(_) => 0,
            Engine::Set(set) => set.stale_millis(),
        }
    }
}
