//! The handle of a running PostgreSQL contender, and its builder.

use std::future::Future;
use std::sync::{Arc, Mutex};

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{Config, LeaseState};
use tokio::sync::mpsc;

use super::connect::Connect;
use super::driver::{run, Control, LastError, Task};
use super::error::PgError;
use super::fence::Fence;
use super::gate::{gated_task, Gate, GatedTask, LeaderContext};
use super::link::Link;
use super::notify;
use super::options::{pg_option_methods, pg_work_methods, PgOptions};
use super::transaction::FencedTransaction;
use crate::clock::SharedClock;
use crate::publish::Publisher;
use crate::set::SetRunner;
use crate::subscription::Subscription;
use crate::view::LeaseView;

/// Configures a [`PgLease`] before it starts. Made by [`PgLease::builder`].
pub struct PgLeaseBuilder {
    config: Config,
    connector: Arc<dyn Connect>,
    options: PgOptions,
    tasks: Vec<GatedTask>,
    clock: SharedClock,
    publisher: Arc<Publisher>,
}

impl std::fmt::Debug for PgLeaseBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeaseBuilder")
            .field("config", &self.config)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl PgLeaseBuilder {
    pg_option_methods!();
    pg_work_methods!();

    /// Every leadership change from the start on, in order.
    pub fn subscribe(&self) -> Subscription {
        self.publisher.subscribe()
    }

    /// Validates the configuration and starts the driver task on the
    /// current tokio runtime (panics outside one, like `tokio::spawn`).
    pub fn start(self) -> Result<PgLease, PgError> {
        self.publisher.set_clock(Arc::clone(&self.clock));
        let lease = LeaseState::new(self.config.clone(), picolease_core::Instant::ZERO)?;
        let statements = Arc::new(Statements::new(Dialect::Postgres, &self.options.table));
        let lease_name: Arc<str> = self.config.lease.as_str().into();
        let (control_tx, inbox) = mpsc::unbounded_channel();
        let last_error: LastError = Arc::new(Mutex::new(None));

        let (listener, notices) = if self.options.notifications {
            let (tx, rx) = mpsc::channel(1);
            let listener = notify::spawn_listener(
                self.connector.clone(),
                &statements,
                notify::Interest::Lease(lease_name.clone()),
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
            self.options.auto_create,
            super::backoff::backoff_cap(&self.config),
        ));
        let gate = Gate::new(
            self.tasks,
            Arc::clone(&statements),
            self.config.lease.clone(),
            self.config.holder.clone(),
            Arc::clone(&self.publisher),
        );
        let task = tokio::spawn(run(Task {
            runner: SetRunner::lone(lease, Arc::clone(&self.publisher), gate),
            link,
            notices,
            listener,
            inbox,
            linger: self.options.linger,
            last_error: Arc::clone(&last_error),
        }));
        Ok(PgLease {
            view: LeaseView::new(self.config, self.publisher),
            statements,
            control: control_tx,
            task: Some(task),
            last_error,
        })
    }
}

/// One contender for one lease on PostgreSQL: the handle of the driver
/// task. Made with [`PgLease::builder`].
///
/// Dropping it shuts the driver down in the background (gated work
/// stopped, lease released); call [`PgLease::shutdown`] to wait for that.
///
/// It dereferences to a [`LeaseView`] (the same for both drivers):
/// `config()`, `lease()`, `holder()`, `leadership()`, `watch()`,
/// `subscribe()`, `renew_latencies()`.
pub struct PgLease {
    view: LeaseView,
    statements: Arc<Statements>,
    control: mpsc::UnboundedSender<Control>,
    task: Option<tokio::task::JoinHandle<Result<(), PgError>>>,
    last_error: LastError,
}

impl std::ops::Deref for PgLease {
    type Target = LeaseView;
    fn deref(&self) -> &LeaseView {
        &self.view
    }
}

impl std::fmt::Debug for PgLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PgLease").field(&self.view).finish()
    }
}

impl PgLease {
    /// A contender for `config` (lease, holder id, timings) whose
    /// connections come from `connector`: a [`super::PgConnector`], or any
    /// async closure that returns a connected `tokio_postgres::Client`.
    pub fn builder(config: Config, connector: impl Connect) -> PgLeaseBuilder {
        let publisher = Arc::new(Publisher::new(crate::clock::system(), config.lease.clone()));
        PgLeaseBuilder {
            publisher,
            config,
            connector: Arc::new(connector),
            options: PgOptions::default(),
            tasks: Vec::new(),
            clock: crate::clock::system(),
        }
    }

    /// Registers more work to run while this node leads, like
    /// [`PgLeaseBuilder::while_leader`]; if this node leads now, it starts
    /// at once in the current term.
    pub fn while_leader<F, Fut>(&self, task: F)
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let _ = self.control.send(Control::AddWork(gated_task(task)));
    }

    /// The fence of the current term, if this node leads.
    pub fn fence(&self) -> Option<Fence> {
        let epoch = self.leadership().leader_epoch()?;
        Some(Fence::new(
            &self.statements,
            self.lease(),
            self.holder(),
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

    /// True once the driver task has stopped (after shutdown, abort, or a
    /// fatal error).
    pub fn is_finished(&self) -> bool {
        self.view.publisher().is_finished() || self.task.as_ref().is_none_or(|t| t.is_finished())
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
    /// returns that error. Does not give up the handle, so it can race a
    /// signal in `select!` and the handle still be shut down after:
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

/// A fenced transaction of the current term (its type and guarantees are
/// in `transaction.rs`).
impl PgLease {
    /// Opens a fenced transaction of the current term on `client`, bounded
    /// by the leader's deadline as it stands now ([`PgLease::fence`],
    /// [`crate::LeaseView::time_left`]); see [`Fence::transaction`]. Refused
    /// ([`PgError::Fenced`]) when this node does not lead.
    pub async fn fenced_transaction<'c>(
        &self,
        client: &'c mut tokio_postgres::Client,
    ) -> Result<FencedTransaction<'c>, PgError> {
        match (self.fence(), self.time_left()) {
            (Some(fence), Some(left)) => {
                fence
                    .transaction(client, tokio::time::Instant::now() + left)
                    .await
            }
            _ => Err(PgError::Fenced {
                lease: self.lease().to_string(),
                epoch: self.leadership().epoch.map_or(0, |e| e.get()),
                reason: "this node does not lead".to_string(),
            }),
        }
    }
}
