//! What the PostgreSQL and MySQL backends share: the async driver, a lone
//! lease's handle or a set's alike ([`AsyncHandle`]), on a current-thread
//! runtime of its own thread, stopped through a [`Contender`]; CMD as each
//! term's gated work; the blocking supervisor's view of an async term.

use std::future::Future;
use std::sync::Arc;
use std::thread::JoinHandle;

use futures::future::{BoxFuture, FutureExt};
use picolease::server::LeaderContext;
use picolease::{LeaseName, Subscription, Term};
use tokio::runtime::Runtime;

use super::{Contender, Started, View};
use crate::failure::CliError;
use crate::term::child::{Gated, TermView};

/// What `run` needs of a running async driver handle, a lone lease's or a
/// set's: the one adapter [`spawn`] drives.
pub(crate) trait AsyncHandle: Sized + 'static {
    /// The driver's error type.
    type Error: Into<CliError> + Send + 'static;
    /// What it publishes, readable from another thread.
    fn view(&self) -> View;
    /// Completes when the driver stops by itself (a fatal error);
    /// cancel-safe.
    fn stopped(&mut self) -> impl Future<Output = Result<(), Self::Error>>;
    /// Gives `lease` up (a set's; a lone lease's CMD ending by itself ends
    /// `run` instead, so a lone lease ignores it).
    fn give_up(&self, lease: &LeaseName);
    /// Hands what is held to the preferred candidates, else releases it
    /// (then `shutdown` finishes once that is answered).
    fn hand_over_to_preferred(&self);
    /// Stops the work, releases, returns the driver's outcome.
    fn shutdown(self) -> impl Future<Output = Result<(), Self::Error>>;
    /// Stops at once without releasing.
    fn abort(self);
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

/// What `run` asks of the handle on its runtime thread.
enum Ask {
    GiveUp(LeaseName),
    /// Stop the work, release.
    Shutdown,
    /// Hand over to the preferred candidates (else release), then shut
    /// down.
    HandOverThenShutdown,
    /// Stop at once without releasing.
    Abort,
}

/// A driver handle, a lone lease's or a set's, on its own runtime thread.
struct ServerContender {
    asks: tokio::sync::mpsc::UnboundedSender<Ask>,
    thread: Option<DriverThread>,
    database: &'static str,
}

/// Runs the handle `start` makes on `runtime`, on a thread named for
/// `database`, until it stops by itself or is told to; returns once it
/// has started, with `transitions` (its builder's subscription) and its
/// view.
pub(crate) fn spawn<H: AsyncHandle, E: Into<CliError> + Send + 'static>(
    runtime: Runtime,
    database: &'static str,
    transitions: Subscription,
    start: impl FnOnce() -> Result<H, E> + Send + 'static,
) -> Result<Started, CliError> {
    let (asks, mut inbox) = tokio::sync::mpsc::unbounded_channel();
    let (started_tx, started) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(format!("picolease-{}", database.to_lowercase()))
        .spawn(move || {
            runtime.block_on(async move {
                let mut handle = match start() {
                    Ok(handle) => handle,
                    Err(e) => {
                        let _ = started_tx.send(Err(e.into()));
                        return Ok(());
                    }
                };
                let _ = started_tx.send(Ok(handle.view()));
                let outcome = loop {
                    tokio::select! {
                        result = handle.stopped() => break result,
                        ask = inbox.recv() => match ask {
                            Some(Ask::GiveUp(lease)) => handle.give_up(&lease),
                            Some(Ask::Abort) => {
                                handle.abort();
                                break Ok(());
                            }
                            Some(Ask::HandOverThenShutdown) => {
                                handle.hand_over_to_preferred();
                                break handle.shutdown().await;
                            }
                            Some(Ask::Shutdown) | None => break handle.shutdown().await,
                        },
                    }
                };
                outcome.map_err(Into::into)
            })
        })
        .map_err(|e| CliError::runtime(format!("cannot start the lease thread: {e}")))?;
    let view = started.recv().map_err(|_| {
        CliError::runtime(format!("the {database} lease thread stopped at its start"))
    })??;
    let contender = ServerContender {
        asks,
        thread: Some(thread),
        database,
    };
    Ok(Started {
        contender: Box::new(contender),
        transitions,
        view,
    })
}

impl ServerContender {
    fn end(mut self, ask: Ask) -> Result<(), CliError> {
        let _ = self.asks.send(ask);
        joined(self.thread.take(), self.database)
    }
}

impl Contender for ServerContender {
    fn give_up(&self, lease: &LeaseName) {
        let _ = self.asks.send(Ask::GiveUp(lease.clone()));
    }

    fn shutdown(self: Box<Self>) -> Result<(), CliError> {
        (*self).end(Ask::Shutdown)
    }

    fn hand_over_then_shutdown(self: Box<Self>) -> Result<(), CliError> {
        (*self).end(Ask::HandOverThenShutdown)
    }

    fn abort(self: Box<Self>) {
        let _ = (*self).end(Ask::Abort);
    }
}
