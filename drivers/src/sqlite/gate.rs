//! "Run while leader": user closures started on their own threads when the
//! node becomes leader and stopped when it is not (DESIGN §5).
//!
//! The driver carries out the core's `StartWork`/`StopWork` commands here.
//! Stopping only *signals* the work; the threads are joined before the
//! driver's next statement or next start. That one rule gives both
//! guarantees of the contract without an `if` about leadership in the
//! driver: the work of a term is gone before the release that follows a
//! shutdown, and before a new term can start.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use picolease_core::sql::Statements;
use picolease_core::{Epoch, HolderId, LeaseName};

use super::fence::Fence;
pub use crate::cancellation::Cancellation;
use crate::publish::Publisher;
use crate::supervise::{panic_message, Supervision, WorkOutcome};
use crate::view::Term;

/// What a gated closure is handed when its term starts: the term (it
/// dereferences to [`Term`]: `lease()`, `holder()`, `epoch()`), its fence,
/// and the signal to stop.
#[derive(Clone, Debug)]
pub struct LeaderContext {
    term: Term,
    fence: Fence,
    cancellation: Cancellation,
    deadline: Deadline,
}

impl std::ops::Deref for LeaderContext {
    type Target = Term;
    fn deref(&self) -> &Term {
        &self.term
    }
}

impl LeaderContext {
    /// The fence of this term, to make the work's own writes conditional
    /// on it.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// True once the term has ended: the driver stopped the work
    /// (demotion, shutdown), or the leader's deadline has passed, which
    /// this reads itself (the lease thread may be blocked in a statement).
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled() || self.deadline.passed()
    }

    /// The term's cancellation signal, to wait on or hand to other threads.
    /// It is set when the driver stops the work; [`LeaderContext::sleep`]
    /// and [`LeaderContext::is_cancelled`] also watch the deadline.
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// Time left before the leader's deadline (zero once passed), on the
    /// drivers' suspend-aware clock; renewals push it back.
    pub fn time_left(&self) -> Duration {
        self.deadline.left()
    }

    /// The leader's deadline as [`crate::boottime`] reads it (time since
    /// boot, suspend included): a number another process can act on.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline.at()
    }

    /// Sleeps up to `timeout`, waking at once when the term ends or its
    /// deadline passes; true if it has ended.
    pub fn sleep(&self, timeout: Duration) -> bool {
        let until = std::time::Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            let step = left.min(self.deadline.left());
            if self.cancellation.wait_timeout(step) || self.deadline.passed() {
                return true;
            }
            if left.is_zero() || step == left {
                return self.is_cancelled();
            }
        }
    }
}

/// The leader's deadline as the driver last published it.
#[derive(Clone, Debug)]
struct Deadline(Arc<Publisher>);

impl Deadline {
    fn passed(&self) -> bool {
        self.0.time_left().is_some_and(|left| left.is_zero())
    }

    /// Time left; a long time when no deadline is published (the driver
    /// stops the work then).
    fn left(&self) -> Duration {
        self.0.time_left().unwrap_or(Duration::from_secs(3600))
    }

    fn at(&self) -> Option<Duration> {
        self.0.deadline()
    }
}

/// A gated closure: returns its failure, if it failed (DESIGN §5 "Work
/// that fails").
pub(crate) type Work = Arc<dyn Fn(LeaderContext) -> Option<String> + Send + Sync + 'static>;

/// Boxes a user's closure as a [`Work`].
pub(crate) fn work<O: WorkOutcome>(
    work: impl Fn(LeaderContext) -> O + Send + Sync + 'static,
) -> Work {
    Arc::new(move |context| work(context).into_failure())
}

/// A closure run when a term ends, before its release
/// (`when_term_ends`).
pub(crate) type TermEnd = Arc<dyn Fn(Term) + Send + Sync + 'static>;

/// The registered closures and the threads of the current (or last) term
/// of one lease: a lone lease's, or one member's of a set.
pub(crate) struct Gate {
    publisher: Arc<Publisher>,
    /// The fence statement's table, the lease and this node's holder id:
    /// what each term's [`Fence`] is made of.
    statements: Arc<Statements>,
    lease: LeaseName,
    holder: HolderId,
    works: Vec<Work>,
    /// Run when a term ends, each on a thread of its own started then; the
    /// release waits for them as for the work.
    term_ends: Vec<TermEnd>,
    /// Threads of the current term.
    running: Vec<JoinHandle<()>>,
    /// Threads of an ended term, signalled but not yet joined.
    stopped: Vec<JoinHandle<()>>,
    /// The current term's context, cloned for each closure.
    current: Option<LeaderContext>,
    /// Restarts and escalates the work when it fails.
    supervision: Arc<Supervision>,
}

impl Gate {
    pub(crate) fn new(
        publisher: Arc<Publisher>,
        statements: Arc<Statements>,
        lease: LeaseName,
        holder: HolderId,
        supervision: Arc<Supervision>,
    ) -> Self {
        Gate {
            supervision,
            publisher,
            statements,
            lease,
            holder,
            works: Vec::new(),
            term_ends: Vec::new(),
            running: Vec::new(),
            stopped: Vec::new(),
            current: None,
        }
    }

    /// Registers a closure; if a term is running it starts in it at once.
    pub(crate) fn add(&mut self, work: Work) {
        if let Some(context) = &self.current {
            let index = self.works.len();
            if let Some(handle) = start_work(index, &work, context, &self.supervision) {
                self.running.push(handle);
            }
        }
        self.works.push(work);
    }

    /// Registers a closure to run when each term ends, from the next end
    /// on.
    pub(crate) fn add_term_end(&mut self, end: TermEnd) {
        self.term_ends.push(end);
    }

    /// Starts every closure for the term `epoch` (after joining the last
    /// term's threads).
    pub(crate) fn start(&mut self, epoch: Epoch) {
        // A StartWork always follows a StopWork; stop anyway, defensively.
        self.stop();
        self.join_stopped();
        let (lease, holder) = (&self.lease, &self.holder);
        let context = LeaderContext {
            term: Term::new(lease.clone(), holder.clone(), epoch),
            fence: Fence::new(&self.statements, lease, holder, epoch),
            cancellation: Cancellation::default(),
            deadline: Deadline(Arc::clone(&self.publisher)),
        };
        for (index, work) in self.works.iter().enumerate() {
            if let Some(handle) = start_work(index, work, &context, &self.supervision) {
                self.running.push(handle);
            }
        }
        self.current = Some(context);
    }

    /// Signals the running work to stop and starts the term-end closures
    /// (does not wait for either).
    pub(crate) fn stop(&mut self) {
        if let Some(context) = self.current.take() {
            context.cancellation.cancel();
            for (index, end) in self.term_ends.iter().enumerate() {
                let (end, term) = (Arc::clone(end), context.term.clone());
                if let Some(handle) = spawn("term-end", index, &context.term, move || end(term)) {
                    self.stopped.push(handle);
                }
            }
        }
        self.stopped.append(&mut self.running);
    }

    /// True once the work told to stop has returned (it is then joined
    /// without waiting).
    pub(crate) fn has_stopped(&mut self) -> bool {
        if self.stopped.iter().all(JoinHandle::is_finished) {
            self.join_stopped();
            true
        } else {
            false
        }
    }

    /// Waits for stopped work to finish. A closure that panicked is logged.
    pub(crate) fn join_stopped(&mut self) {
        for handle in self.stopped.drain(..) {
            if handle.join().is_err() {
                tracing::error!("a gated work closure panicked");
            }
        }
    }
}

/// Starts work closure `index` in the term of `context`: again after a
/// failure, when `supervision` says (after an escalation too, slowly,
/// should the term go on), until the term ends or the closure returns
/// normally (done for this term).
fn start_work(
    index: usize,
    work: &Work,
    context: &LeaderContext,
    supervision: &Arc<Supervision>,
) -> Option<JoinHandle<()>> {
    let (work, given) = (Arc::clone(work), context.clone());
    let supervision = Arc::clone(supervision);
    spawn("work", index, &context.term, move || loop {
        if given.is_cancelled() {
            return;
        }
        let run = std::panic::AssertUnwindSafe(|| work(given.clone()));
        let failure = match std::panic::catch_unwind(run) {
            Ok(failure) => failure,
            Err(panic) => Some(panic_message(&*panic)),
        };
        // Done for this term; or it failed because its term ended, which
        // is no failure of the work.
        let Some(failure) = failure else { return };
        if given.is_cancelled() {
            return;
        }
        let wait = supervision.failed(given.epoch(), &failure);
        if given.sleep(wait) {
            return;
        }
    })
}

/// Runs `run` (closure `index` of kind `what`, in `term`) on its own
/// thread; a thread that cannot be started is logged (the term goes on,
/// or ends, without it).
fn spawn(
    what: &str,
    index: usize,
    term: &Term,
    run: impl FnOnce() + Send + 'static,
) -> Option<JoinHandle<()>> {
    let name = format!("picolease-{what}-{}-{index}", term.lease());
    match std::thread::Builder::new().name(name).spawn(run) {
        Ok(handle) => Some(handle),
        Err(e) => {
            let epoch = term.epoch().get();
            tracing::error!(epoch, "cannot start the {what} closure {index}: {e}");
            None
        }
    }
}

/// A set's member runs its work through the lone lease's gate.
impl crate::runner::TermGate for Gate {
    type Work = Work;
    fn add(&mut self, work: Work) {
        Gate::add(self, work);
    }
    fn start(&mut self, epoch: Epoch) {
        Gate::start(self, epoch);
    }

    fn stop(&mut self, _: Epoch) {
        Gate::stop(self);
    }

    fn stop_all(&mut self) {
        Gate::stop(self);
    }

    fn has_stopped(&mut self) -> bool {
        Gate::has_stopped(self)
    }
}
