//! The async driver on PostgreSQL (tokio-postgres).
//!
//! [`PgLease`] runs one contender for one lease as a tokio task that feeds
//! the core's [`LeaseState`](picolease_core::LeaseState) and carries out
//! its commands: it executes the lease statements (prepared once per
//! connection, abandoned and cancelled on the server when they outlive the
//! request timeout), publishes [`Leadership`] on a watch channel, runs the
//! gated tasks while this node leads, and `LISTEN`s for releases so a
//! follower takes over at once when the leader shuts down.
//!
//! ```
//! use std::time::Duration;
//! use picolease::postgres::{unique_holder_id, PgConnector, PgLease};
//! use picolease::{Config, LeaseName, TableName};
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
//!         .run_while_leader(|ctx| async move {
//!             let mut tick = tokio::time::interval(Duration::from_millis(100));
//!             loop {
//!                 tokio::select! {
//!                     _ = ctx.cancelled() => break,
//!                     _ = tick.tick() => { /* expire reservations at epoch ctx.epoch() */ }
//!                 }
//!             }
//!         })
//!         .spawn()?;
//!
//!     let mut leadership = lease.leadership();
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
//!
//! # Shutdown
//!
//! [`PgLease::shutdown`] stops the gated tasks, waits for them, releases
//! the lease and returns. Dropping the handle does the same in the
//! background; dropping the runtime stops everything without a release
//! (the lease then lapses by its ttl, like a crash).

mod admin;
mod cells;
mod connect;
mod driver;
mod error;
mod fence;
mod gate;
mod link;
mod notify;

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{Config, HolderId, Leadership, LeaseState, TableName};
use tokio::sync::{mpsc, watch};

pub use admin::{force_release, init, status};
pub use connect::{BoxFuture, Connect, Listener, PgConnector};
pub use error::PgError;
pub use fence::Fence;
pub use gate::LeaderContext;

pub use driver::Transition;

use driver::{Control, Driver, LastError, Latencies, Subscribers};
use gate::{gated_task, Gate, GatedTask};
use link::Link;

/// A holder id unique to this running instance: host name, process id and
/// a random suffix (DESIGN §3: two live processes must never share one).
pub fn unique_holder_id() -> HolderId {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let nonce = RandomState::new().build_hasher().finish();
    HolderId::unique(host.trim(), std::process::id(), nonce)
}

/// Configures a [`PgLease`] before it starts. Made by [`PgLease::builder`].
pub struct PgLeaseBuilder {
    config: Config,
    connector: Arc<dyn Connect>,
    table: TableName,
    auto_create: bool,
    notifications: bool,
    tasks: Vec<GatedTask>,
}

impl PgLeaseBuilder {
    /// The lease table (default [`picolease_core::DEFAULT_TABLE`]).
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// Create the table if it is missing, on first connect (default on).
    /// Off, a missing table finishes the driver with
    /// [`PgError::MissingTable`]; create it with [`init`].
    pub fn auto_create(mut self, on: bool) -> Self {
        self.auto_create = on;
        self
    }

    /// Listen for release notifications (default on, when the connector
    /// can provide a listening connection). Off, a follower notices a
    /// release at its next poll, within one interval.
    pub fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// Runs `task` whenever this node becomes leader; see
    /// [`PgLease::run_while_leader`]. Several tasks may be registered.
    pub fn run_while_leader<F, Fut>(mut self, task: F) -> Self
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.tasks.push(gated_task(task));
        self
    }

    /// Validates the configuration and starts the driver task on the
    /// current tokio runtime (panics outside one, like `tokio::spawn`).
    pub fn spawn(self) -> Result<PgLease, PgError> {
        let origin = tokio::time::Instant::now();
        let lease = LeaseState::new(self.config.clone(), picolease_core::Instant::ZERO)?;
        let statements = Arc::new(Statements::new(Dialect::Postgres, &self.table));
        let lease_name: Arc<str> = self.config.lease.as_str().into();
        let holder: Arc<str> = self.config.holder.as_str().into();
        let (leadership, watcher) = watch::channel(Leadership::unknown());
        let (control_tx, control) = mpsc::unbounded_channel();
        let last_error: LastError = Arc::new(Mutex::new(None));
        let subscribers: Subscribers = Arc::new(Mutex::new(Vec::new()));
        let renew_latencies: Latencies = Arc::default();

        let (listener, notices) = if self.notifications {
            let (tx, rx) = mpsc::channel(1);
            let listener = notify::spawn_listener(
                self.connector.clone(),
                self.table.release_channel(),
                lease_name.clone(),
                tx,
            );
            let notices = listener.is_some().then_some(rx);
            (listener, notices)
        } else {
            (None, None)
        };

        let link = Arc::new(Link::new(
            self.connector,
            statements.clone(),
            self.auto_create,
            self.config.interval.max(Duration::from_millis(100)),
        ));
        let driver = Driver {
            lease,
            origin,
            statements: statements.clone(),
            link,
            gate: Gate::new(
                self.tasks,
                statements.clone(),
                lease_name.clone(),
                holder.clone(),
            ),
            lease_name: lease_name.clone(),
            holder: holder.clone(),
            leadership,
            notices,
            control,
            last_error: last_error.clone(),
            subscribers: subscribers.clone(),
            renew_latencies: renew_latencies.clone(),
            listener,
        };
        let task = tokio::spawn(driver.run());
        Ok(PgLease {
            config: self.config,
            statements,
            leadership: watcher,
            control: control_tx,
            task: Some(task),
            last_error,
            subscribers,
            renew_latencies,
        })
    }
}

/// One contender for one lease on PostgreSQL: the handle of the driver
/// task. Made with [`PgLease::builder`].
///
/// Dropping it shuts the driver down in the background (gated work
/// stopped, lease released); call [`PgLease::shutdown`] to wait for that.
pub struct PgLease {
    config: Config,
    statements: Arc<Statements>,
    leadership: watch::Receiver<Leadership>,
    control: mpsc::UnboundedSender<Control>,
    task: Option<tokio::task::JoinHandle<Result<(), PgError>>>,
    last_error: LastError,
    subscribers: Subscribers,
    renew_latencies: Latencies,
}

impl std::fmt::Debug for PgLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLease")
            .field("lease", &self.config.lease)
            .field("holder", &self.config.holder)
            .field("leadership", &*self.leadership.borrow())
            .finish_non_exhaustive()
    }
}

impl PgLease {
    /// A driver for `config` (lease, holder id, timings) whose connections
    /// come from `connector`: a [`PgConnector`], or any async closure that
    /// returns a connected `tokio_postgres::Client`.
    pub fn builder(config: Config, connector: impl Connect) -> PgLeaseBuilder {
        PgLeaseBuilder {
            config,
            connector: Arc::new(connector),
            table: TableName::default(),
            auto_create: true,
            notifications: true,
            tasks: Vec::new(),
        }
    }

    /// The leadership state, updated on every change: role, epoch, holder
    /// in view and, on demotion, the reason.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// Every leadership change from now on, in order, time-stamped (the
    /// watch channel may skip an intermediate state; this never does).
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Transition> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        rx
    }

    /// This contender's configuration (its lease name and holder id).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The fence of the current term, if this node leads.
    pub fn fence(&self) -> Option<Fence> {
        let epoch = self.leadership.borrow().leader_epoch()?;
        Some(Fence::new(
            self.statements.clone(),
            self.config.lease.as_str(),
            self.config.holder.as_str(),
            epoch,
        ))
    }

    /// The most recent error met (a failed connect, a timed-out statement,
    /// …), cleared by the next successful statement. Transient errors are
    /// retried; they show here and in the `tracing` logs.
    pub fn last_error(&self) -> Option<PgError> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The latencies of the most recent successful renewals (up to 1024),
    /// oldest first: from the driver issuing the statement to the driver
    /// receiving its reply.
    pub fn renew_latencies(&self) -> Vec<Duration> {
        let samples = self
            .renew_latencies
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        samples.iter().copied().collect()
    }

    /// Runs `task` whenever this node becomes leader, with the term's
    /// [`LeaderContext`] (epoch, cancellation token, fence). The task is
    /// cancelled through the token when the term ends and must then return;
    /// a new term's tasks start only after the previous term's have
    /// returned, and on shutdown the lease is released only after they have.
    /// If this node leads now, the task starts at once.
    pub fn run_while_leader<F, Fut>(&self, task: F)
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let _ = self.control.send(Control::AddTask(gated_task(task)));
    }

    /// Stops the gated tasks and waits for them, releases the lease if held
    /// (notifying the other contenders), and returns when all of that is
    /// done. Returns the fatal error that had stopped the driver, if any.
    ///
    /// A gated task that ignores its cancellation keeps this waiting (the
    /// release itself is abandoned after the request timeout, and the lease
    /// then lapses by its ttl).
    pub async fn shutdown(mut self) -> Result<(), PgError> {
        let _ = self.control.send(Control::Shutdown);
        self.join().await
    }

    /// Waits until the driver stops by itself, which it does only on a
    /// fatal error (a missing or malformed table, refused credentials):
    /// returns that error.
    pub async fn wait(mut self) -> Result<(), PgError> {
        self.join().await
    }

    /// Like [`PgLease::wait`] without giving up the handle, so it can race
    /// a signal in `select!` and the handle still be shut down after:
    ///
    /// ```no_run
    /// # async fn demo(mut lease: picolease::postgres::PgLease) -> Result<(), picolease::postgres::PgError> {
    /// tokio::select! {
    ///     result = lease.stopped() => result?,
    ///     _ = tokio::signal::ctrl_c() => {}
    /// }
    /// lease.shutdown().await
    /// # }
    /// ```
    ///
    /// Cancel-safe. Once it has returned, later calls (and `shutdown`)
    /// return `Ok(())` at once: the outcome is reported only once.
    pub async fn stopped(&mut self) -> Result<(), PgError> {
        self.join().await
    }

    /// Stops the driver at once, without stopping gracefully or releasing:
    /// what a crash looks like to the other contenders (the lease lapses by
    /// its ttl). Gated tasks are cancelled but not waited for.
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    async fn join(&mut self) -> Result<(), PgError> {
        let Some(task) = self.task.as_mut() else {
            return Ok(());
        };
        let outcome = task.await;
        self.task = None;
        match outcome {
            Ok(result) => result,
            Err(e) => Err(PgError::Stopped {
                reason: e.to_string(),
            }),
        }
    }
}
