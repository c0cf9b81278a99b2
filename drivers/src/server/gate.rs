//! Gated work: tasks that run only while this node leads.
//!
//! Each term gets a cancellation token and a task tracker. `StartWork`
//! spawns every registered task with the term's [`LeaderContext`]; each
//! first waits for the previous term's tasks to finish, so two terms' work
//! never overlaps on one node. `StopWork` cancels the token; the term's
//! tasks are then "winding down", and the driver waits for them before it
//! sends its next statement (DESIGN §4: on shutdown, stop the work, then
//! release) and before it reports shutdown done.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use picolease_core::sql::Statements;
use picolease_core::{Epoch, HolderId, LeaseName};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::TermFence;
use crate::publish::Publisher;
use crate::supervise::{panic_message, Supervision, WorkOutcome};
use crate::view::Term;

/// What a gated task is given when its term starts: the term (it
/// dereferences to [`Term`]: `lease()`, `holder()`, `epoch()`), its fence
/// (of the database's type `F`), and the signal to stop. Each driver names
/// its own: `postgres::LeaderContext`, `mysql::LeaderContext`.
#[derive(Clone, Debug)]
pub struct LeaderContext<F> {
    term: Term,
    token: CancellationToken,
    fence: F,
    publisher: Arc<Publisher>,
}

impl<F> std::ops::Deref for LeaderContext<F> {
    type Target = Term;
    fn deref(&self) -> &Term {
        &self.term
    }
}

impl<F> LeaderContext<F> {
    /// Cancelled when the term ends (demotion or shutdown).
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Completes when the term ends: the driver stopped the work
    /// (demotion, shutdown), or the leader's deadline passed, which this
    /// watches itself (the driver may be waiting on a statement). `select!`
    /// on it in your loop.
    pub async fn cancelled(&self) {
        while !self.is_cancelled() {
            let step = self
                .time_left()
                .min(crate::clock::LONGEST_WAIT)
                .max(Duration::from_millis(1));
            tokio::select! {
                () = self.token.cancelled() => return,
                () = tokio::time::sleep(step) => {}
            }
        }
    }

    /// True once the term has ended (stopped by the driver, or past the
    /// leader's deadline).
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
            || self
                .publisher
                .time_left()
                .is_some_and(|left| left.is_zero())
    }

    /// Time left before the leader's deadline (zero once passed), on the
    /// drivers' suspend-aware clock; renewals push it back.
    pub fn time_left(&self) -> Duration {
        self.publisher
            .time_left()
            .unwrap_or(Duration::from_secs(3600))
    }

    /// The leader's deadline as [`crate::boottime`] reads it (time since
    /// boot, suspend included): a number another process can act on.
    pub fn deadline(&self) -> Option<Duration> {
        self.publisher.deadline()
    }

    /// The fence of this term, to make the work's own writes conditional
    /// on it.
    pub fn fence(&self) -> &F {
        &self.fence
    }
}

/// A registered gated task: called once per term (and again after a
/// failure, DESIGN §5 "Work that fails"); it resolves to its failure, if
/// it failed.
pub(crate) type GatedTask<F> =
    Arc<dyn Fn(LeaderContext<F>) -> BoxFuture<'static, Option<String>> + Send + Sync>;

/// Boxes a user's `Fn(LeaderContext) -> impl Future` as a [`GatedTask`].
pub(crate) fn gated_task<F, T, Fut>(task: T) -> GatedTask<F>
where
    T: Fn(LeaderContext<F>) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: WorkOutcome,
{
    Arc::new(move |ctx| task(ctx).map(WorkOutcome::into_failure).boxed())
}

/// Completes when a term's tasks have all finished.
type Done = Shared<BoxFuture<'static, ()>>;

/// The tasks of the current term, with what they need to be stopped and awaited.
struct TermTasks<F> {
    epoch: Epoch,
    context: LeaderContext<F>,
    tracker: TaskTracker,
    /// The term before this one, still winding down when this one started.
    previous: Done,
}

/// The gated tasks of one driver and the term they run in.
pub(crate) struct Gate<F> {
    tasks: Vec<GatedTask<F>>,
    current: Option<TermTasks<F>>,
    /// The last stopped term's tasks (and, through it, every earlier one).
    stopped: Done,
    /// The fence statement, rendered once for the lease table (shared by
    /// every member of a set).
    statements: Arc<Statements>,
    lease: LeaseName,
    holder: HolderId,
    publisher: Arc<Publisher>,
    /// Restarts and escalates the work when it fails.
    supervision: Arc<Supervision>,
}

fn done() -> Done {
    futures::future::ready(()).boxed().shared()
}

impl<F: TermFence> Gate<F> {
    pub(crate) fn new(
        tasks: Vec<GatedTask<F>>,
        statements: Arc<Statements>,
        lease: LeaseName,
        holder: HolderId,
        publisher: Arc<Publisher>,
        supervision: Arc<Supervision>,
    ) -> Self {
        Gate {
            publisher,
            supervision,
            tasks,
            current: None,
            stopped: done(),
            statements,
            lease,
            holder,
        }
    }

    /// Registers a task; if a term is running it starts in it at once.
    pub(crate) fn add(&mut self, task: GatedTask<F>) {
        if let Some(term) = &self.current {
            spawn(term, &task, &self.supervision);
        }
        self.tasks.push(task);
    }

    /// `StartWork`: spawns every task for the term at `epoch`.
    pub(crate) fn start(&mut self, epoch: Epoch) {
        if let Some(term) = self.current.take() {
            // Not expected (the core stops a term before starting the next),
            // but never leave a term running unstopped.
            self.stopped = stop(term);
        }
        let context = LeaderContext {
            term: Term::new(self.lease.clone(), self.holder.clone(), epoch),
            token: CancellationToken::new(),
            fence: F::for_term(&self.statements, &self.lease, &self.holder, epoch),
            publisher: Arc::clone(&self.publisher),
        };
        let term = TermTasks {
            epoch,
            context,
            tracker: TaskTracker::new(),
            previous: self.stopped.clone(),
        };
        for task in &self.tasks {
            spawn(&term, task, &self.supervision);
        }
        tracing::debug!(
            epoch = epoch.get(),
            tasks = self.tasks.len(),
            "picolease: gated work started"
        );
        self.current = Some(term);
    }

    /// `StopWork`: cancels the term at `epoch`; its tasks wind down.
    pub(crate) fn stop(&mut self, epoch: Epoch) {
        if self
            .current
            .as_ref()
            .is_some_and(|term| term.epoch == epoch)
        {
            if let Some(term) = self.current.take() {
                self.stopped = stop(term);
                tracing::debug!(epoch = epoch.get(), "picolease: gated work stopping");
            }
        }
    }

    /// Completes when every stopped term's tasks have finished.
    pub(crate) fn stopped(&self) -> Done {
        self.stopped.clone()
    }

    /// True once every stopped term's tasks have finished (looked at
    /// without waiting).
    pub(crate) fn has_stopped(&self) -> bool {
        self.stopped.clone().now_or_never().is_some()
    }

    /// Stops whatever runs (the driver is ending) and returns the future
    /// of everything finishing.
    pub(crate) fn stop_all(&mut self) -> Done {
        if let Some(term) = self.current.take() {
            self.stopped = stop(term);
        }
        self.stopped.clone()
    }
}

fn stop<F>(term: TermTasks<F>) -> Done {
    term.context.token.cancel();
    term.tracker.close();
    let tracker = term.tracker;
    let previous = term.previous;
    async move {
        previous.await;
        tracker.wait().await
    }
    .boxed()
    .shared()
}

/// Runs `task` in `term`, after the previous term's tasks: again after
/// a failure, when `supervision` says (after an escalation too, slowly,
/// should the term go on), until the term ends or the task returns
/// normally (done for this term).
fn spawn<F: TermFence>(term: &TermTasks<F>, task: &GatedTask<F>, supervision: &Arc<Supervision>) {
    let context = term.context.clone();
    let previous = term.previous.clone();
    let task = task.clone();
    let supervision = Arc::clone(supervision);
    term.tracker.spawn(async move {
        previous.await;
        let epoch = context.epoch();
        loop {
            if context.is_cancelled() {
                return;
            }
            let failure = match AssertUnwindSafe(task(context.clone())).catch_unwind().await {
                Ok(failure) => failure,
                Err(panic) => Some(panic_message(&*panic)),
            };
            // Done for this term; or it failed because its term ended,
            // which is no failure of the work.
            let Some(failure) = failure else { return };
            if context.is_cancelled() {
                return;
            }
            let wait = supervision.failed(epoch, &failure);
            tokio::select! {
                () = context.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    });
}

impl<F> Drop for Gate<F> {
    /// The driver task was dropped (aborted, or its runtime shut down):
    /// tell the running term's tasks to stop rather than leave them leading.
    fn drop(&mut self) {
        if let Some(term) = &self.current {
            term.context.token.cancel();
        }
    }
}

/// A set's member runs its work through the lone lease's gate.
impl<F: TermFence> crate::runner::TermGate for Gate<F> {
    type Work = GatedTask<F>;
    fn add(&mut self, task: GatedTask<F>) {
        Gate::add(self, task);
    }
    fn start(&mut self, epoch: Epoch) {
        Gate::start(self, epoch);
    }

    fn stop(&mut self, epoch: Epoch) {
        Gate::stop(self, epoch);
    }

    fn stop_all(&mut self) {
        // The set looks at `has_stopped` instead of awaiting this.
        drop(Gate::stop_all(self));
    }

    fn has_stopped(&mut self) -> bool {
        Gate::has_stopped(self)
    }
}
