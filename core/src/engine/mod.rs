//! `Engine`: the one machine a driver's loop runs, a lone lease or a set,
//! behind one input language ([`Input`]) and one output language
//! ([`Order`]).
//!
//! A driver has one loop per database whatever the number of leases: the
//! loop drives an [`Engine`], which is either a lone lease's
//! [`LeaseState`] (single-row statements, the measured floor of DESIGN §4)
//! or a [`LeaseSet`] (batched statements, DESIGN §9). Both take the same
//! inputs and speak the same orders, so the loop, its connection, its
//! notices, its watchdog and its gates are written once. The few
//! decisions the engine makes between the two (a set's hand-over is a
//! single-row statement; a lone lease keeps the notices of its own name;
//! a change is a lone lease's row or a set's survey) are here, in the
//! core, and exact order vectors test them (`core/tests/engine.rs`).

mod input;
mod order;

pub use input::Input;
pub use order::{Answer, Order, Ran, Statement};

use crate::{HolderId, Instant, LeaseName, LeaseSet, LeaseState, SetConfig};

/// The core machine of one driver loop.
#[derive(Debug)]
pub enum Engine {
    /// One lease, one row, single-row statements.
    Lease(Box<LeaseState>),
    /// Many leases, batched statements, a fair share between nodes.
    Set(Box<LeaseSet>),
}

impl From<LeaseState> for Engine {
    fn from(state: LeaseState) -> Self {
        Engine::Lease(Box::new(state))
    }
}

impl From<LeaseSet> for Engine {
    fn from(set: LeaseSet) -> Self {
        Engine::Set(Box::new(set))
    }
}

impl Engine {
    /// The holder id and timings (a lone lease's without its name).
    pub fn config(&self) -> SetConfig {
        match self {
            Engine::Lease(state) => state.config().without_lease(),
            Engine::Set(set) => set.config().clone(),
        }
    }

    /// The lease a single-row statement binds: a lone lease's name, or
    /// the lease of a set's hand-over in flight; `None` otherwise (a set's
    /// batches name their leases).
    pub fn row_lease(&self) -> Option<&LeaseName> {
        match self {
            Engine::Lease(state) => Some(&state.config().lease),
            Engine::Set(set) => set.hand_over_in_flight().map(|(lease, _)| lease),
        }
    }

    /// True for a set (its metrics are the set's).
    pub fn is_set(&self) -> bool {
        matches!(self, Engine::Set(_))
    }

    /// The next order, in order.
    pub fn poll_order(&mut self) -> Option<Order> {
        match self {
            Engine::Lease(state) => {
                let command = state.poll_command()?;
                Some(Order::of_lease(
                    command,
                    &state.config().lease,
                    state.leader_deadline(),
                ))
            }
            Engine::Set(set) => set.poll_command().map(Order::of_set),
        }
    }

    /// When the machine next needs [`Input::Timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Engine::Lease(state) => state.poll_timeout(),
            Engine::Set(set) => set.poll_timeout(),
        }
    }

    /// True once finished: it ignores every input.
    pub fn is_finished(&self) -> bool {
        match self {
            Engine::Lease(state) => state.is_finished(),
            Engine::Set(set) => set.is_finished(),
        }
    }

    /// A database-clock reading taken after a statement sent at `sent_at`;
    /// true if it stepped (every held lease demotes, DESIGN §4b). Not an
    /// [`Input`]: it is part of running a statement (SQLite reads the clock
    /// after each, before its answer), and the driver logs its outcome.
    pub fn handle_db_clock(&mut self, now: Instant, sent_at: Instant, db_millis: i64) -> bool {
        match self {
            Engine::Lease(state) => state.handle_db_clock(now, sent_at, db_millis),
            Engine::Set(set) => set.handle_db_clock(now, sent_at, db_millis),
        }
    }

    /// The reservation a hand-over binds, a lone lease's or a set's in
    /// flight (`""` otherwise).
    pub fn successor(&self) -> &str {
        let successor = match self {
            Engine::Lease(state) => state.successor(),
            Engine::Set(set) => set.hand_over_in_flight().and_then(|(_, to)| to),
        };
        successor.map_or("", HolderId::as_str)
    }

    /// A lone lease's announcement as a candidate (DESIGN §3 "Preferred
    /// holders"), the text it binds whenever it announces (`""` when it
    /// would not fit, and for a set).
    pub fn announcement(&self) -> &str {
        match self {
            Engine::Lease(state) => state.announcement().unwrap_or(""),
            Engine::Set(_) => "",
        }
    }

    /// `lease`'s leader deadline, while this node leads it.
    pub fn deadline(&self, lease: &str) -> Option<Instant> {
        match self {
            Engine::Lease(state) => state
                .leader_deadline()
                .filter(|_| state.config().lease.as_str() == lease),
            Engine::Set(set) => set.deadline(lease),
        }
    }

    /// A set's live members and this node's share (a lone lease has none).
    pub fn share(&self, now: Instant) -> Option<(Vec<HolderId>, Option<usize>)> {
        match self {
            Engine::Lease(_) => None,
            Engine::Set(set) => Some((set.members(now), set.target(now))),
        }
    }

    /// A set's survey threshold (0 for a lone lease, which never surveys).
    pub fn stale_millis(&self) -> i64 {
        match self {
            Engine::Lease(_) => 0,
            Engine::Set(set) => set.stale_millis(),
        }
    }
}
