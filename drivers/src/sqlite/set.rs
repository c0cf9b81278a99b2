//! A lease set on SQLite (DESIGN §9): one thread, one connection, one
//! statement at a time, whatever the number of leases.

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{LeaseName, LeaseSet, SetConfig};

use super::error::Error;
use super::fence::Fence;
use super::gate::{Gate, LeaderContext};
use super::open::Database;
use super::options::{sqlite_option_methods, SqliteOptions};
use super::thread::{sqlite_handle_methods, DriverThread};
use super::worker::Control;
use crate::set::{SetRunner, SetView};
use crate::subscription::{Fanout, Subscription};

/// Builds a [`SqliteLeaseSet`]: `SqliteLeaseSet::builder(template, leases,
/// database)`, optional work, then `start()`.
pub struct SqliteLeaseSetBuilder {
    template: SetConfig,
    leases: Vec<LeaseName>,
    database: Database,
    options: SqliteOptions,
    fanout: Arc<Fanout>,
}

impl SqliteLeaseSetBuilder {
    sqlite_option_methods!();

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

    /// Validates the set, opens the database (creating the file and table
    /// if allowed) and starts the set's thread.
    pub fn start(self) -> Result<SqliteLeaseSet, Error> {
        let SqliteLeaseSetBuilder {
            template,
            leases,
            mut database,
            options,
            fanout,
        } = self;
        let set = LeaseSet::new(template.clone(), leases, picolease_core::Instant::ZERO)?;
        let statements = Arc::new(Statements::new(Dialect::Sqlite, &database.table));
        let holder = template.holder.clone();
        let clock = Arc::clone(&options.clock);
        let (runner, outputs) = SetRunner::new(set, clock, fanout, |lease, publisher| {
            let mut gate = Gate::new(
                Arc::clone(publisher),
                Arc::clone(&statements),
                lease.clone(),
                holder.clone(),
            );
            options.add_works_to(&mut gate);
            gate
        });
        let thread = DriverThread::start(
            "picolease-set".into(),
            "lease set".into(),
            &mut database,
            options.notices,
            runner,
        )?;
        Ok(SqliteLeaseSet {
            statements,
            thread,
            outputs,
        })
    }
}

/// One node contending for a set of leases on SQLite, with a fair share
/// between the live nodes. Made with [`SqliteLeaseSet::builder`].
///
/// Dropping the handle asks for a shutdown and waits for it at most a ttl.
pub struct SqliteLeaseSet {
    statements: Arc<Statements>,
    thread: DriverThread,
    outputs: SetView,
}

impl SqliteLeaseSet {
    /// A set of `leases` contended with the timings and holder id of
    /// `template`.
    pub fn builder(
        template: SetConfig,
        leases: Vec<LeaseName>,
        database: Database,
    ) -> SqliteLeaseSetBuilder {
        SqliteLeaseSetBuilder {
            fanout: Arc::new(Fanout::for_leases(leases.len())),
            template,
            leases,
            database,
            options: SqliteOptions::default(),
        }
    }

    /// The fence of `lease`'s current term, if this node leads it (as a
    /// lone lease's [`super::SqliteLease::fence`]).
    pub fn fence(&self, lease: &LeaseName) -> Option<Fence> {
        let epoch = self.leadership(lease)?.leader_epoch()?;
        Some(Fence::new(&self.statements, lease, self.holder(), epoch))
    }

    /// Gives `lease` up (its work stops, then it is released); this node
    /// keeps contending, and does not take it back for a ttl.
    pub fn give_up(&self, lease: &LeaseName) {
        self.thread.send(Control::GiveUp(lease.clone()));
    }

    /// Hands `lease` over (DESIGN §3 "Planned handover"), as a lone
    /// lease's [`super::SqliteLease::hand_over`] does, if this node leads
    /// it when the thread gets to it: its work stops, then one statement
    /// reserves its row for node `to` for two intervals (`None`: releases
    /// it). The node that gets a lease takes it whatever its share, and
    /// the share then moves another lease instead; this node does not try
    /// the lease again while the reservation lasts. Returns at once; watch
    /// `leadership(lease)` or a subscription for the outcome. An error
    /// names a node that cannot be reserved for.
    pub fn hand_over(
        &self,
        lease: &LeaseName,
        to: Option<&str>,
    ) -> Result<(), picolease_core::ConfigError> {
        let to = to.map(picolease_core::HolderId::reserved_for).transpose()?;
        self.thread.send(Control::HandOver(Some(lease.clone()), to));
        Ok(())
    }

    /// "Hand over, then exit" (what `picolease run` does on SIGUSR1 with
    /// several names): hands every lease this node leads to the live
    /// member that ranks first for it (where the share will keep it once
    /// this node is gone; released when no other member is live), then
    /// shuts down; call [`SqliteLeaseSet::shutdown`] to wait for the end.
    pub fn hand_over_all(&self) {
        self.thread.send(Control::HandOverToPreferred);
    }

    /// True once the set's thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }
}

sqlite_handle_methods!(SqliteLeaseSet);

/// What the set publishes, per lease and as a whole: [`SetView`].
impl std::ops::Deref for SqliteLeaseSet {
    type Target = SetView;
    fn deref(&self) -> &SetView {
        &self.outputs
    }
}
