//! The SQLite driver's one builder and one handle, over one lease or a
//! set ([`Scope`]): everything a handle does is written here once.
//!
//! [`SqliteLease`] and [`SqliteLeaseSet`] are the two scopes of
//! [`Contender`]; the methods that name no lease on a lone lease and one
//! on a set (`fence`, `hand_over`) are the only ones written per scope,
//! and each is one line over the shared one.

use std::sync::Arc;
use std::time::Duration;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{Config, ConfigError, HolderId, LeaseName, SetConfig};

use super::changes::Notices;
use super::error::SqliteError;
use super::fence::Fence;
use super::gate::{Gate, LeaderContext};
use super::inbox::Control;
use super::open::Database;
use super::options::SqliteOptions;
use super::thread::DriverThread;
use crate::scope::{drop_limit, LonePlan, Scope, SetPlan};
use crate::set::SetView;
use crate::subscription::Subscription;
use crate::supervise::{
    probe, run_blocking_probe, Mailbox, RestartPolicy, Supervision, Verdicts, WorkOutcome,
};
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

/// Configures a [`Contender`] before it starts: the scope's plan, the
/// database, the work and the options.
pub struct Builder<S: Scope> {
    plan: S::Plan,
    database: Database,
    pub(super) options: SqliteOptions,
}

impl<S: Scope> std::fmt::Debug for Builder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("plan", &self.plan)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl<S: Scope> Builder<S> {
    fn new(plan: S::Plan, database: Database) -> Self {
        Builder {
            plan,
            database,
            options: SqliteOptions::default(),
        }
    }

    /// Every leadership change (of every lease, for a set) from the start
    /// on, in order.
    pub fn subscribe(&self) -> Subscription {
        S::subscribe(&self.plan)
    }

    /// Validates the configuration, opens the database (creating the file
    /// and table if allowed), checks the table, and starts the driver's
    /// thread. A bad configuration is reported before the file is touched.
    pub fn start(self) -> Result<Contender<S>, SqliteError> {
        let Builder {
            plan,
            mut database,
            options,
        } = self;
        let statements = Arc::new(Statements::new(Dialect::Sqlite, &database.table));
        let holder = S::planned_holder(&plan).clone();
        let what = S::describe(&plan);
        options.restart.validate()?;
        let mailbox = Mailbox::default();
        // What the probe's logs and gauge name: the lease, or the set.
        let probed = S::notice_lease(&plan).map_or_else(|| what.clone(), |l| l.to_string());
        let (runner, view) = S::assemble(plan, Arc::clone(&options.clock), |lease, publisher| {
            let mut gate = Gate::new(
                Arc::clone(publisher),
                Arc::clone(&statements),
                lease.clone(),
                holder.clone(),
                Supervision::new(lease.clone(), options.restart, mailbox.clone()),
            );
            options.add_works_to(&mut gate);
            gate
        })?;
        let thread = DriverThread::start(
            format!("picolease-{what}"),
            what,
            &mut database,
            options.notices,
            runner,
        )?;
        let poster = thread.poster();
        mailbox.connect(move |input| {
            poster(input);
        });
        if let Some(probe) = options.probe.clone() {
            run_blocking_probe(probe, Verdicts::new(&probed, thread.poster()));
        }
        Ok(Contender {
            view,
            statements,
            thread,
        })
    }
}

/// The options every scope's builder takes alike.
impl<S: Scope> Builder<S> {
    /// Registers work to run while this node leads (in a set: while it
    /// leads each of its leases): `work` is started on its own thread
    /// at the start of every term with the term's [`LeaderContext`]
    /// (the lease, epoch, fence and deadline), and must return soon
    /// after the term ends ([`LeaderContext::sleep`] wakes at once
    /// then). The lease is released only after it has returned, and
    /// the lease's next term starts only after. Several may be
    /// registered.
    ///
    /// The work is supervised (DESIGN §5 "Work that fails"): it may
    /// return `()` or `Result<(), E>`. A panic or an `Err` is a failure,
    /// and the work starts again after a backoff; past the restart policy
    /// ([`Builder::restart_policy`]) the node hands the lease to another
    /// (the live candidate its last renewal read, else by a release) and
    /// stands aside for a cool-down. A normal return means the work is
    /// done for this term: it starts again only in the next.
    pub fn while_leader<O: WorkOutcome>(
        mut self,
        work: impl Fn(LeaderContext) -> O + Send + Sync + 'static,
    ) -> Self {
        self.options.works.push(super::gate::work(work));
        self
    }

    /// How failing work is restarted and when it escalates (default
    /// [`RestartPolicy::default`]: 3 restarts in 60 s, backoff from 1 s,
    /// cool-down 60 s).
    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        self.options.restart = policy;
        self
    }

    /// A health probe (DESIGN §5 "Work that fails"): `check` runs on a
    /// thread of its own every `every`, given at most `timeout` each time,
    /// and returns `Ok(())` when this node could do the work, else
    /// `Err(reason)`. While it fails, the node does not announce itself,
    /// leaves a lapsed lease to healthy nodes for two intervals, and as
    /// leader hands the lease to a healthy live candidate (healthy nodes
    /// with a probe announce themselves, whatever their rank). With no
    /// healthy node, one still leads. In a set it is
    /// the member's health: while it fails the member holds its unhealthy
    /// row and hands its leases to the healthy members (DESIGN §9
    /// "Members' health").
    pub fn health_probe(
        mut self,
        every: std::time::Duration,
        timeout: std::time::Duration,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        let check: Arc<dyn Fn() -> Result<(), String> + Send + Sync> = Arc::new(check);
        self.options.probe = Some(probe(check, every, timeout));
        S::await_health(&mut self.plan);
        self
    }

    /// This node's health comes through
    /// [`report_health`](Contender::report_health), from a probe of the
    /// caller's own (as `picolease run --health-cmd` does): a lone lease
    /// counts as unhealthy until the first report, as with
    /// [`health_probe`](Self::health_probe), so a node started with a bad
    /// release does not win a free lease before its probe has run.
    pub fn awaits_health_reports(mut self) -> Self {
        S::await_health(&mut self.plan);
        self
    }

    /// Registers a closure to run when each term ends (in a set: each
    /// term of each of its leases), with the term that ended, on a
    /// thread of its own started then; the lease is released only
    /// after it returns. For what must come before the release without
    /// a thread for the whole term, as [`while_leader`](Self::while_leader)
    /// work has (a set may hold thousands of leases): `picolease run`
    /// with several names and no CMD waits here for a term's
    /// `follower` line to be printed. Keep it short: the release, and
    /// so the successor, waits for it.
    pub fn when_term_ends(mut self, end: impl Fn(crate::Term) + Send + Sync + 'static) -> Self {
        self.options.term_ends.push(std::sync::Arc::new(end));
        self
    }

    /// Times deadlines on `clock` instead of the system's suspend-aware
    /// clock: a test seam (a clock that jumps, as a suspend would).
    pub fn clock(mut self, clock: impl crate::clock::Clock) -> Self {
        self.options.clock = std::sync::Arc::new(clock);
        self
    }

    /// Release notifications (on by default): while the node waits for
    /// a lease (a lone lease's follower; a set under its share), it
    /// watches the database file (inotify on its directory) and, when
    /// another connection commits, checks `PRAGMA data_version` and
    /// looks at once (a lone lease reads its row and tries if the row
    /// is free or lapsed; a set surveys). A clean handover then takes
    /// milliseconds instead of up to one interval. Without inotify
    /// (macOS and the BSDs, which have none, or a watch that cannot be
    /// set up) it polls `PRAGMA data_version` every
    /// [`DEFAULT_CHANGE_CHECK`](super::DEFAULT_CHANGE_CHECK) instead.
    /// The trade: on a busy file the node also wakes for unrelated
    /// writes, each costing one read (never an acquire unless a lease
    /// is free). Off: a release is found at the next poll or survey,
    /// within an interval.
    pub fn notifications(mut self, on: bool) -> Self {
        self.options.notices = if on { Notices::Watch } else { Notices::Off };
        self
    }

    /// Release notifications by polling `PRAGMA data_version` every
    /// `every` (at least 1 ms) instead of watching the file: for
    /// filesystems whose change notifications miss other writers.
    pub fn change_check(mut self, every: std::time::Duration) -> Self {
        self.options.notices = Notices::Poll(every.max(std::time::Duration::from_millis(1)));
        self
    }
}

impl Builder<SetView> {
    /// `lease`'s leadership changes from the start on, in order, as a lone
    /// lease's builder's `subscribe()`; `None` for a lease outside the set.
    pub fn subscribe_to(&self, lease: &LeaseName) -> Option<Subscription> {
        self.plan.subscribe_to(lease)
    }
}

/// One node contending on SQLite for one lease ([`SqliteLease`]) or a set
/// ([`SqliteLeaseSet`]): the handle of the driver's thread. It
/// dereferences to its scope's view (`leadership`, `watch`, `subscribe`,
/// `wait_for`, `snapshot`, …).
///
/// Call `shutdown` to stop the work and release. Dropping the handle asks
/// for the same shutdown and waits for it at most a ttl and a request
/// timeout, so a drop never hangs.
pub struct Contender<S: Scope> {
    view: S,
    statements: Arc<Statements>,
    thread: DriverThread,
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
