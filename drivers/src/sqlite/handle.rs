//! The SQLite driver's one handle, over one lease or a set ([`Scope`]):
//! everything a handle does is written here once (its one builder is in
//! `builder.rs`).
//!
//! [`SqliteLease`] and [`SqliteLeaseSet`] are the two scopes of
//! [`Contender`]; the methods that name no lease on a lone lease and one
//! on a set (`fence`, `hand_over`) are the only ones written per scope,
//! and each is one line over the shared one.

use std::sync::Arc;
use std::time::Duration;

use picolease_core::sql::Statements;
use picolease_core::{Config, ConfigError, HolderId, LeaseName, SetConfig};

pub use super::builder::Builder;
use super::error::SqliteError;
use super::fence::Fence;
use super::gate::LeaderContext;
use super::inbox::Control;
use super::open::Database;
use super::thread::DriverThread;
use crate::scope::{drop_limit, LonePlan, Scope, SetPlan};
use crate::set::SetView;
use crate::supervise::WorkOutcome;
use crate::view::LeaseView;

/// How often a follower checks `PRAGMA data_version` for another
/// connection's commit when it cannot watch the file: a release is
/// noticed within about this long. Each check is a timed wake-up (about
/// 50 µs of CPU on a small VM, so about 0.2 % of a core).
pub const DEFAULT_CHANGE_CHECK: Duration = Duration::from_millis(25);

/// A contender for one lease on SQLite: the handle of its thread. Made
/// with [`SqliteLease::builder`]; it dereferences to a [`LeaseView`].
pub type SqliteLease = Contender<LeaseView>;
/// Configures a [`SqliteLease`] before it starts.
pub type SqliteLeaseBuilder = Builder<LeaseView>;
/// One node contending for a set of leases on SQLite, with a fair share
/// between the live nodes (DESIGN §9): one thread, one connection, one
/// statement at a time, whatever the number of leases. Made with
/// [`SqliteLeaseSet::builder`]; it dereferences to a [`SetView`].
pub type SqliteLeaseSet = Contender<SetView>;
/// Configures a [`SqliteLeaseSet`] before it starts.
pub type SqliteLeaseSetBuilder = Builder<SetView>;

/// One node contending on SQLite for one lease ([`SqliteLease`]) or a set
/// ([`SqliteLeaseSet`]): the handle of the driver's thread. It
/// dereferences to its scope's view (`leadership`, `watch`, `subscribe`,
/// `wait_for`, `snapshot`, …).
///
/// Call `shutdown` to stop the work and release. Dropping the handle asks
/// for the same shutdown and waits for it at most a ttl and a request
/// timeout, so a drop never hangs.
pub struct Contender<S: Scope> {
    pub(super) view: S,
    pub(super) statements: Arc<Statements>,
    pub(super) thread: DriverThread,
}

impl<S: Scope> std::ops::Deref for Contender<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.view
    }
}

impl<S: Scope> std::fmt::Debug for Contender<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Contender").field(&self.view).finish()
    }
}

impl SqliteLease {
    /// A contender for `config` (lease, holder id, timings) on `database`.
    pub fn builder(config: Config, database: Database) -> SqliteLeaseBuilder {
        Builder::new(LonePlan::new(config), database)
    }

    /// The fence of the current term, if this node leads.
    pub fn fence(&self) -> Option<Fence> {
        self.fence_of(self.lease(), self.leadership().leader_epoch())
    }

    /// Hands the lease over (DESIGN §3 "Planned handover") if this node
    /// leads it when the thread gets to it: its work stops as at any end
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

impl SqliteLeaseSet {
    /// A set of `leases` contended with the timings and holder id of
    /// `template`.
    pub fn builder(
        template: SetConfig,
        leases: Vec<LeaseName>,
        database: Database,
    ) -> SqliteLeaseSetBuilder {
        Builder::new(SetPlan::new(template, leases), database)
    }

    /// The fence of `lease`'s current term, if this node leads it (as a
    /// lone lease's [`SqliteLease::fence`]).
    pub fn fence(&self, lease: &LeaseName) -> Option<Fence> {
        self.fence_of(lease, self.leadership(lease)?.leader_epoch())
    }

    /// Hands `lease` over as a lone lease's [`SqliteLease::hand_over`]
    /// does. The node that gets it takes it whatever its share, and the
    /// share then moves another lease instead; this node does not try the
    /// lease again while the reservation lasts.
    pub fn hand_over(&self, lease: &LeaseName, to: Option<&str>) -> Result<(), ConfigError> {
        self.hand_over_lease(Some(lease), to)
    }
}

impl<S: Scope> Contender<S> {
    /// The fence of `lease`'s term `epoch` (none without one).
    fn fence_of(&self, lease: &LeaseName, epoch: Option<picolease_core::Epoch>) -> Option<Fence> {
        let holder: HolderId = self.view.timings().holder;
        Some(Fence::new(&self.statements, lease, &holder, epoch?))
    }

    /// Hands `lease` (`None`: the lone lease) over to the reservation
    /// `to`, or releases it: the scopes' `hand_over`.
    fn hand_over_lease(
        &self,
        lease: Option<&LeaseName>,
        to: Option<&str>,
    ) -> Result<(), ConfigError> {
        self.thread.send(Control::hand_over(lease, to)?);
        Ok(())
    }

    /// Gives `lease` up (its work stops, then it is released); this node
    /// keeps contending, and does not take it back for a ttl. A set's
    /// call: a lone lease's driver ignores it (shut it down instead), so
    /// code over either scope can call it.
    pub fn give_up(&self, lease: &LeaseName) {
        self.thread.send(Control::give_up(lease));
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
        self.thread.send(Control::HAND_OVER_TO_PREFERRED);
    }

    /// Registers more work, like the builder's `while_leader`: it starts at
    /// once in the current term of every lease this node leads, and in
    /// every later term.
    pub fn while_leader<O: WorkOutcome>(
        &self,
        work: impl Fn(LeaderContext) -> O + Send + Sync + 'static,
    ) {
        self.thread.add_work(super::gate::work(work));
    }

    /// This node's health, from a probe of your own (DESIGN §5 "Work that
    /// fails"; [`Builder::health_probe`] runs one for you): as a change of
    /// the probe's verdict. In a set it is
    /// the member's health: while it fails the member holds its unhealthy
    /// row and hands its leases to the healthy members (DESIGN §9
    /// "Members' health").
    pub fn report_health(&self, healthy: bool) {
        self.thread
            .send(Control::Engine(picolease_core::engine::Input::Health {
                healthy,
            }));
    }

    /// The work of `lease`'s term `epoch` (a lone lease's own lease)
    /// failed past a restart policy of your own: hand it over (unless a
    /// later term runs) and stand aside for `cool_down`,
    /// as the driver's own supervision does ([`Builder::restart_policy`]).
    /// `picolease run` supervises its CMD so.
    pub fn escalate(&self, lease: &LeaseName, epoch: picolease_core::Epoch, cool_down: Duration) {
        self.thread.send(Control::Engine(
            picolease_core::engine::Input::WorkEscalated {
                lease: Some(lease.clone()),
                epoch: Some(epoch),
                cool_down,
            },
        ));
    }

    /// Runs `job` on the driver thread's own connection, between two
    /// statements, and returns its result (`None` if the thread has
    /// stopped). The loop waits for it: keep it short. Meant for
    /// measurements and diagnostics (e.g. timing a bare statement on the
    /// very connection the driver renews through).
    pub fn with_connection<R: Send + 'static>(
        &self,
        job: impl FnOnce(&rusqlite::Connection) -> R + Send + 'static,
    ) -> Option<R> {
        self.thread.with_connection(job)
    }

    /// True once the driver has stopped (after shutdown, abort, or a fatal
    /// error; `shutdown` then returns the error).
    pub fn is_finished(&self) -> bool {
        self.view.loop_finished() || self.thread.is_finished()
    }

    /// Stops the work, releases every held lease (a set's membership row
    /// too), and returns when done. Returns the fatal error that stopped
    /// the driver earlier, if any.
    pub fn shutdown(mut self) -> Result<(), SqliteError> {
        self.thread.stop(Control::SHUTDOWN)
    }

    /// Stops at once WITHOUT releasing, as if the process had crashed: the
    /// work is cancelled and joined, the rows are left to lapse by their
    /// ttl. For tests and demonstrations.
    pub fn abort(mut self) {
        let _ = self.thread.stop(Control::Abort);
    }
}

impl<S: Scope> Drop for Contender<S> {
    fn drop(&mut self) {
        self.thread.stop_within(drop_limit(&self.view.timings()));
    }
}
