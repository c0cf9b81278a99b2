//! The blocking driver on SQLite (rusqlite, bundled SQLite).
//!
//! A thread per contender owns one connection and one
//! [`LeaseState`](picolease_core::LeaseState); it feeds the machine ticks,
//! statement results and shutdown, and carries out its commands.
//! Leadership is published on a `tokio::sync::watch` channel (no runtime
//! needed) and can be waited on with [`LeaseView::wait_for`](crate::LeaseView::wait_for). Work
//! registered with [`SqliteLeaseBuilder::while_leader`] runs on its own
//! thread while this node leads.
//!
//! The same vocabulary as [`crate::postgres`]: `builder`, `while_leader`,
//! `start`, `leadership`, `watch`, `subscribe`, `fence`, `shutdown`,
//! `abort`; the blocking flavour adds `wait_for` and `wait_change`.
//!
//! Several processes share one database file: each opens its own
//! connection in WAL mode with a busy timeout below the request timeout,
//! and a watchdog interrupts any statement that outlives the timeout.
//!
//! ```
//! use std::time::Duration;
//! use picolease::sqlite::{Database, SqliteLease};
//! use picolease::{Config, HolderId, LeaseName};
//!
//! let dir = tempfile::tempdir()?;
//! let config = Config::with_ttl(
//!     LeaseName::new("maintenance")?,
//!     HolderId::new("node-a")?,
//!     Duration::from_millis(500),
//! );
//! let lease = SqliteLease::builder(config, Database::file(dir.path().join("leases.db")))
//!     .while_leader(|ctx| {
//!         // Runs only while this node leads; `ctx.fence()` guards its writes.
//!         while !ctx.sleep(Duration::from_millis(50)) {}
//!     })
//!     .start()?;
//! let leading = lease
//!     .wait_for(Duration::from_secs(10), |l| l.is_leader())
//!     .expect("a lone contender leads");
//! assert_eq!(leading.epoch.map(|e| e.get()), Some(1));
//! lease.shutdown()?; // stops the work, then releases
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod admin;
mod builder;
mod changes;
mod error;
mod fence;
mod gate;
mod handle;
mod inbox;
mod open;
mod options;
mod table;
mod thread;
mod watchdog;
mod worker;

pub use error::SqliteError;
pub use fence::Fence;
pub use gate::{Cancellation, LeaderContext};
pub use handle::{
    Builder, Contender, SqliteLease, SqliteLeaseBuilder, SqliteLeaseSet, SqliteLeaseSetBuilder,
    DEFAULT_CHANGE_CHECK,
};
pub use open::{open_connection, Database, Location};
pub use table::LeaseTable;
