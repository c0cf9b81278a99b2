//! The options every server database's builders take (the table, table
//! creation, the work, the clock), and a database's own beside them
//! (`PgOptions`, `MysqlOptions`). The builder methods that set them are
//! the builder's (`contender.rs`, and each database's `handle.rs`).

use picolease_core::TableName;

use super::gate::GatedTask;
use crate::clock::SharedClock;
use crate::supervise::{AsyncProbe, RestartPolicy};

/// Where the lease rows live, whether to create them, the gated work (of
/// fence `F`), the clock, and the database's own options `O`.
pub(crate) struct ServerOptions<F, O> {
    pub(crate) table: TableName,
    pub(crate) auto_create: bool,
    pub(crate) tasks: Vec<GatedTask<F>>,
    pub(crate) clock: SharedClock,
    /// How failing work is restarted and escalated.
    pub(crate) restart: RestartPolicy,
    /// The health probe, if any.
    pub(crate) probe: Option<AsyncProbe>,
    pub(crate) own: O,
}

impl<F, O: Default> Default for ServerOptions<F, O> {
    fn default() -> Self {
        ServerOptions {
            table: TableName::default(),
            auto_create: true,
            tasks: Vec::new(),
            clock: crate::clock::system(),
            restart: RestartPolicy::default(),
            probe: None,
            own: O::default(),
        }
    }
}

impl<F, O: std::fmt::Debug> std::fmt::Debug for ServerOptions<F, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("table", &self.table)
            .field("auto_create", &self.auto_create)
            .field("tasks", &self.tasks.len())
            .field("restart", &self.restart)
            .field("probe", &self.probe.is_some())
            .field("own", &self.own)
            .finish_non_exhaustive()
    }
}
