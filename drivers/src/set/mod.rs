//! Lease sets in the drivers (DESIGN §9): the part both databases share.
//!
//! A driver of a set owns one [`LeaseSet`](picolease_core::LeaseSet) and
//! one statement connection. `SetRunner` (`runner.rs`) carries the set's
//! commands out and hands the driver the one batch to run; the driver runs
//! it on its connection (SQLite: on its thread; PostgreSQL: in its task)
//! and feeds the result back. Each lease of the set is a lone lease's
//! output and work side: its own `Publisher` (leadership, watch,
//! deadline), and its own gate (the driver's, through `TermGate`), so
//! set work gets the very `LeaderContext` lease work gets. What the
//! handle reads is in `view.rs`. Nothing here decides anything.

mod runner;
mod view;

use picolease_core::{Epoch, Instant, RequestId};

/// The core's engine, which the loops drive through [`SetRunner`], and
/// what its statements are.
pub(crate) use picolease_core::engine::{Answer, Input, Ran, Statement};

pub use crate::cancellation::Cancellation;
pub(crate) use runner::{SetRunner, REAP_EVERY};
pub use view::{SetSnapshot, SetSnapshots, SetView};

/// One lease's gated work, as the set starts and stops it: the gate of a
/// lone lease of the same driver (SQLite: threads; PostgreSQL: tasks).
pub(crate) trait TermGate: Send + 'static {
    /// `StartWork`: starts every registered work for the term `epoch`.
    fn start(&mut self, epoch: Epoch);
    /// `StopWork`: signals the term `epoch`'s work to stop (no wait).
    fn stop(&mut self, epoch: Epoch);
    /// Signals whatever runs to stop (the driver is ending).
    fn stop_all(&mut self);
    /// True once every work told to stop has returned (never waits).
    fn has_stopped(&mut self) -> bool;
}

/// A statement for the driver to run, as the engine asked for it.
#[derive(Debug)]
pub(crate) struct Execute {
    /// The id to answer with ([`SetRunner::reply`]).
    pub(crate) request: RequestId,
    /// What to run.
    pub(crate) statement: Statement,
    /// When the statement must have ended by, on the engine's clock (a
    /// leader's deadline, a batch's give-up); `None`: the request timeout.
    pub(crate) end_by: Option<Instant>,
}

/// What one [`SetRunner::carry_out`] leaves to the driver.
#[derive(Debug, Default)]
pub(crate) struct Carried {
    /// The next batch to run.
    pub(crate) execute: Option<Execute>,
    /// The batch the set gave up on (past its request timeout): the
    /// driver cancels it on the server and forgets it; its result, should
    /// it still come, would be ignored by the set.
    pub(crate) cancel: Option<RequestId>,
}

/// The template of the set tests: holder `me`, ttl 1 s.
#[cfg(test)]
pub(crate) fn test_template() -> picolease_core::SetConfig {
    picolease_core::SetConfig::with_ttl(
        picolease_core::HolderId::new("me").expect("valid"),
        std::time::Duration::from_secs(1),
    )
}

/// A gate with no work, for the runner's tests.
#[cfg(test)]
pub(crate) struct NoWork;

#[cfg(test)]
impl TermGate for NoWork {
    fn start(&mut self, _: Epoch) {}
    fn stop(&mut self, _: Epoch) {}
    fn stop_all(&mut self) {}
    fn has_stopped(&mut self) -> bool {
        true
    }
}
