//! The handle of a running PostgreSQL contender, and its builder.

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{Config, LeaseState};

use super::connect::Connect;
use super::error::PgError;
use super::fence::Fence;
use super::notify::Interest;
use super::options::{pg_option_methods, PgOptions};
use super::task::{start, PgTask};
use super::transaction::FencedTransaction;
use super::LeaderContext;
use crate::publish::Publisher;
use crate::server::builder::{builder_debug, work_methods};
use crate::server::gate::Gate;
use crate::server::task::task_methods;
use crate::set::SetRunner;
use crate::subscription::Subscription;
use crate::view::LeaseView;

/// Configures a [`PgLease`] before it starts. Made by [`PgLease::builder`].
pub struct PgLeaseBuilder {
    config: Config,
    connector: Arc<dyn Connect>,
    options: PgOptions,
    publisher: Arc<Publisher>,
}

builder_debug!(PgLeaseBuilder {
    "config" => |b| b.config,
    "options" => |b| b.options,
});

impl PgLeaseBuilder {
    pg_option_methods!();
    work_methods!();

    /// Every leadership change from the start on, in order.
    pub fn subscribe(&self) -> Subscription {
        self.publisher.subscribe()
    }

    /// Validates the configuration and starts the driver task on the
    /// current tokio runtime (panics outside one, like `tokio::spawn`).
    pub fn start(mut self) -> Result<PgLease, PgError> {
        self.publisher.set_clock(Arc::clone(&self.options.clock));
        let lease = LeaseState::new(self.config.clone(), picolease_core::Instant::ZERO)?;
        let statements = Arc::new(Statements::new(Dialect::Postgres, &self.options.table));
        let gate = Gate::new(
            std::mem::take(&mut self.options.tasks),
            Arc::clone(&statements),
            self.config.lease.clone(),
            self.config.holder.clone(),
            Arc::clone(&self.publisher),
        );
        let runner = SetRunner::lone(lease, Arc::clone(&self.publisher), gate);
        // A lone lease hears only of its own row's release.
        let interest = Interest::Lease(self.config.lease.as_str().into());
        let task = start(
            runner,
            self.connector,
            &statements,
            &self.options,
            (interest, 1),
        );
        Ok(PgLease {
            view: LeaseView::new(self.config, self.publisher),
            statements,
            task,
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
    task: PgTask,
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
    task_methods!(PgError);

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
        }
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

    /// True once the driver task has stopped (after shutdown, abort, or a
    /// fatal error).
    pub fn is_finished(&self) -> bool {
        self.view.publisher().is_finished() || self.task.is_finished()
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
