//! The options a lone lease and a lease set take alike on PostgreSQL:
//! one struct, and a macro that gives both builders the same four option
//! methods with the same meaning (the work and the clock are every
//! server database's: `crate::server::builder`).

use std::time::Duration;

use picolease_core::TableName;

use super::fence::Fence;
use crate::clock::SharedClock;
use crate::server::gate::GatedTask;

/// Where the lease rows live, how the driver treats its connections, the
/// gated work and the clock.
pub(crate) struct PgOptions {
    pub(crate) table: TableName,
    pub(crate) auto_create: bool,
    pub(crate) notifications: bool,
    pub(crate) linger: Duration,
    pub(crate) tasks: Vec<GatedTask<Fence>>,
    pub(crate) clock: SharedClock,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            table: TableName::default(),
            auto_create: true,
            notifications: true,
            linger: super::DEFAULT_LINGER,
            tasks: Vec::new(),
            clock: crate::clock::system(),
        }
    }
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions")
            .field("table", &self.table)
            .field("auto_create", &self.auto_create)
            .field("notifications", &self.notifications)
            .field("linger", &self.linger)
            .field("tasks", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

/// The builder methods of [`PgOptions`], for a builder with a field
/// `options: PgOptions`.
macro_rules! pg_option_methods {
    () => {
        /// The lease table (default [`picolease_core::DEFAULT_TABLE`]).
        pub fn table(mut self, table: picolease_core::TableName) -> Self {
            self.options.table = table;
            self
        }

        /// Create the table and its fence index if they are missing, on
        /// first connect (default on). Off, a missing table finishes the
        /// driver with [`PgError::MissingTable`](super::PgError::MissingTable);
        /// create it with [`super::init`].
        pub fn auto_create(mut self, on: bool) -> Self {
            self.options.auto_create = on;
            self
        }

        /// Listen for release notifications on a second connection
        /// (default on, when the connector can provide a listening
        /// connection). Off, a follower notices a release at its next poll
        /// (a set: at its next survey), within one interval.
        pub fn notifications(mut self, on: bool) -> Self {
            self.options.notifications = on;
            self
        }

        /// How long `shutdown` keeps the connections open after its release
        /// freed rows, before closing them (default
        /// [`super::DEFAULT_LINGER`]; zero closes at once). The successors'
        /// acquires then do not share the server with two backends
        /// exiting. Shutdown returns that much later; nothing else waits
        /// for it.
        pub fn linger(mut self, linger: std::time::Duration) -> Self {
            self.options.linger = linger;
            self
        }
    };
}

pub(crate) use pg_option_methods;
