//! # picolease
//!
//! Leader election for background work through a lease row in the SQL
//! database a service already uses. One node holds the lease; the work that
//! would be wasteful to run everywhere runs only there; when the holder
//! crashes, stalls or shuts down, another node takes over within a bound.
//!
//! This crate holds the drivers; the election itself is the deterministic
//! [`LeaseState`] of `picolease-core`, re-exported here.
//!
//! - [`sqlite`] (feature `sqlite`): a blocking driver on rusqlite.
//! - [`postgres`] (feature `postgres`): an async driver on tokio-postgres.

pub use picolease_core::{
    sql, Command, Config, ConfigError, Demotion, Epoch, Failure, HolderId, Instant, Leadership,
    LeaseName, LeaseState, Operation, Reply, RequestId, Role, RowError, TableName, DEFAULT_TABLE,
};

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// The README's examples, compiled as doctests so they cannot rot.
#[cfg(all(doctest, feature = "sqlite", feature = "postgres"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
