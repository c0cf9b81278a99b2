//! The PostgreSQL driver's one task, for a lone lease and for a set alike:
//! one [`SetRunner`], the statements it asks for run on the statement
//! connection (`Link`), release notices from the listener.
//!
//! The statement in flight runs concurrently with the waits, so a term
//! whose deadline passes while a statement hangs ends on time (its work is
//! cancelled then, not when the statement gives up). The task keeps no
//! timeout of its own: past a statement's give-up the engine says
//! `Cancel`, and the task drops the statement and cancels it on the
//! server. Each lease's work runs as tasks of its own; at the end the task
//! waits for them without blocking the runtime.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use picolease_core::sql::{BatchBindings, Cell};
use picolease_core::{BatchKind, BatchReply, Failure, LeaseName, Operation, Reply, RequestId};
use tokio::sync::mpsc;

use super::error::PgError;
use super::gate::{Gate, GatedTask};
use super::link::{batch_name, operation_name, Call, Link};
use super::notify::Notice;
use crate::metrics::Outcome;
use crate::set::{Answer, Execute, Ran, SetRunner, Statement, REAP_EVERY};

/// The runner of a PostgreSQL task: each lease's work behind its gate.
pub(crate) type Runner = SetRunner<Gate>;

/// The most recent error, shared with the handle (transient errors are
/// retried, so they are only visible here and in the logs).
pub(crate) type LastError = Arc<Mutex<Option<PgError>>>;

/// What a handle asks of the task.
pub(crate) enum Control {
    /// Stop the work, release, finish.
    Shutdown,
    /// Stop at once without releasing.
    Abort,
    /// A set's node gives a lease up.
    GiveUp(LeaseName),
    /// Register work on every lease (started at once where held).
    AddWork(GatedTask),
}

/// Everything the task owns.
pub(crate) struct Task {
    pub(crate) runner: Runner,
    pub(crate) link: Arc<Link>,
    pub(crate) notices: Option<mpsc::Receiver<Notice>>,
    pub(crate) listener: Option<tokio::task::JoinHandle<()>>,
    pub(crate) inbox: mpsc::UnboundedReceiver<Control>,
    /// How long the connections stay open after a release freed rows
    /// (`DEFAULT_LINGER`).
    pub(crate) linger: Duration,
    /// The last statement's error, cleared by one that succeeds.
    pub(crate) last_error: LastError,
}

/// A statement running on the statement connection: its id, what it
/// runs, and its answer to come with the error behind a failed one.
type InFlight = (
    RequestId,
    Ran,
    BoxFuture<'static, (Answer, Option<PgError>)>,
);

/// The answer of the statement in flight; pending while there is none.
async fn outcome(in_flight: &mut Option<InFlight>) -> (Answer, Option<PgError>) {
    match in_flight {
        Some((_, _, future)) => future.await,
        None => std::future::pending().await,
    }
}

/// The next notice; pending for ever without a listener.
async fn next_notice(notices: &mut Option<mpsc::Receiver<Notice>>) -> Option<Notice> {
    match notices {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// What binding a statement needs of the engine's configuration.
#[derive(Clone)]
struct Binding {
    lease: Arc<str>,
    holder: picolease_core::HolderId,
    ttl_millis: i64,
    stale_millis: i64,
    timeout: Duration,
}

/// Runs `statement` on `link` once `stopped` (the ended terms' work) has
/// returned, and decodes it: the engine's answer, and the error behind a
/// failed one. The request timeout starts once it can be sent.
async fn execute(
    link: Arc<Link>,
    binding: Binding,
    statement: Statement,
    stopped: Option<BoxFuture<'static, ()>>,
) -> (Answer, Option<PgError>) {
    if let Some(stopped) = stopped {
        stopped.await;
    }
    let deadline = tokio::time::Instant::now() + binding.timeout;
    let statements = link.statements();
    let table = || statements.table().to_string();
    match statement {
        Statement::Row(operation) => {
            let call = Call {
                operation,
                lease: Arc::clone(&binding.lease),
                holder: binding.holder.as_str().into(),
                ttl_millis: binding.ttl_millis,
                deadline,
                timeout: binding.timeout,
            };
            let rows = link.execute(call).await;
            match rows.and_then(|rows| {
                statements
                    .decode_reply(operation, &binding.holder, &rows)
                    .map_err(|source| PgError::Row {
                        table: table(),
                        source: source.for_lease(&binding.lease),
                    })
            }) {
                Ok(reply) => (Answer::Row(reply), None),
                Err(e) => (Answer::Row(Reply::Failed(e.failure())), Some(e)),
            }
        }
        Statement::Batch(batch) => {
            let json = batch.json();
            let bindings = BatchBindings {
                holder: binding.holder.as_str(),
                ttl_millis: binding.ttl_millis,
                batch: &json,
                stale_millis: binding.stale_millis,
            };
            let rows: Result<Vec<Vec<Cell>>, PgError> = link
                .execute_batch(batch.kind, &bindings, deadline, binding.timeout)
                .await;
            match rows.and_then(|rows| {
                statements
                    .decode_batch_reply(batch.kind, &binding.holder, &rows)
                    .map_err(|source| PgError::Row {
                        table: table(),
                        source,
                    })
            }) {
                Ok(reply) => (Answer::Batch(reply), None),
                Err(e) => (Answer::Batch(BatchReply::Failed(e.failure())), Some(e)),
            }
        }
    }
}

/// The task: see the module docs.
pub(crate) async fn run(task: Task) -> Result<(), PgError> {
    let Task {
        mut runner,
        link,
        mut notices,
        listener,
        mut inbox,
        linger,
        last_error,
    } = task;
    let config = runner.engine.config();
    let me = config.holder.clone();
    let timeout = config.request_timeout;
    let binding = Binding {
        lease: config.lease.as_str().into(),
        holder: me.clone(),
        ttl_millis: config.ttl_millis(),
        stale_millis: runner.engine.stale_millis(),
        timeout,
    };
    // At most one: the engine asks for a statement only once the last one
    // was answered (the answer was taken from here) or given up on (its
    // `Cancel` comes first in the same `carry_out`, and drops it).
    let mut in_flight: Option<InFlight> = None;
    let mut fatal = None;
    let mut handle_gone = false;
    // A release freed rows: successors may be acquiring them.
    let mut released = false;
    let now = runner.now();
    runner.engine.handle_timeout(now);
    loop {
        let carried = runner.carry_out();
        if let Some(request) = carried.cancel {
            if let Some((_, ran, future)) = in_flight.take_if(|(r, _, _)| *r == request) {
                drop(future);
                abandon(&link, ran, timeout, &last_error);
            }
        }
        if let Some(Execute {
            request, statement, ..
        }) = carried.execute
        {
            debug_assert!(
                in_flight.is_none(),
                "the engine asked for a second statement"
            );
            // Work of an ended term is gone before a lone lease's next
            // statement: on shutdown, that puts the release after it.
            let stopped = matches!(statement, Statement::Row(_)).then(|| {
                let stopped: Vec<_> = runner.gates().map(|gate| gate.stopped()).collect();
                futures::future::join_all(stopped).map(drop).boxed()
            });
            let ran = Ran::of(&statement);
            let future = execute(Arc::clone(&link), binding.clone(), statement, stopped);
            in_flight = Some((request, ran, future.boxed()));
        }
        if runner.engine.is_finished() {
            break;
        }
        // Sleeps run on the monotonic clock, which stops during suspend: a
        // bounded sleep re-reads the suspend-aware clock soon after a
        // resume.
        let wait = runner
            .wait()
            .unwrap_or(crate::clock::LONGEST_WAIT)
            .min(crate::clock::LONGEST_WAIT);
        let mut notice = None;
        let control = tokio::select! {
            control = inbox.recv(), if !handle_gone => match control {
                Some(control) => Some(control),
                None => {
                    // A dropped handle shuts down like an explicit call.
                    handle_gone = true;
                    Some(Control::Shutdown)
                }
            },
            (answer, error) = outcome(&mut in_flight) => {
                let Some((request, ran, _)) = in_flight.take() else {
                    unreachable!("an answer comes from the statement in flight");
                };
                let outcome = match (&answer, &error) {
                    (_, None) => Outcome::Answered,
                    (Answer::Row(Reply::Failed(Failure::Fatal)) | Answer::Batch(BatchReply::Failed(Failure::Fatal)), _) => Outcome::Fatal,
                    _ => Outcome::Transient,
                };
                *last_error.lock().unwrap_or_else(|e| e.into_inner()) = error.clone();
                if let Some(error) = error {
                    if outcome == Outcome::Fatal {
                        tracing::error!(?ran, error = %error, "picolease: giving up");
                        fatal = Some(error);
                    } else {
                        tracing::warn!(?ran, error = %error, "picolease: statement failed, will retry");
                    }
                }
                released |= freed_rows(ran, &answer);
                runner.reply(request, answer, outcome);
                None
            }
            n = next_notice(&mut notices) => {
                match n {
                    Some(n) => notice = Some(n),
                    None => notices = None,
                }
                None
            }
            () = tokio::time::sleep(wait) => None,
        };
        let now = runner.now();
        match control {
            Some(Control::Shutdown) => runner.engine.handle_shutdown(now),
            Some(Control::GiveUp(lease)) => runner.engine.handle_give_up(now, lease.as_str()),
            Some(Control::AddWork(task)) => {
                for gate in runner.gates() {
                    gate.add(Arc::clone(&task));
                }
            }
            Some(Control::Abort) => {
                tracing::warn!(holder = %me, "picolease: aborting without releasing");
                break;
            }
            None => {}
        }
        if let Some(first) = notice {
            take_notices(&mut runner, first, notices.as_mut());
        }
        runner.reap();
        let now = runner.now();
        runner.engine.handle_timeout(now);
    }
    if released && runner.engine.is_finished() && !linger.is_zero() {
        // Closing both connections now would have the server tear two
        // backends down while the successors acquire (DEFAULT_LINGER).
        tokio::time::sleep(linger).await;
    }
    // Connections close before the work is joined.
    drop(in_flight);
    if let Some(listener) = listener {
        listener.abort();
    }
    drop(notices);
    drop(link);
    runner.stop_all();
    while !runner.has_stopped() {
        tokio::time::sleep(REAP_EVERY).await;
    }
    runner.finish();
    match fatal {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// True if the answer says a release freed rows.
fn freed_rows(ran: Ran, answer: &Answer) -> bool {
    match (ran, answer) {
        (Ran::Row(Operation::Release { .. }), Answer::Row(Reply::Accepted)) => true,
        (Ran::Batch(BatchKind::Release), Answer::Batch(BatchReply::Matched(names))) => {
            !names.is_empty()
        }
        _ => false,
    }
}

/// Notifications come in bursts (a node giving up its surplus frees
/// hundreds of leases in one commit): take every one already here, and let
/// the engine plan once for all of them.
fn take_notices(runner: &mut Runner, first: Notice, mut more: Option<&mut mpsc::Receiver<Notice>>) {
    let now = runner.now();
    let mut released = Vec::new();
    let mut lost = false;
    let mut next = Some(first);
    while let Some(notice) = next {
        match notice {
            Notice::Released(name) => released.push(name),
            Notice::Resubscribed => lost = true,
        }
        next = more.as_mut().and_then(|rx| rx.try_recv().ok());
    }
    if !released.is_empty() {
        runner
            .engine
            .handle_release_notices(now, released.iter().map(String::as_str));
    }
    if lost {
        runner.engine.handle_notices_lost(now);
    }
}

/// The engine gave up on the statement in flight (its future is dropped):
/// the connection is suspect (a stalled socket would hold every later
/// statement), so drop it and cancel the query on the server.
fn abandon(link: &Link, ran: Ran, timeout: Duration, last_error: &LastError) {
    let during = match ran {
        Ran::Row(operation) => operation_name(operation),
        Ran::Batch(kind) => batch_name(kind),
    };
    tracing::warn!(
        during,
        ?timeout,
        "picolease: statement timed out; cancelling it and reconnecting"
    );
    *last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(PgError::Timeout {
        during,
        after: timeout,
    });
    if let Some(token) = link.abandon() {
        let cancel = link.connector().cancel(token);
        // Never waited for: the server may be unreachable.
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, cancel).await;
        });
    }
}
