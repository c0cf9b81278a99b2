//! The engine's one input language: every [`Input`] a driver's loop
//! feeds it, and how each reaches the machine underneath.

use super::{Answer, Engine};
use crate::sql::LeaseRow;
use crate::{Epoch, HolderId, Instant, LeaseName, LeaseSet, LeaseState, RequestId};

/// What happened, as a driver's loop tells its [`Engine`]
/// ([`Engine::handle`]). Inputs a machine has no use for are ignored (a
/// lone lease has no `GiveUp`), so a loop needs no case of its own for a
/// lone lease or a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The time [`Engine::poll_timeout`] asked for (or any later one: a
    /// timeout before it changes nothing).
    Timeout,
    /// Stop the work, release, finish.
    Shutdown,
    /// A planned handover to the reservation `to`, or a release (DESIGN §3
    /// "Planned handover"): of a lone lease (`lease` is `None`), or of one
    /// lease of a set. Each handle sends its own kind; the other is
    /// ignored.
    HandOver {
        /// The set's lease; `None` for a lone lease.
        lease: Option<LeaseName>,
        /// The node to reserve the row for; `None` releases.
        to: Option<HolderId>,
    },
    /// "Hand over, then exit": a lone lease hands over to its preferred
    /// candidate (DESIGN §3 "Preferred holders"), else releases, and shuts
    /// down; a set hands each lease to the member that ranks first for it
    /// and shuts down (`LeaseSet::handle_leave`).
    HandOverToPreferred,
    /// A set's node gives the lease up (a lone lease's handle has no such
    /// call; one is ignored).
    GiveUp(LeaseName),
    /// What this node's health probe says (DESIGN §5 "Work that fails"):
    /// a lone lease's machine acts on it ([`LeaseState::handle_health`]),
    /// a set through its membership row ([`LeaseSet::handle_health`]).
    Health {
        /// True when the probe passed.
        healthy: bool,
    },
    /// A lease's work failed past its restart policy
    /// ([`crate::supervision::Verdict::Escalate`]): the lease goes to
    /// another node and this one stands aside for `cool_down`
    /// ([`LeaseState::handle_work_escalated`]; a set gives that lease up
    /// and rests from it, [`LeaseSet::handle_work_escalated`]).
    WorkEscalated {
        /// The lease (a lone lease's own, or `None` for it; a set's
        /// lease).
        lease: Option<LeaseName>,
        /// The term whose work failed: a later term is not handed over.
        epoch: Option<Epoch>,
        /// How long the node stands aside.
        cool_down: std::time::Duration,
    },
    /// The lease's stopped work has returned. A lone lease's driver joins
    /// it before the next [`Statement::Row`](super::Statement::Row)
    /// instead, so a lone lease ignores it.
    WorkStopped(LeaseName),
    /// The answer to the statement `request`.
    Answer {
        /// The id the statement's [`Order::Execute`](super::Order::Execute)
        /// carried.
        request: RequestId,
        /// What the database said.
        answer: Answer,
    },
    /// Release notices for these leases (PostgreSQL's NOTIFY payloads, any
    /// names): a lone lease acts only on its own name.
    ReleaseNotices(Vec<String>),
    /// Notices may have been lost (the listener reconnected): a lone lease
    /// tries at once, as on its notice; a set surveys.
    NoticesLost,
    /// Another connection committed, with the row of
    /// [`Engine::watched_row`] as read after it (`None` when unread or
    /// unreadable): a lone lease hands the row to its machine, which tells
    /// a release from anything else, and does nothing without it; a set
    /// surveys.
    Changed(Option<LeaseRow>),
}

impl Engine {
    /// Feeds `input`, which happened at `now`, to the machine; the orders
    /// it leads to wait in [`Engine::poll_order`].
    pub fn handle(&mut self, now: Instant, input: Input) {
        match self {
            Engine::Lease(state) => lease_input(state, now, input),
            Engine::Set(set) => set_input(set, now, input),
        }
    }

    /// The lease whose row a driver reads after another connection's
    /// commit, for [`Input::Changed`]: a lone lease's; `None` for a set,
    /// which surveys instead.
    pub fn watched_row(&self) -> Option<&LeaseName> {
        match self {
            Engine::Lease(state) => Some(&state.config().lease),
            Engine::Set(_) => None,
        }
    }
}

/// How a lone lease takes `input`.
fn lease_input(state: &mut LeaseState, now: Instant, input: Input) {
    match input {
        Input::Timeout => state.handle_timeout(now),
        Input::Shutdown => state.handle_shutdown(now),
        Input::HandOver { lease: None, to } => {
            let _led = state.handle_hand_over(now, to);
        }
        Input::HandOverToPreferred => {
            let _handed = state.handle_hand_over_to_preferred(now);
        }
        Input::Answer {
            request,
            answer: Answer::Row(reply),
        } => state.handle_reply(now, request, reply),
        Input::Answer {
            answer: Answer::Batch(reply),
            ..
        } => debug_assert!(false, "{reply:?} answers no statement of a lone lease"),
        Input::ReleaseNotices(leases) => {
            let mine = state.config().lease.as_str();
            if leases.iter().any(|lease| lease == mine) {
                state.handle_release_notice(now);
            }
        }
        Input::NoticesLost => state.handle_release_notice(now),
        Input::Changed(Some(row)) => state.handle_row_observed(now, &row),
        Input::Health { healthy } => state.handle_health(now, healthy),
        Input::WorkEscalated {
            lease,
            epoch,
            cool_down,
        } if lease
            .as_ref()
            .is_none_or(|lease| lease == &state.config().lease) =>
        {
            state.handle_work_escalated(now, epoch, cool_down)
        }
        // Nothing read: nothing to tell. A set's hand-over names its lease;
        // a lone lease gives nothing up, and joins its stopped work itself.
        Input::Changed(None)
        | Input::WorkEscalated { .. }
        | Input::HandOver { lease: Some(_), .. }
        | Input::GiveUp(_)
        | Input::WorkStopped(_) => {}
    }
}

/// How a set takes `input`.
fn set_input(set: &mut LeaseSet, now: Instant, input: Input) {
    match input {
        Input::Timeout => set.handle_timeout(now),
        Input::Shutdown => set.handle_shutdown(now),
        Input::HandOver {
            lease: Some(lease),
            to,
        } => {
            let _led = set.handle_hand_over(now, lease.as_str(), to);
        }
        // A lone lease's hand-over names no lease.
        Input::HandOver { lease: None, .. } => {}
        Input::HandOverToPreferred => {
            let _handed = set.handle_leave(now);
        }
        Input::GiveUp(lease) => set.handle_give_up(now, lease.as_str()),
        Input::WorkEscalated {
            lease: Some(lease),
            epoch,
            cool_down,
        } => set.handle_work_escalated(now, lease.as_str(), epoch, cool_down),
        Input::Health { healthy } => set.handle_health(now, healthy),
        // A set's escalation names its lease.
        Input::WorkEscalated { lease: None, .. } => {}
        Input::WorkStopped(lease) => set.handle_work_stopped(now, lease.as_str()),
        Input::Answer {
            request,
            answer: Answer::Batch(reply),
        } => set.handle_reply(now, request, reply),
        // A set's hand-over, a single-row statement.
        Input::Answer {
            request,
            answer: Answer::Row(reply),
        } => set.handle_row_reply(now, request, reply),
        Input::ReleaseNotices(leases) => {
            set.handle_release_notices(now, leases.iter().map(String::as_str));
        }
        Input::NoticesLost | Input::Changed(_) => set.handle_survey_request(now),
    }
}
