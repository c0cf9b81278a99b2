//! The options a lone lease and a lease set take alike on MySQL.

use picolease_core::TableName;

use super::fence::Fence;
use crate::clock::SharedClock;
use crate::server::gate::GatedTask;

/// Where the lease rows live, whether to create them, the gated work and
/// the clock.
pub(crate) struct MysqlOptions {
    pub(crate) table: TableName,
    pub(crate) auto_create: bool,
    /// A lone lease's followers wait on the leader's wake-up lock.
    pub(crate) wake_up: bool,
    pub(crate) tasks: Vec<GatedTask<Fence>>,
    pub(crate) clock: SharedClock,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        MysqlOptions {
            table: TableName::default(),
            auto_create: true,
            wake_up: true,
            tasks: Vec::new(),
            clock: crate::clock::system(),
        }
    }
}

impl std::fmt::Debug for MysqlOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlOptions")
            .field("table", &self.table)
            .field("auto_create", &self.auto_create)
            .field("wake_up", &self.wake_up)
            .field("tasks", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

/// The builder methods of [`MysqlOptions`], for a builder with a field
/// `options: MysqlOptions`.
macro_rules! mysql_option_methods {
    () => {
        /// The lease table (default [`picolease_core::DEFAULT_TABLE`]).
        pub fn table(mut self, table: picolease_core::TableName) -> Self {
            self.options.table = table;
            self
        }

        /// Create the table (InnoDB, with its `(name, epoch)` index) if it
        /// is missing, on first connect (default on). Off, a missing table
        /// finishes the driver with
        /// [`MysqlError::MissingTable`](super::MysqlError::MissingTable);
        /// create it with [`super::init`].
        pub fn auto_create(mut self, on: bool) -> Self {
            self.options.auto_create = on;
            self
        }

        /// Wake followers of a lone lease at once when its leader releases
        /// (default on): the leader's session holds a named user lock
        /// while it leads and a follower waits on it from a second
        /// connection (`GET_LOCK`). Off, or where the server refuses user
        /// locks (Galera), a follower takes a released lease at its next
        /// poll, within one interval. Only a wake-up: who leads is still
        /// the row's and the epoch's. A set has no wake-up yet.
        pub fn wake_up(mut self, on: bool) -> Self {
            self.options.wake_up = on;
            self
        }
    };
}

pub(crate) use mysql_option_methods;
