//! Lease sets in the drivers (DESIGN §9): the part both databases share.
//!
//! A driver of a set owns one [`LeaseSet`](picolease_core::LeaseSet) and
//! one statement connection. `SetRunner` (`runner.rs`) carries the set's
//! commands out (starting and stopping the work of each lease on its own
//! threads, publishing each lease's transitions) and hands the driver the
//! one batch to run; the driver runs it on its connection (SQLite: on its
//! thread; PostgreSQL: in its task) and feeds the result back. What the
//! work is handed is in `context.rs`, what the handle reads in
//! `status.rs`. Nothing here decides anything.

mod context;
mod runner;
mod status;

use std::sync::Arc;
use std::time::SystemTime;

use picolease_core::{Leadership, LeaseName};

pub use crate::cancellation::Cancellation;
pub use context::SetLeaderContext;
pub(crate) use runner::{Execute, SetRunner};
pub use status::{SetStatus, SetStatusView, SetView};

/// One lease's change, as a set's driver publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetTransition {
    /// The lease.
    pub lease: LeaseName,
    /// Its new state.
    pub leadership: Leadership,
    /// Wall-clock time of publication.
    pub at: SystemTime,
}

/// Gated work of a set: run on its own thread for each lease this node
/// leads, until the context is cancelled.
pub type SetWork = Arc<dyn Fn(SetLeaderContext) + Send + Sync + 'static>;

/// The template of the set tests: holder `me`, ttl 1 s.
#[cfg(test)]
pub(crate) fn test_template() -> picolease_core::Config {
    picolease_core::Config::with_ttl(
        LeaseName::new("unused").expect("valid"),
        picolease_core::HolderId::new("me").expect("valid"),
        std::time::Duration::from_secs(1),
    )
}
