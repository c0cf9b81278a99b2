//! What the PostgreSQL and MySQL backends share: the async driver on a
//! current-thread runtime of its own thread, stopped through a
//! [`Contender`] or a [`SetContender`](super::SetContender); CMD as each
//! term's gated work; the blocking supervisor's view of an async term.

use std::future::Future;
use std::sync::Arc;
use std::thread::JoinHandle;

use futures::future::{BoxFuture, FutureExt};
use picolease::server::LeaderContext;
use picolease::set::SetSnapshots;
use picolease::{LeaseName, Term};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

use super::Contender;
use crate::failure::CliError;
use crate::term::child::{Gated, TermView};

/// What `run` needs of a running async lone lease.
pub(crate) trait AsyncLease: Sized + 'static {
    /// The driver's error type.
    type Error: Into<CliError> + Send + 'static;
    /// Completes when the driver stops by itself (a fatal error).
    fn stopped(&mut self) -> impl Future<Output = Result<(), Self::Error>>;
    /// Stops the work, releases, returns the driver's outcome.
    fn shutdown(self) -> impl Future<Output = Result<(), Self::Error>>;
    /// Stops at once without releasing.
    fn abort(self);
    /// Hands the lease to its preferred candidate, else releases it (then
    /// `shutdown` finishes once that is answered).
    fn hand_over_to_preferred(&self);
}

/// What `run` needs of a running async lease set.
pub(crate) trait AsyncSet: Sized + 'static {
    /// The driver's error type.
    type Error: Into<CliError> + Send + 'static;
    /// Gives `lease` up.
    fn give_up(&self, lease: &LeaseName);
    /// Hands every held lease to the member that ranks first for it and
    /// shuts down (`hand_over_all`).
    fn hand_over_all(&self);
    /// What the set publishes, readable from another thread.
    fn snapshots(&self) -> SetSnapshots;
    /// Stops every lease's work, releases, returns the driver's outcome.
    fn shutdown(self) -> impl Future<Output = Result<(), Self::Error>>;
}

/// CMD as gated work of a lone lease or of each lease of a set: the same
/// blocking supervisor as on SQLite, on the runtime's blocking pool; the
/// task (and so the lease's next statement, or its release) waits for it.
/// Without CMD the work is a task that waits for the term's end and then
/// for its `follower` line, holding no thread while the term lasts (a set
/// may hold thousands of leases).
pub(crate) fn supervise<F: Send + Sync + 'static>(
    gated: Arc<Gated>,
) -> impl Fn(LeaderContext<F>) -> BoxFuture<'static, ()> + Send + Sync {
    move |ctx: LeaderContext<F>| {
        let gated = Arc::clone(&gated);
        async move {
            if gated.runs_command() {
                let _ = tokio::task::spawn_blocking(move || gated.run_term(&ctx)).await;
            } else {
                ctx.cancelled().await;
                let term = Term::clone(&ctx);
                let _ = tokio::task::spawn_blocking(move || gated.wait_printed(&term)).await;
            }
        }
        .boxed()
    }
}

/// The blocking supervisor's view of an async term (it runs on a blocking
/// thread of the runtime).
impl<F> TermView for LeaderContext<F> {
    fn term(&self) -> &Term {
        self
    }

    fn deadline(&self) -> Option<std::time::Duration> {
        LeaderContext::deadline(self)
    }

    /// Waits on the term's token (woken at once when the driver stops the
    /// work) or its deadline, whichever comes first, from the runtime's
    /// blocking pool, where the supervisor runs.
    fn ended(&self, timeout: std::time::Duration) -> bool {
        if self.is_cancelled() {
            return true;
        }
        let wait = timeout.min(self.time_left());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let token = self.token().clone();
                let _ = runtime.block_on(tokio::time::timeout(wait, token.cancelled_owned()));
            }
            Err(_) => std::thread::sleep(wait),
        }
        self.is_cancelled()
    }
}

/// A driver on its own thread: `Ok(())` or its fatal error when joined.
type DriverThread = JoinHandle<Result<(), CliError>>;

fn joined(thread: Option<DriverThread>, database: &str) -> Result<(), CliError> {
    match thread.map(JoinHandle::join) {
        None | Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(e))) => Err(e),
        Some(Err(_)) => Err(CliError::runtime(format!(
            "the {database} lease thread panicked"
        ))),
    }
}

/// The driver of `run` (one name), on its own thread with its own runtime.
pub(crate) struct ServerContender {
    stop: Option<oneshot::Sender<Ending>>,
    thread: Option<DriverThread>,
    database: &'static str,
}

/// How `run` ends a lone lease.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Shut down: stop the work, release.
    Release,
    /// Hand over to the preferred candidate (else release), then shut down.
    HandOver,
    /// Stop at once without releasing.
    Abort,
}

/// Runs the lease `start` makes on `runtime`, on a thread named for
/// `database`, until it stops by itself or is told to.
pub(crate) fn spawn_lease<L: AsyncLease, E: Into<CliError> + Send + 'static>(
    runtime: Runtime,
    database: &'static str,
    start: impl FnOnce() -> Result<L, E> + Send + 'static,
) -> Result<Box<dyn Contender>, CliError> {
    let (stop_tx, stop) = oneshot::channel::<Ending>();
    let thread = std::thread::Builder::new()
        .name(format!("picolease-{}", database.to_lowercase()))
        .spawn(move || {
            runtime.block_on(async move {
                let mut lease = start().map_err(Into::into)?;
                let outcome = tokio::select! {
                    result = lease.stopped() => result,
                    ending = stop => match ending {
                        Ok(Ending::Abort) => {
                            lease.abort();
                            Ok(())
                        }
                        Ok(Ending::HandOver) => {
                            lease.hand_over_to_preferred();
                            lease.shutdown().await
                        }
                        _ => lease.shutdown().await,
                    },
                };
                outcome.map_err(Into::into)
            })
        })
        .map_err(|e| CliError::runtime(format!("cannot start the lease thread: {e}")))?;
    Ok(Box::new(ServerContender {
        stop: Some(stop_tx),
        thread: Some(thread),
        database,
    }))
}

impl ServerContender {
    fn end(mut self, ending: Ending) -> Result<(), CliError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(ending);
        }
        joined(self.thread.take(), self.database)
    }
}

impl Contender for ServerContender {
    fn shutdown(self: Box<Self>) -> Result<(), CliError> {
        (*self).end(Ending::Release)
    }

    fn hand_over_then_shutdown(self: Box<Self>) -> Result<(), CliError> {
        (*self).end(Ending::HandOver)
    }

    fn abort(mut self: Box<Self>) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Ending::Abort);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What `run` asks of a set on its runtime thread.
enum SetAsk {
    GiveUp(LeaseName),
    Shutdown,
    HandOverThenShutdown,
}

/// A lease set on its own runtime thread.
struct ServerSetContender {
    commands: tokio::sync::mpsc::UnboundedSender<SetAsk>,
    thread: Option<DriverThread>,
    database: &'static str,
}

/// Runs the set `start` makes on `runtime`, on a thread named for
/// `database`; returns its handle and its snapshots once it started.
pub(crate) fn spawn_set<S: AsyncSet, E: Into<CliError> + Send + 'static>(
    runtime: Runtime,
    database: &'static str,
    start: impl FnOnce() -> Result<S, E> + Send + 'static,
) -> Result<(Box<dyn super::SetContender>, SetSnapshots), CliError> {
    let (commands, mut inbox) = tokio::sync::mpsc::unbounded_channel();
    let (started_tx, started) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(format!("picolease-{}", database.to_lowercase()))
        .spawn(move || {
            runtime.block_on(async move {
                let set = match start() {
                    Ok(set) => set,
                    Err(e) => {
                        let _ = started_tx.send(Err(e.into()));
                        return Ok(());
                    }
                };
                let _ = started_tx.send(Ok(set.snapshots()));
                loop {
                    match inbox.recv().await {
                        Some(SetAsk::GiveUp(lease)) => set.give_up(&lease),
                        Some(SetAsk::HandOverThenShutdown) => {
                            set.hand_over_all();
                            return set.shutdown().await.map_err(Into::into);
                        }
                        Some(SetAsk::Shutdown) | None => {
                            return set.shutdown().await.map_err(Into::into)
                        }
                    }
                }
            })
        })
        .map_err(|e| CliError::runtime(format!("cannot start the lease thread: {e}")))?;
    let snapshots = started.recv().map_err(|_| {
        CliError::runtime(format!("the {database} lease thread stopped at its start"))
    })??;
    let contender = ServerSetContender {
        commands,
        thread: Some(thread),
        database,
    };
    Ok((Box::new(contender), snapshots))
}

impl super::SetContender for ServerSetContender {
    fn give_up(&self, lease: &LeaseName) {
        let _ = self.commands.send(SetAsk::GiveUp(lease.clone()));
    }

    fn shutdown(mut self: Box<Self>) -> Result<(), CliError> {
        let _ = self.commands.send(SetAsk::Shutdown);
        joined(self.thread.take(), self.database)
    }

    fn hand_over_then_shutdown(mut self: Box<Self>) -> Result<(), CliError> {
        let _ = self.commands.send(SetAsk::HandOverThenShutdown);
        joined(self.thread.take(), self.database)
    }
}
