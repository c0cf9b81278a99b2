//! The task of a lease set on PostgreSQL: one [`SetRunner`], the batches
//! it asks for run on the shared statement connection (`Link`), release
//! notices from the shared listener.
//!
//! The batch in flight runs concurrently with the waits, so a term whose
//! deadline passes while a statement hangs ends on time (its work is
//! cancelled then, not when the statement gives up). The task keeps no
//! timeout of its own: past a batch's give-up the set says `Cancel`, and
//! the task drops the batch and cancels it on the server. Each lease's work
//! is a lone lease's tasks; at the end the task waits for them without
//! blocking the runtime.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use picolease_core::sql::BatchBindings;
use picolease_core::{BatchKind, BatchReply, Failure, LeaseName, RequestId};
use tokio::sync::mpsc;

use super::driver::LastError;
use super::error::PgError;
use super::gate::{Gate, GatedTask};
use super::link::{batch_name, Link};
use super::notify::Notice;
use crate::set::{Execute, SetRunner, REAP_EVERY};

/// The runner of a PostgreSQL set: each lease's work behind a lone
/// lease's gate.
type Runner = SetRunner<Gate>;

/// What the handle asks of the task.
pub(crate) enum Control {
    Shutdown,
    Abort,
    GiveUp(LeaseName),
    /// Register work on every lease (started at once where held).
    AddWork(GatedTask),
}

/// Everything the task owns.
pub(crate) struct SetTask {
    pub(crate) runner: Runner,
    pub(crate) link: Arc<Link>,
    pub(crate) notices: Option<mpsc::Receiver<Notice>>,
    pub(crate) listener: Option<tokio::task::JoinHandle<()>>,
    pub(crate) inbox: mpsc::UnboundedReceiver<Control>,
    /// How long the connections stay open after a release batch freed
    /// rows (`DEFAULT_LINGER`).
    pub(crate) linger: Duration,
    /// The last batch's error, cleared by a batch that succeeds.
    pub(crate) last_error: LastError,
}

/// A batch running on the statement connection: its id, its kind and its
/// outcome to come.
type BatchInFlight = (
    RequestId,
    BatchKind,
    BoxFuture<'static, (BatchReply, Option<PgError>)>,
);

/// The outcome of the batch in flight; pending while there is none.
async fn outcome(in_flight: &mut Option<BatchInFlight>) -> (BatchReply, Option<PgError>) {
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

/// Runs `batch` on `link` and decodes it: the set's reply, and the error
/// behind a failed one.
async fn execute(
    link: Arc<Link>,
    config: BatchConfig,
    batch: Execute,
) -> (BatchReply, Option<PgError>) {
    let Execute { batch, .. } = batch;
    let json = batch.json();
    let bindings = BatchBindings {
        holder: config.holder.as_str(),
        ttl_millis: config.ttl_millis,
        batch: &json,
        stale_millis: config.stale_millis,
    };
    let deadline = tokio::time::Instant::now() + config.timeout;
    let rows = link
        .execute_batch(batch.kind, &bindings, deadline, config.timeout)
        .await;
    match rows.and_then(|rows| {
        link.statements()
            .decode_batch_reply(batch.kind, &config.holder, &rows)
            .map_err(|source| PgError::Row {
                table: link.statements().table().to_string(),
                source,
            })
    }) {
        Ok(reply) => (reply, None),
        Err(e) => (BatchReply::Failed(e.failure()), Some(e)),
    }
}

/// What binding a batch needs of the set's configuration.
#[derive(Clone)]
struct BatchConfig {
    holder: picolease_core::HolderId,
    ttl_millis: i64,
    stale_millis: i64,
    timeout: Duration,
}

/// The set's task: see the module docs.
pub(crate) async fn run(task: SetTask) -> Result<(), PgError> {
    let SetTask {
        mut runner,
        link,
        mut notices,
        listener,
        mut inbox,
        linger,
        last_error,
    } = task;
    let config = runner.set.config();
    let me = config.holder.clone();
    let timeout = config.request_timeout;
    let batch_config = BatchConfig {
        holder: me.clone(),
        ttl_millis: config.ttl_millis(),
        stale_millis: runner.set.stale_millis(),
        timeout,
    };
    // At most one: the set asks for a batch only once the last one was
    // answered (the reply was taken from here) or given up on (its
    // `Cancel` comes first in the same `carry_out`, and drops it).
    let mut in_flight: Option<BatchInFlight> = None;
    let mut fatal = None;
    let mut handle_gone = false;
    // A release batch freed rows: successors may be acquiring them.
    let mut released = false;
    let now = runner.now();
    runner.set.handle_timeout(now);
    loop {
        let carried = runner.carry_out();
        if let Some(request) = carried.cancel {
            if let Some((_, kind, future)) = in_flight.take_if(|(r, _, _)| *r == request) {
                drop(future);
                abandon(&link, kind, timeout);
            }
        }
        if let Some(next) = carried.execute {
            debug_assert!(in_flight.is_none(), "the set asked for a second batch");
            let (request, kind) = (next.request, next.batch.kind);
            let future = execute(Arc::clone(&link), batch_config.clone(), next);
            in_flight = Some((request, kind, future.boxed()));
        }
        if runner.set.is_finished() {
            break;
        }
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
            (reply, error) = outcome(&mut in_flight) => {
                let Some((request, kind, _)) = in_flight.take() else {
                    unreachable!("an outcome comes from the batch in flight");
                };
                *last_error.lock().unwrap_or_else(|e| e.into_inner()) = error.clone();
                if let Some(error) = error {
                    match reply {
                        BatchReply::Failed(Failure::Fatal) => {
                            tracing::error!(?kind, error = %error, "picolease: the set gives up");
                            fatal = Some(error);
                        }
                        _ => {
                            tracing::warn!(?kind, error = %error, "picolease: batch failed, will retry")
                        }
                    }
                }
                if kind == BatchKind::Release && matches!(&reply, BatchReply::Matched(names) if !names.is_empty()) {
                    released = true;
                }
                runner.reply(request, kind, reply);
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
            Some(Control::Shutdown) => runner.set.handle_shutdown(now),
            Some(Control::GiveUp(lease)) => runner.set.handle_give_up(now, lease.as_str()),
            Some(Control::AddWork(task)) => {
                for gate in runner.gates() {
                    gate.add(Arc::clone(&task));
                }
            }
            Some(Control::Abort) => {
                tracing::warn!(holder = %me, "picolease: aborting the set without releasing the leases");
                break;
            }
            None => {}
        }
        if let Some(first) = notice {
            take_notices(&mut runner, first, notices.as_mut());
        }
        runner.reap();
        let now = runner.now();
        runner.set.handle_timeout(now);
    }
    if released && runner.set.is_finished() && !linger.is_zero() {
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

/// Notifications come in bursts (a node giving up its surplus frees
/// hundreds of leases in one commit): take every one already here, and let
/// the set plan once for all of them.
fn take_notices(runner: &mut Runner, first: Notice, mut more: Option<&mut mpsc::Receiver<Notice>>) {
    let now = runner.now();
    let mut released = Vec::new();
    let mut resubscribed = false;
    let mut next = Some(first);
    while let Some(notice) = next {
        match notice {
            Notice::Released(name) => released.push(name),
            Notice::Resubscribed => resubscribed = true,
        }
        next = more.as_mut().and_then(|rx| rx.try_recv().ok());
    }
    if !released.is_empty() {
        runner
            .set
            .handle_release_notices(now, released.iter().map(String::as_str));
    }
    if resubscribed {
        runner.set.handle_survey_request(now);
    }
}

/// The set gave up on the batch in flight (its future is dropped): the
/// connection is suspect (a stalled socket would hold every later batch),
/// so drop it and cancel the query on the server, as a lone lease's driver
/// does on `Cancel`.
fn abandon(link: &Link, kind: BatchKind, timeout: Duration) {
    let during = batch_name(kind);
    tracing::warn!(
        during,
        ?timeout,
        "picolease: the set gave up on a batch; cancelling it and reconnecting"
    );
    if let Some(token) = link.abandon() {
        let cancel = link.connector().cancel(token);
        // Never waited for: the server may be unreachable.
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, cancel).await;
        });
    }
}
