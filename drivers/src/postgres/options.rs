//! The options a lone lease and a lease set take alike on PostgreSQL:
//! one struct, and two macros that give both builders the same methods
//! with the same meaning (the four options; the work and the clock).

use std::time::Duration;

use picolease_core::TableName;

use super::gate::GatedTask;
use crate::clock::SharedClock;

/// Where the lease rows live, how the driver treats its connections, the
/// gated work and the clock.
pub(crate) struct PgOptions {
    pub(crate) table: TableName,
    pub(crate) auto_create: bool,
    pub(crate) notifications: bool,
    pub(crate) linger: Duration,
    pub(crate) tasks: Vec<GatedTask>,
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

/// The work and clock methods both builders share, for a builder with a
/// field `options: PgOptions`.
macro_rules! pg_work_methods {
    () => {
        /// Registers work to run while this node leads (in a set: while it
        /// leads each of its leases): `task` is spawned at the start of
        /// every term with the term's [`LeaderContext`] (the lease, epoch,
        /// fence, fenced transactions, deadline), and must return soon
        /// after the term ends (`ctx.cancelled()` completes then). A
        /// lease's new term's tasks start only after its previous term's
        /// have returned; the lease is released only after they have.
        /// Several may be registered.
        pub fn while_leader<F, Fut>(mut self, task: F) -> Self
        where
            F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
            Fut: std::future::Future<Output = ()> + Send + 'static,
        {
            self.options.tasks.push(super::gate::gated_task(task));
            self
        }

        /// Times deadlines on `clock` instead of the system's suspend-aware
        /// clock: a test seam (a clock that jumps, as a suspend would).
        pub fn clock(mut self, clock: impl crate::clock::Clock) -> Self {
            self.options.clock = std::sync::Arc::new(clock);
            self
        }
    };
}

/// `Debug` for a builder: its name and the fields given, each read from
/// the builder by a closure (so a long list can print as its length).
macro_rules! builder_debug {
    ($builder:ident { $($field:literal => |$this:ident| $value:expr),* $(,)? }) => {
        impl std::fmt::Debug for $builder {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut debug = f.debug_struct(stringify!($builder));
                $({
                    let $this = self;
                    debug.field($field, &$value);
                })*
                debug.finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use {builder_debug, pg_option_methods, pg_work_methods};
