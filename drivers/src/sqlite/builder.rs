//! The builder of a SQLite [`Contender`]: the scope's plan, the database,
//! the gated work and the options, checked and started as one driver
//! thread.

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::LeaseName;

use super::changes::Notices;
use super::error::SqliteError;
use super::gate::{Gate, LeaderContext};
use super::handle::Contender;
use super::open::Database;
use super::options::SqliteOptions;
use super::thread::DriverThread;
use crate::scope::Scope;
use crate::set::SetView;
use crate::subscription::Subscription;
use crate::supervise::{
    probe, run_blocking_probe, Mailbox, RestartPolicy, Supervision, Verdicts, WorkOutcome,
};

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
    pub(super) fn new(plan: S::Plan, database: Database) -> Self {
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
        let mut statements = Statements::new(Dialect::Sqlite, &database.table);
        if S::renews_by_liveness(&plan) {
            statements = statements.renewing_by_liveness();
        }
        let statements = Arc::new(statements);
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
            Statements::clone(&statements),
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
