//! The async driver on MySQL 8 and MariaDB 10.6+ (mysql_async).
//!
//! The same task as PostgreSQL's (`crate::server`: one per lone lease or
//! lease set, each lease's work behind its gate), with MySQL's statement
//! connection: each statement that must report what it did runs with its
//! read-back in one transaction (MySQL has no `RETURNING`; DESIGN §3), so
//! no decision rests on an affected-row count, which MySQL reports
//! differently with and without `CLIENT_FOUND_ROWS`.
//!
//! ```no_run
//! use std::time::Duration;
//! use picolease::mysql::{MysqlConnector, MysqlLease};
//! use picolease::{unique_holder_id, Config, LeaseName};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let connector = MysqlConnector::new("mysql://root@127.0.0.1:3306/test")?;
//!     let config = Config::with_ttl(
//!         LeaseName::new("maintenance")?,
//!         unique_holder_id(),
//!         Duration::from_secs(2),
//!     );
//!     let lease = MysqlLease::builder(config, connector)
//!         .while_leader(|ctx| async move {
//!             // Runs only while this node leads; ends when the term does.
//!             ctx.cancelled().await;
//!         })
//!         .start()?;
//!     let mut leadership = lease.watch();
//!     leadership.wait_for(|l| l.is_leader()).await?;
//!     lease.shutdown().await?;
//!     Ok(())
//! }
//! ```
//!
//! # Connections and timeouts
//!
//! One statement connection per driver, over TCP, named `program_name =
//! picolease` (visible in `performance_schema.session_connect_attrs`).
//! Each session bounds its own statements on the server
//! (`innodb_lock_wait_timeout`, and MariaDB's `max_statement_time` or
//! MySQL's `max_execution_time`); past the request timeout the driver
//! drops the connection and `KILL`s it from a second one, so its
//! statement stops and its transaction rolls back. A statement error
//! that is not contention (1205 lock wait timeout, 1213 deadlock, 1062 a
//! raced first insert) retires the session; the next statement connects
//! afresh after the shared backoff. A read-only server (`--read-only`, a
//! replica) therefore never holds a node off once the address points at
//! a writable one again.
//!
//! # Fenced writes
//!
//! A write that must not happen once the term is over is made conditional
//! on the lease with a [`Fence`]: its condition locks the lease row `LOCK
//! IN SHARE MODE` until the write's transaction ends, and a successor's
//! acquire waits for that lock, so a fenced write commits before the next
//! term or not at all. [`Fence::transaction`] (and
//! [`LeaderContext::fenced_transaction`],
//! [`MysqlLease::fenced_transaction`]) opens a [`FencedTransaction`] that
//! takes the lock first and is bounded by the leader's deadline, on the
//! client (its session killed at the deadline) and on the server
//! (`max_statement_time` or `max_execution_time`,
//! `innodb_lock_wait_timeout`, an idle bound). Unlike PostgreSQL's, this
//! node's own renewals wait for an open fenced transaction (InnoDB has no
//! `FOR KEY SHARE`): keep them short ([`Fence`] says what a long one costs).
//!
//! # Release wake-up
//!
//! MySQL has no `LISTEN`: a lone lease's leader holds a named user lock
//! while it leads and its followers wait on it from a second connection,
//! so a clean release wakes them at once (`wake.rs`, DESIGN §3; off with
//! the builder's `wake_up(false)`). It is only a wake-up: without it
//! followers poll, within one interval. A set has none yet: its
//! followers take released leases at their next poll.

mod admin;
mod bounds;
mod connect;
mod error;
mod fence;
mod galera;
mod handle;
mod link;
mod tls;
mod transaction;
mod version;
mod wake;

pub use crate::server::admin::{
    force_release, lease_row, release_after_failover, request_hand_over, status, withdraw_hand_over,
};
pub use admin::{init, run_statement};
pub use connect::MysqlConnector;
pub use error::MysqlError;
pub use fence::Fence;
pub use galera::{galera_commit_stall, EVICTION_OVERHEAD};
pub use handle::{Mysql, MysqlLease, MysqlLeaseBuilder, MysqlLeaseSet, MysqlLeaseSetBuilder};
pub use tls::{MysqlTls, SslMode};
pub use transaction::FencedTransaction;
pub use wake::wake_lock_name;

/// What a gated task is given when its term starts. Its whole API, as
/// rustdoc shows the methods on the generic type and on [`Term`] (which
/// it dereferences to) rather than here:
///
/// - the term: [`lease()`](crate::Term::lease),
///   [`holder()`](crate::Term::holder), [`epoch()`](crate::Term::epoch);
/// - its end: [`cancelled()`](crate::server::LeaderContext::cancelled)
///   (`.await` it first in a `select!`, `biased;`),
///   [`is_cancelled()`](crate::server::LeaderContext::is_cancelled),
///   [`time_left()`](crate::server::LeaderContext::time_left),
///   [`deadline()`](crate::server::LeaderContext::deadline),
///   [`token()`](crate::server::LeaderContext::token);
/// - its fence: [`fence()`](crate::server::LeaderContext::fence), the
///   [`Fence`] to put in your own writes;
/// - `fenced_transaction(conn)`: a transaction on your connection that
///   holds the term's row and is cut at the deadline.
///
/// [`Term`]: crate::Term
pub type LeaderContext = crate::server::LeaderContext<Fence>;
