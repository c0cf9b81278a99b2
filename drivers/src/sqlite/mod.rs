//! The blocking driver on SQLite (rusqlite, bundled SQLite).
//!
//! A thread per contender owns one connection and one [`LeaseState`]
//! (crate::LeaseState); it feeds the machine ticks, statement results and
//! shutdown, and carries out its commands. Leadership is published on a
//! `tokio::sync::watch` channel (no runtime needed) and can be waited on
//! with [`SqliteLease::wait_for`]. Work registered with
//! [`Builder::while_leader`] runs on its own thread while this node leads.
//!
//! Several processes share one database file: each opens its own
//! connection in WAL mode with a busy timeout below the request timeout,
//! and a watchdog interrupts any statement that outlives the timeout.
//!
//! ```
//! use std::time::Duration;
//! use picolease::sqlite::{Builder, Database};
//! use picolease::{Config, HolderId, LeaseName};
//!
//! let dir = tempfile::tempdir()?;
//! let config = Config::with_ttl(
//!     LeaseName::new("maintenance")?,
//!     HolderId::new("node-a")?,
//!     Duration::from_millis(500),
//! );
//! let lease = Builder::new(config, Database::file(dir.path().join("leases.db")))
//!     .while_leader(|work| {
//!         // Runs only while this node leads; `work.epoch` fences its writes.
//!         while !work.sleep(Duration::from_millis(50)) {}
//!     })
//!     .start()?;
//! let leading = lease
//!     .wait_for(Duration::from_secs(10), |l| l.is_leader())
//!     .expect("a lone contender leads");
//! assert_eq!(leading.epoch.map(|e| e.get()), Some(1));
//! lease.shutdown()?; // stops the work, then releases
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod connection;
mod driver;
mod error;
mod watchdog;
mod work;

pub use connection::{open_connection, Database, Fence, LeaseTable, Location};
pub use driver::{Builder, SqliteLease, Transition};
pub use error::Error;
pub use work::{Cancellation, WorkContext};
