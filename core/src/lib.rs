//! # picolease-core
//!
//! The deterministic heart of picolease: leader election through a lease
//! row in a SQL database, as a pure state machine ([`LeaseState`]) plus the
//! statements whose atomicity it relies on ([`sql::Statements`]).
//!
//! This crate has **no I/O at all**: no clock, no socket, no thread, no
//! randomness but a seed. Drivers (the `picolease` crate) feed it ticks and
//! statement results and carry out the [`Command`]s it emits; the simulator
//! (feature `sim`) feeds it virtual time and a model database.
//!
//! ```
//! use picolease_core::{Command, Config, HolderId, Instant, LeaseName, LeaseState, Operation};
//!
//! let config = Config::new(LeaseName::new("maintenance")?, HolderId::new("node-a")?);
//! let mut lease = LeaseState::new(config, Instant::ZERO)?;
//! lease.handle_timeout(Instant::ZERO);
//! assert!(matches!(
//!     lease.poll_command(),
//!     Some(Command::Execute { operation: Operation::Acquire, .. })
//! ));
//! // As a running follower it watches for other nodes' releases (SQLite's
//! // file watch; PostgreSQL's notices come unasked).
//! assert_eq!(lease.poll_command(), Some(Command::WatchChanges(true)));
//! // Nothing else to do until the request times out or its reply arrives.
//! assert_eq!(lease.poll_command(), None);
//! assert_eq!(lease.poll_timeout(), Some(Instant::ZERO + lease.config().request_timeout));
//! # Ok::<(), picolease_core::ConfigError>(())
//! ```

#![forbid(unsafe_code)]

#[cfg(feature = "sim")]
pub mod check;
mod config;
pub mod engine;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod names;
mod protocol;
pub mod rank;
pub mod set;
#[cfg(feature = "sim")]
pub mod sim;
pub mod sql;
mod state;
pub mod supervision;
mod time;

pub use config::{Config, SetConfig, DB_CLOCK_RESOLUTION};
pub use engine::{Engine, Input, Order};
pub use error::{ConfigError, RowError};
pub use names::{
    Epoch, HolderId, LeaseName, TableName, DEFAULT_TABLE, MAX_NAME_LEN, MAX_TABLE_LEN,
};
pub use protocol::{Command, Demotion, Failure, Leadership, Operation, Reply, RequestId, Role};
pub use rank::{Candidate, Rank};
pub use set::{Batch, BatchKind, BatchReply, LeaseSet, SetCommand, MAX_BATCH};
pub use state::LeaseState;
#[cfg(feature = "mutants")]
#[doc(hidden)]
pub use state::Mutation;
pub use time::Instant;
