//! The builder of a server database's [`Contender`]: the scope's plan, the
//! connector, the gated work and the options, checked and started as one
//! driver task.

use std::sync::Arc;
use std::time::Duration;

use picolease_core::sql::Statements;
use picolease_core::{LeaseName, TableName};

use super::contender::Contender;
use super::database::{Connects, Database, Listen};
use super::gate::{gated_task, Gate, LeaderContext};
use super::options::ServerOptions;
use crate::scope::Scope;
use crate::set::SetView;
use crate::subscription::Subscription;
use crate::supervise::{
    probe, run_async_probe, Mailbox, RestartPolicy, Supervision, Verdicts, WorkOutcome,
};

/// Configures a [`Contender`] before it starts: the scope's plan, the
/// connector, the work and the options.
pub struct Builder<D: Database, S: Scope> {
    plan: S::Plan,
    connector: D::Connector,
    pub(crate) options: ServerOptions<D::Fence, D::Options>,
}

impl<D: Database, S: Scope> std::fmt::Debug for Builder<D, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("database", &D::NAME)
            .field("plan", &self.plan)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<D: Database, S: Scope> Builder<D, S> {
    pub(super) fn new(plan: S::Plan, connector: impl Connects<D>) -> Self {
        Builder {
            plan,
            connector: connector.into_connector(),
            options: ServerOptions::default(),
        }
    }

    /// Every leadership change (of every lease, for a set) from the start
    /// on, in order.
    pub fn subscribe(&self) -> Subscription {
        S::subscribe(&self.plan)
    }

    /// Validates the configuration and starts the driver task on the
    /// current tokio runtime (panics outside one, like `tokio::spawn`).
    /// Connecting happens in the task: connection failures are retried,
    /// and a fatal one (bad login, missing table) finishes the driver and
    /// is returned by `shutdown`.
    pub fn start(self) -> Result<Contender<D, S>, D::Error> {
        let Builder {
            plan,
            connector,
            mut options,
        } = self;
        let statements = Arc::new(statements_for::<D, S>(&plan, &options.table));
        let holder = S::planned_holder(&plan).clone();
        let listen = Listen::for_lease(S::notice_lease(&plan));
        options.restart.validate()?;
        let tasks = std::mem::take(&mut options.tasks);
        let mailbox = Mailbox::default();
        // What the probe's logs and gauge name: the lease, or the set.
        let probed = S::notice_lease(&plan).map_or_else(|| S::describe(&plan), |l| l.to_string());
        let (runner, view) = S::assemble(plan, Arc::clone(&options.clock), |lease, publisher| {
            Gate::new(
                tasks.clone(),
                Arc::clone(&statements),
                lease.clone(),
                holder.clone(),
                Arc::clone(publisher),
                Supervision::new(lease.clone(), options.restart, mailbox.clone()),
            )
        })?;
        let task = D::start(runner, connector, &statements, &options, listen);
        let poster = task.poster();
        mailbox.connect(move |input| {
            poster(input);
        });
        if let Some(probe) = options.probe.take() {
            tokio::spawn(run_async_probe(
                probe,
                Verdicts::new(&probed, task.poster()),
            ));
        }
        Ok(Contender {
            view,
            statements,
            task,
        })
    }
}

/// The statements a driver of `plan` runs on `table`: a set renewing by
/// liveness (DESIGN §9 "Renewal by liveness") runs `Statements::renewing_by_liveness`.
fn statements_for<D: Database, S: Scope>(plan: &S::Plan, table: &TableName) -> Statements {
    let statements = Statements::new(D::DIALECT, table);
    if S::renews_by_liveness(plan) {
        statements.renewing_by_liveness()
    } else {
        statements
    }
}

/// The options every server database's builder takes alike.
impl<D: Database, S: Scope> Builder<D, S> {
    /// The lease table (default [`picolease_core::DEFAULT_TABLE`]).
    pub fn table(mut self, table: TableName) -> Self {
        self.options.table = table;
        self
    }

    /// Create the table (with its fence index) if it is missing, on first
    /// connect (default on). Off, a missing table finishes the driver with
    /// the database's `MissingTable` error; create it with the database's
    /// `init`.
    pub fn auto_create(mut self, on: bool) -> Self {
        self.options.auto_create = on;
        self
    }

    /// Registers work to run while this node leads (in a set: while it
    /// leads each of its leases): `task` is spawned at the start of every
    /// term with the term's [`LeaderContext`] (the lease, epoch, fence,
    /// fenced transactions, deadline), and must return soon after the term
    /// ends (`ctx.cancelled()` completes then). A lease's new term's tasks
    /// start only after its previous term's have returned; the lease is
    /// released only after they have. Several may be registered.
    ///
    /// The work is supervised (DESIGN §5 "Work that fails"): it may
    /// return `()` or `Result<(), E>`. A panic or an `Err` is a failure,
    /// and the work starts again after a backoff; past the restart policy
    /// ([`Builder::restart_policy`]) the node hands the lease to another
    /// (the live candidate its last renewal read, else by a release) and
    /// stands aside for a cool-down. A normal return means the work is
    /// done for this term: it starts again only in the next.
    pub fn while_leader<F, Fut>(mut self, task: F) -> Self
    where
        F: Fn(LeaderContext<D::Fence>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future + Send + 'static,
        Fut::Output: WorkOutcome,
    {
        self.options.tasks.push(gated_task(task));
        self
    }

    /// How failing work is restarted and when it escalates (default
    /// [`RestartPolicy::default`]: 3 restarts in 60 s, backoff from 1 s,
    /// cool-down 60 s).
    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        self.options.restart = policy;
        self
    }

    /// A health probe (DESIGN §5 "Work that fails"): `check` runs every
    /// `every`, given at most `timeout` each time, and resolves `Ok(())`
    /// when this node could do the work, else `Err(reason)`. While it
    /// fails, the node does not announce itself, leaves a lapsed lease to
    /// healthy nodes for two intervals, and as leader hands the lease to
    /// a healthy live candidate (healthy nodes with a probe announce
    /// themselves, whatever their rank). With no healthy node, one still
    /// leads. In a set it is
    /// the member's health: while it fails the member holds its unhealthy
    /// row and hands its leases to the healthy members (DESIGN §9
    /// "Members' health").
    pub fn health_probe<C, Fut>(mut self, every: Duration, timeout: Duration, check: C) -> Self
    where
        C: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
    {
        use futures::FutureExt;
        let check: Arc<
            dyn Fn() -> futures::future::BoxFuture<'static, Result<(), String>> + Send + Sync,
        > = Arc::new(move || check().boxed());
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

    /// Times deadlines on `clock` instead of the system's suspend-aware
    /// clock: a test seam (a clock that jumps, as a suspend would).
    pub fn clock(mut self, clock: impl crate::clock::Clock) -> Self {
        self.options.clock = std::sync::Arc::new(clock);
        self
    }
}

impl<D: Database> Builder<D, SetView> {
    /// `lease`'s leadership changes from the start on, in order, as a lone
    /// lease's builder's `subscribe()`; `None` for a lease outside the set.
    pub fn subscribe_to(&self, lease: &LeaseName) -> Option<Subscription> {
        self.plan.subscribe_to(lease)
    }
}
