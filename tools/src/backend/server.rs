//! What the PostgreSQL and MySQL backends share: starting the async
//! driver's one handle (`picolease::server::Contender`, over either
//! database and a lone lease's or a set's scope) on a current-thread
//! runtime of its own thread, stopped through a [`Contender`]; CMD as each
//! term's gated work; the blocking supervisor's view of an async term.

use std::sync::Arc;
use std::thread::JoinHandle;

use futures::future::{BoxFuture, FutureExt};
use picolease::server::{self, Connects, Database, LeaderContext};
use picolease::set::SetView;
use picolease::{Epoch, LeaseName, LeaseView, Subscription, TableName, Term};
use tokio::runtime::Runtime;

use super::{Contender, Leases, ScopeView, Started};
use crate::failure::CliError;
use crate::term::child::{Gated, TermView};

/// Starts database `D`'s driver for `leases` on `table` (one name on a
/// lone lease's handle, several on a set's) over `connector`, with `gated`
/// (CMD) as each term's work, on `runtime`'s own thread named for
/// `database`.
pub(crate) fn start<D: Database>(
    runtime: Runtime,
    database: &'static str,
    connector: impl Connects<D> + Send + 'static,
    table: &TableName,
    leases: Leases,
    gated: Option<Arc<Gated>>,
) -> Result<Started, CliError>
where
    D::Error: Into<CliError> + Send,
{
    match leases {
        Leases::One(config) => {
            let builder = server::Contender::<D, LeaseView>::builder(config, connector);
            launch(runtime, database, builder, table, gated)
        }
        Leases::Many { template, names } => {
            let builder = server::Contender::<D, SetView>::builder(template, names, connector);
            launch(runtime, database, builder, table, gated)
        }
    }
}

/// [`start`] for one scope: the table, CMD as work, the subscription, the
/// runtime thread.
fn launch<D: Database, S: ScopeView>(
    runtime: Runtime,
    database: &'static str,
    builder: server::Builder<D, S>,
    table: &TableName,
    gated: Option<Arc<Gated>>,
) -> Result<Started, CliError>
where
    D::Error: Into<CliError> + Send,
{
    let mut builder = builder.table(table.clone());
    let transitions = builder.subscribe();
    if gated.as_ref().is_some_and(|g| g.awaits_health()) {
        builder = builder.awaits_health_reports();
    }
    if let Some(gated) = gated {
        builder = builder.while_leader(supervise(gated));
    }
    spawn(runtime, database, transitions, move || builder.start())
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
    Health(bool),
    Escalate(LeaseName, picolease::Epoch, std::time::Duration),
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
fn spawn<D: Database, S: ScopeView>(
    runtime: Runtime,
    database: &'static str,
    transitions: Subscription,
    start: impl FnOnce() -> Result<server::Contender<D, S>, D::Error> + Send + 'static,
) -> Result<Started, CliError>
where
    D::Error: Into<CliError> + Send,
{
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
                            Some(Ask::Health(healthy)) => handle.report_health(healthy),
                            Some(Ask::Escalate(lease, epoch, cool_down)) => {
                                handle.escalate(&lease, epoch, cool_down)
                            }
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

    fn report_health(&self, healthy: bool) {
        let _ = self.asks.send(Ask::Health(healthy));
    }

    fn escalate(&self, lease: &LeaseName, epoch: picolease::Epoch, cool_down: std::time::Duration) {
        let _ = self
            .asks
            .send(Ask::Escalate(lease.clone(), epoch, cool_down));
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

/// A server database's target as the administrative commands reach it:
/// what runs one call there (a PostgreSQL client, a MySQL connector), on
/// a runtime of its own, with the server named in a connection failure.
pub(crate) trait AdminTarget {
    /// What the driver's administrative functions run on.
    type Admin<'a>: server::Admin<Error = Self::Error>
    where
        Self: 'a;
    /// The database's error type.
    type Error;

    /// Runs `op` on this target.
    fn admin<T>(
        &self,
        op: impl for<'a> AsyncFnOnce(Self::Admin<'a>) -> Result<T, Self::Error>,
    ) -> Result<T, CliError>;
}

/// `handover`: writes the request row.
pub fn request_hand_over<A: AdminTarget>(
    target: &A,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
    to: &str,
) -> Result<(), CliError> {
    target.admin(async |admin| server::request_hand_over(admin, table, lease, epoch, to).await)
}

/// `handover`: withdraws the request row if it still names `epoch`.
pub fn withdraw_hand_over<A: AdminTarget>(
    target: &A,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
) -> Result<(), CliError> {
    target.admin(async |admin| server::withdraw_hand_over(admin, table, lease, epoch).await)
}

/// `release --force`: the epoch the driver reports (PostgreSQL's new one,
/// MySQL's the lease was held at), or `None` when there is no such lease
/// (the statement leaves a malformed row as it is; the driver reports it).
pub fn force_release<A: AdminTarget>(
    target: &A,
    table: &TableName,
    lease: &LeaseName,
    ttl: std::time::Duration,
) -> Result<Option<Epoch>, CliError> {
    target.admin(async |admin| server::force_release(admin, table, lease, ttl).await)
}

/// `release --all --after-failover`: each row's name and new epoch.
pub fn release_after_failover<A: AdminTarget>(
    target: &A,
    table: &TableName,
    ttl: std::time::Duration,
) -> Result<Vec<(String, Epoch)>, CliError> {
    target.admin(async |admin| server::release_after_failover(admin, table, ttl).await)
}
