//! A lease set on PostgreSQL (DESIGN §9): one tokio task, one statement
//! connection and one `LISTEN` connection, whatever the number of leases.
//!
//! The task owns a [`LeaseSet`] through the shared `SetRunner` (which
//! publishes each lease's transitions and runs each lease's work as tasks
//! behind a lone lease's gate, with a lone lease's `LeaderContext`). Each batch the
//! set asks for runs on the statement connection with the prepared
//! statement of its kind, bounded by the request timeout; while no batch is
//! due, the task waits for the set's next timeout, a control message from
//! the handle, or a release notification (a lease or membership row freed
//! by another node's `release_batch`).
//!
//! # Connections
//!
//! They are a lone lease's: the statement connection is the same `Link`
//! (`link.rs`) and the listener the same task (`notify.rs`), so both come
//! from the application's [`Connect`]or (a [`super::PgConnector`] names
//! them `application_name = 'picolease'` unless the URL names them) and
//! share one backoff and one set of rules. A statement that fails for a reason that is not clearly
//! transient, or that the set gives up on (it is then cancelled on the
//! server), drops the statement connection; the next batch connects
//! afresh, after a jittered backoff that doubles per consecutive failure
//! and never exceeds the interval (at least 100 ms). The listening
//! connection is re-established 500 ms after it breaks; the set then
//! surveys at once, since notifications sent meanwhile were lost.

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{LeaseName, LeaseSet, SetConfig};

use super::connect::Connect;
use super::error::PgError;
use super::fence::Fence;
use super::notify::Interest;
use super::options::{pg_option_methods, PgOptions};
use super::task::{start, PgTask};
use super::transaction::FencedTransaction;
use super::LeaderContext;
use crate::server::builder::{builder_debug, work_methods};
use crate::server::driver::Control;
use crate::server::gate::Gate;
use crate::server::task::task_methods;
use crate::set::{SetRunner, SetView};
use crate::subscription::{Fanout, Subscription};

/// How many release notices may wait for the set's task before the
/// listener waits for it (a node giving up its surplus frees hundreds of
/// rows in one commit; none is dropped).
const NOTICE_BACKLOG: usize = 4096;

/// Builds a [`PgLeaseSet`]: `PgLeaseSet::builder(template, leases,
/// connector)`, options, optional work, then `start()`.
pub struct PgLeaseSetBuilder {
    template: SetConfig,
    leases: Vec<LeaseName>,
    connector: Arc<dyn Connect>,
    options: PgOptions,
    fanout: Arc<Fanout>,
}

builder_debug!(PgLeaseSetBuilder {
    "template" => |b| b.template,
    "leases" => |b| b.leases.len(),
    "options" => |b| b.options,
});

impl PgLeaseSetBuilder {
    pg_option_methods!();
    work_methods!();

    /// Every lease's leadership changes from the start on, in order
    /// ([`SetView::subscribe`]).
    pub fn subscribe(&self) -> Subscription {
        self.fanout.subscribe()
    }

    /// `lease`'s leadership changes from the start on, in order, as a lone
    /// lease's builder's `subscribe()`; `None` for a lease outside the set.
    pub fn subscribe_to(&self, lease: &LeaseName) -> Option<Subscription> {
        self.leases
            .contains(lease)
            .then(|| self.fanout.subscribe_to(Some(lease.clone())))
    }

    /// Validates the set and spawns its task on the current tokio runtime
    /// (panics outside one, like `tokio::spawn`). Connecting happens in
    /// the task: connection failures are retried, and a fatal one (bad
    /// login, missing table) finishes the set and is returned by
    /// [`PgLeaseSet::shutdown`].
    pub fn start(self) -> Result<PgLeaseSet, PgError> {
        let PgLeaseSetBuilder {
            template,
            leases,
            connector,
            options,
            fanout,
        } = self;
        let set = LeaseSet::new(template.clone(), leases, picolease_core::Instant::ZERO)?;
        let statements = Arc::new(Statements::new(Dialect::Postgres, &options.table));
        let holder = template.holder.clone();
        let clock = Arc::clone(&options.clock);
        let (runner, outputs) = SetRunner::new(set, clock, fanout, |lease, publisher| {
            Gate::new(
                options.tasks.clone(),
                Arc::clone(&statements),
                lease.clone(),
                holder.clone(),
                Arc::clone(publisher),
            )
        });
        // The lone lease's task, link and listener: one adapter per
        // database. A set hears of every row's release.
        let task = start(
            runner,
            connector,
            &statements,
            &options,
            (Interest::Every, NOTICE_BACKLOG),
        );
        Ok(PgLeaseSet {
            statements,
            task,
            outputs,
        })
    }
}

/// One node contending for a set of leases on PostgreSQL, with a fair
/// share between the live nodes. Made with [`PgLeaseSet::builder`].
///
/// It runs as one tokio task with one statement connection and one
/// `LISTEN` connection. Each lease's work runs as tasks of its own.
/// Dropping the handle asks for a shutdown (releasing every lease) and
/// returns at once; the task finishes in the background.
pub struct PgLeaseSet {
    statements: Arc<Statements>,
    task: PgTask,
    outputs: SetView,
}

impl std::fmt::Debug for PgLeaseSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeaseSet")
            .field("snapshot", &self.snapshot())
            .finish_non_exhaustive()
    }
}

impl PgLeaseSet {
    task_methods!(PgError);

    /// A set of `leases` contended with the timings and holder id of
    /// `template` over connections from
    /// `connector`.
    pub fn builder(
        template: SetConfig,
        leases: Vec<LeaseName>,
        connector: impl Connect,
    ) -> PgLeaseSetBuilder {
        PgLeaseSetBuilder {
            connector: Arc::new(connector),
            options: PgOptions::default(),
            fanout: Arc::new(Fanout::for_leases(leases.len())),
            template,
            leases,
        }
    }

    /// The fence of `lease`'s current term, if this node leads it (as a
    /// lone lease's [`super::PgLease::fence`]).
    pub fn fence(&self, lease: &LeaseName) -> Option<Fence> {
        let epoch = self.leadership(lease)?.leader_epoch()?;
        Some(Fence::new(&self.statements, lease, self.holder(), epoch))
    }

    /// Opens a fenced transaction of `lease`'s current term on `client`,
    /// bounded by its deadline as it stands now, as a lone lease's
    /// [`super::PgLease::fenced_transaction`] (see [`Fence::transaction`]).
    /// Refused ([`PgError::Fenced`]) when this node does not lead `lease`.
    pub async fn fenced_transaction<'c>(
        &self,
        lease: &LeaseName,
        client: &'c mut tokio_postgres::Client,
    ) -> Result<FencedTransaction<'c>, PgError> {
        match (self.fence(lease), self.time_left(lease)) {
            (Some(fence), Some(left)) => {
                fence
                    .transaction(client, tokio::time::Instant::now() + left)
                    .await
            }
            _ => Err(PgError::Fenced {
                lease: lease.to_string(),
                epoch: self
                    .leadership(lease)
                    .and_then(|l| l.epoch)
                    .map_or(0, |e| e.get()),
                reason: "this node does not lead it".to_string(),
            }),
        }
    }

    /// Gives `lease` up (its work stops, then it is released); this node
    /// keeps contending, and does not take it back for a ttl.
    pub fn give_up(&self, lease: &LeaseName) {
        self.task.send(Control::GiveUp(lease.clone()));
    }

    /// True once the set's task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// What the set publishes, per lease and as a whole: [`SetView`].
impl std::ops::Deref for PgLeaseSet {
    type Target = SetView;
    fn deref(&self) -> &SetView {
        &self.outputs
    }
}
