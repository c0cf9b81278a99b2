//! A server database's one handle, over one lease or a set ([`Scope`])
//! and over either database ([`Database`]): everything a handle does is
//! written here once (its one builder is in `builder.rs`).
//!
//! `PgLease`, `PgLeaseSet`, `MysqlLease` and `MysqlLeaseSet` are four
//! instances of [`Contender`]; the methods that name no lease on a lone
//! lease and one on a set (`builder`, `fence`, `hand_over`) are the only
//! ones written per scope, each over the shared one.

use std::sync::Arc;
use std::time::Duration;

use picolease_core::sql::Statements;
use picolease_core::{Config, ConfigError, Epoch, HolderId, LeaseName, SetConfig};

use super::builder::Builder;
use super::database::{Connects, Database};
use super::driver::Control;
use super::gate::{gated_task, LeaderContext};
use super::task::DriverTask;
use super::TermFence;
use crate::scope::{LonePlan, Scope, SetPlan};
use crate::set::SetView;
use crate::supervise::WorkOutcome;
use crate::view::LeaseView;

/// One node contending on a server database for one lease or a set: the
/// handle of the driver task. It dereferences to its scope's view
/// ([`LeaseView`] or [`SetView`]: `leadership`, `watch`, `subscribe`,
/// `time_left`, `snapshot`, …).
///
/// One task and one statement connection whatever the number of leases;
/// each lease's work runs as tasks of its own. Dropping the handle asks
/// for a shutdown in the background (gated work stopped, leases
/// released); call `shutdown` to wait for that.
pub struct Contender<D: Database, S: Scope> {
    pub(super) view: S,
    pub(super) statements: Arc<Statements>,
    pub(super) task: DriverTask<D::Link, D::Fence>,
}

impl<D: Database, S: Scope> std::ops::Deref for Contender<D, S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.view
    }
}

impl<D: Database, S: Scope> std::fmt::Debug for Contender<D, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Contender")
            .field(&D::NAME)
            .field(&self.view)
            .finish()
    }
}

impl<D: Database> Contender<D, LeaseView> {
    /// A contender for `config` (lease, holder id, timings) whose
    /// connections come from `connector`.
    pub fn builder(config: Config, connector: impl Connects<D>) -> Builder<D, LeaseView> {
        Builder::new(LonePlan::new(config), connector)
    }

    /// The fence of the current term, if this node leads.
    pub fn fence(&self) -> Option<D::Fence> {
        self.fence_of(self.lease(), self.leadership().leader_epoch())
    }

    /// Hands the lease over (DESIGN §3 "Planned handover") if this node
    /// leads it when the driver gets to it: the work stops as at any end
    /// of a term (its guarantees unchanged), then one statement reserves
    /// the row for node `to` (a node name: what `--node` says, or a library
    /// holder id, whose node is itself) for two intervals, during which
    /// only that node can take it, at once and at the next epoch; after
    /// that anyone may. `None` releases the row instead. This node goes on
    /// as a follower. Returns at once; watch `leadership` or a
    /// subscription for the outcome (a `follower` transition with reason
    /// [`Demotion::HandedOver`](picolease_core::Demotion::HandedOver), then
    /// the successor's term). An error names a node that cannot be
    /// reserved for.
    pub fn hand_over(&self, to: Option<&str>) -> Result<(), ConfigError> {
        self.hand_over_lease(None, to)
    }
}

impl<D: Database> Contender<D, SetView> {
    /// A set of `leases` contended with the timings and holder id of
    /// `template`, over connections from `connector`.
    pub fn builder(
        template: SetConfig,
        leases: Vec<LeaseName>,
        connector: impl Connects<D>,
    ) -> Builder<D, SetView> {
        Builder::new(SetPlan::new(template, leases), connector)
    }

    /// The fence of `lease`'s current term, if this node leads it (as a
    /// lone lease's `fence()`).
    pub fn fence(&self, lease: &LeaseName) -> Option<D::Fence> {
        self.fence_of(lease, self.leadership(lease)?.leader_epoch())
    }

    /// Hands `lease` over as a lone lease's `hand_over` does. The node
    /// that gets it takes it whatever its share, and the share then moves
    /// another lease instead; this node does not try the lease again while
    /// the reservation lasts.
    pub fn hand_over(&self, lease: &LeaseName, to: Option<&str>) -> Result<(), ConfigError> {
        self.hand_over_lease(Some(lease), to)
    }
}

impl<D: Database, S: Scope> Contender<D, S> {
    /// The fence of `lease`'s term `epoch` (none without one).
    fn fence_of(&self, lease: &LeaseName, epoch: Option<Epoch>) -> Option<D::Fence> {
        let holder: HolderId = self.view.timings().holder;
        Some(D::Fence::for_term(&self.statements, lease, &holder, epoch?))
    }

    /// Hands `lease` (`None`: the lone lease) over to the reservation
    /// `to`, or releases it: the scopes' `hand_over`.
    fn hand_over_lease(
        &self,
        lease: Option<&LeaseName>,
        to: Option<&str>,
    ) -> Result<(), ConfigError> {
        self.task.send(Control::hand_over(lease, to)?);
        Ok(())
    }

    /// Gives `lease` up (its work stops, then it is released); this node
    /// keeps contending, and does not take it back for a ttl. A set's
    /// call: a lone lease's driver ignores it (shut it down instead), so
    /// code over either scope can call it.
    pub fn give_up(&self, lease: &LeaseName) {
        self.task.send(Control::give_up(lease));
    }

    /// "Hand over, then exit" (what `picolease run` does on SIGUSR1): a
    /// lone lease goes to its preferred candidate (DESIGN §3 "Preferred
    /// holders": the live candidate the last renewal read, if it runs on
    /// another node; else it is released); a set's leases each go to the
    /// live member that ranks first for it (where the share will keep it
    /// once this node is gone; released when no other member is live), and
    /// the set shuts down. Follow it with `shutdown`, which finishes once
    /// the statements are answered.
    pub fn hand_over_to_preferred(&self) {
        self.task.send(Control::HAND_OVER_TO_PREFERRED);
    }

    /// Registers more work, like the builder's `while_leader`: it starts at
    /// once in the current term of every lease this node leads, and in
    /// every later term.
    pub fn while_leader<F, Fut>(&self, task: F)
    where
        F: Fn(LeaderContext<D::Fence>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future + Send + 'static,
        Fut::Output: WorkOutcome,
    {
        self.task.add_work(gated_task(task));
    }

    /// This node's health, from a probe of your own (DESIGN §5 "Work that
    /// fails"; [`Builder::health_probe`] runs one for you): as a change of
    /// the probe's verdict. In a set it is
    /// the member's health: while it fails the member holds its unhealthy
    /// row and hands its leases to the healthy members (DESIGN §9
    /// "Members' health").
    pub fn report_health(&self, healthy: bool) {
        self.task
            .send(Control::Engine(picolease_core::engine::Input::Health {
                healthy,
            }));
    }

    /// The work of `lease`'s term `epoch` (a lone lease's own lease)
    /// failed past a restart policy of your own: hand it over (unless a
    /// later term runs) and stand aside for `cool_down`,
    /// as the driver's own supervision does ([`Builder::restart_policy`]).
    /// `picolease run` supervises its CMD so.
    pub fn escalate(&self, lease: &LeaseName, epoch: Epoch, cool_down: Duration) {
        self.task.send(Control::Engine(
            picolease_core::engine::Input::WorkEscalated {
                lease: Some(lease.clone()),
                epoch: Some(epoch),
                cool_down,
            },
        ));
    }

    /// The most recent error met (a failed connect, a failed or timed-out
    /// statement, …), cleared by the next successful statement. Transient
    /// errors are retried; they show here and in the `tracing` logs.
    pub fn last_error(&self) -> Option<D::Error> {
        self.task.last_error()
    }

    /// True once the driver has stopped (after shutdown, abort, or a fatal
    /// error).
    pub fn is_finished(&self) -> bool {
        self.view.loop_finished() || self.task.is_finished()
    }

    /// Stops the work and waits for it, releases every held lease
    /// (notifying the other contenders; a set's membership row too), and
    /// returns when all of that is done. Returns the fatal error that had
    /// stopped the driver, if any.
    ///
    /// Work that ignores its cancellation keeps this waiting (the release
    /// itself is abandoned after the request timeout, and the lease then
    /// lapses by its ttl).
    pub async fn shutdown(mut self) -> Result<(), D::Error> {
        self.task.shutdown().await
    }

    /// Waits until the driver stops by itself, which it does only on a
    /// fatal error (a missing or malformed table, refused credentials):
    /// returns that error. Does not give up the handle, so it can race a
    /// signal in `select!` and the handle still be shut down after:
    ///
    /// ```ignore
    /// // `lease`: a `PgLease`, `PgLeaseSet`, `MysqlLease` or `MysqlLeaseSet`.
    /// tokio::select! {
    ///     result = lease.stopped() => result?,
    ///     _ = tokio::signal::ctrl_c() => {}
    /// }
    /// lease.shutdown().await
    /// ```
    ///
    /// Cancel-safe. Once it has returned, later calls (and `shutdown`)
    /// return `Ok(())` at once: the outcome is reported only once.
    pub async fn stopped(&mut self) -> Result<(), D::Error> {
        self.task.join().await
    }

    /// Stops the driver at once, without stopping gracefully or releasing:
    /// what a crash looks like to the other contenders (the leases lapse by
    /// their ttl). The work is cancelled by the task in the background;
    /// this returns without waiting.
    pub fn abort(mut self) {
        self.task.abort();
    }
}
