//! The handles of a running MySQL contender (a lone lease) and of a
//! lease set, and their builders: the shared server task
//! (`crate::server`) with MySQL's link and fence.

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{Config, LeaseName, LeaseSet, LeaseState, SetConfig};

use super::connect::MysqlConnector;
use super::error::MysqlError;
use super::fence::Fence;
use super::link::Link;
use super::options::{mysql_option_methods, MysqlOptions};
use super::LeaderContext;
use crate::publish::Publisher;
use crate::server::backoff::backoff_cap;
use crate::server::builder::{builder_debug, work_methods};
use crate::server::driver::{Control, Runner};
use crate::server::gate::Gate;
use crate::server::task::{task_methods, DriverTask};
use crate::set::{SetRunner, SetView};
use crate::subscription::{Fanout, Subscription};
use crate::view::LeaseView;

/// A MySQL driver's task, as its handle holds it.
type MysqlTask = DriverTask<Link, Fence>;

/// Spawns `runner`'s task with its statement connection. MySQL has no
/// release notices (yet): followers notice a release at their next poll.
fn start(
    runner: Runner<Fence>,
    connector: MysqlConnector,
    statements: &Arc<Statements>,
    options: &MysqlOptions,
) -> MysqlTask {
    let link = Arc::new(Link::new(
        connector,
        Arc::clone(statements),
        options.auto_create,
        backoff_cap(&runner.engine.config()),
    ));
    DriverTask::start(runner, link, None, std::time::Duration::ZERO)
}

/// Configures a [`MysqlLease`] before it starts. Made by
/// [`MysqlLease::builder`].
pub struct MysqlLeaseBuilder {
    config: Config,
    connector: MysqlConnector,
    options: MysqlOptions,
    publisher: Arc<Publisher>,
}

builder_debug!(MysqlLeaseBuilder {
    "config" => |b| b.config,
    "options" => |b| b.options,
});

impl MysqlLeaseBuilder {
    mysql_option_methods!();
    work_methods!();

    /// Every leadership change from the start on, in order.
    pub fn subscribe(&self) -> Subscription {
        self.publisher.subscribe()
    }

    /// Validates the configuration and starts the driver task on the
    /// current tokio runtime (panics outside one, like `tokio::spawn`).
    pub fn start(mut self) -> Result<MysqlLease, MysqlError> {
        self.publisher.set_clock(Arc::clone(&self.options.clock));
        let lease = LeaseState::new(self.config.clone(), picolease_core::Instant::ZERO)?;
        let statements = Arc::new(Statements::new(Dialect::Mysql, &self.options.table));
        let gate = Gate::new(
            std::mem::take(&mut self.options.tasks),
            Arc::clone(&statements),
            self.config.lease.clone(),
            self.config.holder.clone(),
            Arc::clone(&self.publisher),
        );
        let runner = SetRunner::lone(lease, Arc::clone(&self.publisher), gate);
        let task = start(runner, self.connector, &statements, &self.options);
        Ok(MysqlLease {
            view: LeaseView::new(self.config, self.publisher),
            statements,
            task,
        })
    }
}

/// One contender for one lease on MySQL or MariaDB: the handle of the
/// driver task. Made with [`MysqlLease::builder`]. It dereferences to a
/// [`LeaseView`], as the other drivers' handles do.
///
/// Dropping it shuts the driver down in the background (gated work
/// stopped, lease released); call [`MysqlLease::shutdown`] to wait.
pub struct MysqlLease {
    view: LeaseView,
    statements: Arc<Statements>,
    task: MysqlTask,
}

impl std::ops::Deref for MysqlLease {
    type Target = LeaseView;
    fn deref(&self) -> &LeaseView {
        &self.view
    }
}

impl std::fmt::Debug for MysqlLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MysqlLease").field(&self.view).finish()
    }
}

impl MysqlLease {
    task_methods!(MysqlError);

    /// A contender for `config` (lease, holder id, timings) connecting
    /// through `connector`.
    pub fn builder(config: Config, connector: MysqlConnector) -> MysqlLeaseBuilder {
        let publisher = Arc::new(Publisher::new(crate::clock::system(), config.lease.clone()));
        MysqlLeaseBuilder {
            publisher,
            config,
            connector,
            options: MysqlOptions::default(),
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

/// Builds a [`MysqlLeaseSet`]: `MysqlLeaseSet::builder(template, leases,
/// connector)`, options, optional work, then `start()`.
pub struct MysqlLeaseSetBuilder {
    template: SetConfig,
    leases: Vec<LeaseName>,
    connector: MysqlConnector,
    options: MysqlOptions,
    fanout: Arc<Fanout>,
}

builder_debug!(MysqlLeaseSetBuilder {
    "template" => |b| b.template,
    "leases" => |b| b.leases.len(),
    "options" => |b| b.options,
});

impl MysqlLeaseSetBuilder {
    mysql_option_methods!();
    work_methods!();

    /// Every lease's leadership changes from the start on, in order.
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
    /// (panics outside one, like `tokio::spawn`).
    pub fn start(self) -> Result<MysqlLeaseSet, MysqlError> {
        let MysqlLeaseSetBuilder {
            template,
            leases,
            connector,
            options,
            fanout,
        } = self;
        let set = LeaseSet::new(template.clone(), leases, picolease_core::Instant::ZERO)?;
        let statements = Arc::new(Statements::new(Dialect::Mysql, &options.table));
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
        let task = start(runner, connector, &statements, &options);
        Ok(MysqlLeaseSet {
            statements,
            task,
            outputs,
        })
    }
}

/// One node contending for a set of leases on MySQL, with a fair share
/// between the live nodes (DESIGN §9): one task, one statement
/// connection, the four batch statements. Made with
/// [`MysqlLeaseSet::builder`]; dereferences to a [`SetView`].
pub struct MysqlLeaseSet {
    statements: Arc<Statements>,
    task: MysqlTask,
    outputs: SetView,
}

impl std::fmt::Debug for MysqlLeaseSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlLeaseSet")
            .field("snapshot", &self.snapshot())
            .finish_non_exhaustive()
    }
}

impl MysqlLeaseSet {
    task_methods!(MysqlError);

    /// A set of `leases` contended with the timings and holder id of
    /// `template` through `connector`.
    pub fn builder(
        template: SetConfig,
        leases: Vec<LeaseName>,
        connector: MysqlConnector,
    ) -> MysqlLeaseSetBuilder {
        MysqlLeaseSetBuilder {
            connector,
            options: MysqlOptions::default(),
            fanout: Arc::new(Fanout::for_leases(leases.len())),
            template,
            leases,
        }
    }

    /// The fence of `lease`'s current term, if this node leads it.
    pub fn fence(&self, lease: &LeaseName) -> Option<Fence> {
        let epoch = self.leadership(lease)?.leader_epoch()?;
        Some(Fence::new(&self.statements, lease, self.holder(), epoch))
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
impl std::ops::Deref for MysqlLeaseSet {
    type Target = SetView;
    fn deref(&self) -> &SetView {
        &self.outputs
    }
}
