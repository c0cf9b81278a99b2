//! The async driver on PostgreSQL (tokio-postgres).
//!
//! [`PgLease`] runs one contender for one lease as a tokio task that feeds
//! the core's [`LeaseState`](picolease_core::LeaseState) and carries out
//! its commands: it executes the lease statements (prepared once per
//! connection, abandoned and cancelled on the server when they outlive the
//! request timeout), publishes [`Leadership`](crate::Leadership) on a watch channel, runs the
//! gated tasks while this node leads, and `LISTEN`s for releases so a
//! follower takes over at once when the leader shuts down.
//!
//! ```
//! use std::time::Duration;
//! use picolease::postgres::{PgConnector, PgLease};
//! use picolease::{unique_holder_id, Config, LeaseName, TableName};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Connections are the application's choice; this one is a plain URL.
//!     let connector = PgConnector::new("postgres://postgres@127.0.0.1:5432/test")?;
//!     let config = Config::with_ttl(
//!         LeaseName::new("maintenance")?,
//!         unique_holder_id(),
//!         Duration::from_secs(2),
//!     );
//!     let lease = PgLease::builder(config, connector)
//!         .table(TableName::new("picolease_doc_example")?)
//!         // Runs only while this node leads; cancelled when it stops leading.
//!         .while_leader(|ctx| async move {
//!             let mut tick = tokio::time::interval(Duration::from_millis(100));
//!             loop {
//!                 tokio::select! {
//!                     // Cancellation first: after the term ends, no further pass.
//!                     biased;
//!                     _ = ctx.cancelled() => break,
//!                     _ = tick.tick() => { /* expire reservations at epoch ctx.epoch() */ }
//!                 }
//!             }
//!         })
//!         .start()?;
//!
//!     let mut leadership = lease.watch();
//!     let leading = leadership.wait_for(|l| l.is_leader()).await?.clone();
//!     println!("leading at epoch {:?}", leading.epoch);
//!
//!     // Stops the gated task, releases the lease, then returns.
//!     lease.shutdown().await?;
//!     Ok(())
//! }
//! ```
//!
//! # Connections
//!
//! The driver takes a [`Connect`]or: anything that returns a connected
//! `tokio_postgres::Client` (TLS, poolers and credentials stay with the
//! application). When the connection breaks, or a statement on it times
//! out, the driver drops it and connects again with capped, jittered
//! backoff, then competes again. Release notifications need a second,
//! dedicated connection whose messages the driver reads itself
//! ([`Connect::connect_listener`]); [`PgConnector`] provides it, a plain
//! closure cannot (followers then notice a release at their next poll,
//! within one interval). [`PgLeaseBuilder::notifications`] turns them off.
//!
//! # Fenced writes
//!
//! Leadership is an optimisation: a paused ex-leader may still act for a
//! moment. A write that must not happen then can be made conditional on the
//! lease with a [`Fence`]: the database rejects it once the term is over.
//! The fence locks the lease row `FOR KEY SHARE` until the write's
//! transaction ends, and a successor's acquire waits for that lock, so a
//! fenced write commits before the next term or not at all. A transaction
//! holding it delays the next term: [`Fence::transaction`] opens a
//! [`FencedTransaction`] bounded by the leader's deadline, on the client
//! (cancel at the deadline) and on the server (`statement_timeout`,
//! `idle_in_transaction_session_timeout`).
//!
//! # Sessions
//!
//! A statement error that is not clearly transient (anything but a lost
//! connection, 40001, 40P01 or 55P03) retires the statement session: the
//! next attempt connects afresh. A session stuck in a state of its own (a
//! read-only transaction after a failover, a prepared statement a pooler
//! lost) therefore cannot keep the node from ever leading again. Such
//! errors stay transient for the core ([`PgError::failure`]).
//!
//! # Shutdown
//!
//! [`PgLease::shutdown`] stops the gated tasks, waits for them, releases
//! the lease and returns. Dropping the handle does the same in the
//! background; dropping the runtime stops everything without a release
//! (the lease then lapses by its ttl, like a crash).
//!
//! After a release that freed a row, the driver keeps its connections open
//! for [`DEFAULT_LINGER`] more (see [`PgLeaseBuilder::linger`]) before
//! closing them. A backend's exit is work for the server (the listening
//! one leaves the notification queue under its lock); done at once, it
//! runs exactly when the successor's acquire does and, on this project's
//! 2-core machine, doubled a clean handover (3.5–3.9 ms p50 against 1.2–1.4
//! ms with the linger, `picolease bench`).

mod admin;
mod cells;
mod connect;
mod error;
mod fence;
#[cfg(feature = "sqlx")]
mod fence_sqlx;
mod handle;
mod link;
mod notify;
mod own_params;
mod pooler;
mod server_change;
mod statement;
mod task;
mod tls;
mod tls_connect;
mod tls_verify;
mod transaction;

pub use crate::server::admin::{
    force_release, lease_row, release_after_failover, request_hand_over, status, withdraw_hand_over,
};
pub use admin::init;
pub use connect::{BoxFuture, Connect, Listener, PgConnector};
pub use error::PgError;
pub use fence::Fence;
pub use pooler::{Pooler, NOTIFY_URL_PARAM, POOLER_PARAM};

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
///   [`Fence`] to put in your own writes (with the feature `sqlx`,
///   `ctx.fence().begin_sqlx(&pool, ctx.time_left())` opens a fenced
///   transaction on your own sqlx pool);
/// - `fenced_transaction(&client)`: a transaction on your client that
///   holds the term's row and is cut at the deadline.
///
/// [`Term`]: crate::Term
pub type LeaderContext = crate::server::LeaderContext<Fence>;
pub use handle::{PgLease, PgLeaseBuilder, PgLeaseSet, PgLeaseSetBuilder, Postgres};
pub use tls::{PgTls, RootCerts, SslMode};
pub use tls_connect::{PgTlsConnect, PgTlsConnector, PgTlsStream};
pub use transaction::FencedTransaction;

/// How long a driver keeps its connections open after releasing, so that
/// closing them does not compete with the successor's acquire on the
/// server: a NOTIFY delivery plus one commit, with room for a busy host.
pub const DEFAULT_LINGER: std::time::Duration = std::time::Duration::from_millis(20);
