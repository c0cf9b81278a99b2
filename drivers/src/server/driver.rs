//! The task of a server database's driver, for a lone lease and for a
//! set alike: one [`Runner`], the statements it asks for run on the
//! database's statement connection (a [`Link`]), release notices where the
//! database has them.
//!
//! The statement in flight runs concurrently with the waits, so a term
//! whose deadline passes while a statement hangs ends on time (its work is
//! cancelled then, not when the statement gives up). The task keeps no
//! timeout of its own: past a statement's give-up the engine says
//! `Cancel`, and the task drops the statement and has the link cancel it
//! on the server. Each lease's work runs as tasks of its own; at the end
//! the task waits for them without blocking the runtime.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use picolease_core::{BatchKind, BatchReply, Failure, Operation, Reply, RequestId};
use tokio::sync::mpsc;

use super::gate::{Gate, GatedTask};
use super::{ran_name, Binding, Link, Notice, TermFence};
use crate::metrics::Outcome;
use crate::runner::{
    Answer, Control as AnyControl, Execute, Input, Obeyed, Ran, Runner, Statement, REAP_EVERY,
};

/// The runner of a task: each lease's work behind its gate, whose terms
/// carry fences of type `F`.
pub(crate) type TaskRunner<F> = Runner<Gate<F>>;

/// The most recent error, shared with the handle (transient errors are
/// retried, so they are only visible here and in the logs).
pub(crate) type LastError<E> = Arc<Mutex<Option<E>>>;

/// What a handle says to its task: the drivers' one [`AnyControl`], with
/// no message of the task's own.
pub(crate) type Control<F> = AnyControl<GatedTask<F>>;

/// Everything the task owns.
pub(crate) struct Task<L: Link, F> {
    pub(crate) runner: TaskRunner<F>,
    pub(crate) link: Arc<L>,
    pub(crate) notices: Option<mpsc::Receiver<Notice>>,
    pub(crate) listener: Option<tokio::task::JoinHandle<()>>,
    pub(crate) inbox: mpsc::UnboundedReceiver<Control<F>>,
    /// How long the connections stay open after a release freed rows
    /// (`DEFAULT_LINGER`).
    pub(crate) linger: Duration,
    /// The last statement's error, cleared by one that succeeds.
    pub(crate) last_error: LastError<L::Error>,
}

/// A statement running on the statement connection: its id, what it
/// runs, and its answer to come with the error behind a failed one.
type InFlight<E> = (RequestId, Ran, BoxFuture<'static, (Answer, Option<E>)>);

/// The answer of the statement in flight; pending while there is none.
async fn outcome<E>(in_flight: &mut Option<InFlight<E>>) -> (Answer, Option<E>) {
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

/// The task: see the module docs.
pub(crate) async fn run<L: Link, F: TermFence>(task: Task<L, F>) -> Result<(), L::Error> {
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
        lease: runner
            .engine
            .row_lease()
            .map_or_else(Default::default, |lease| lease.as_str().into()),
        holder: me.clone(),
        ttl_millis: config.ttl_millis(),
        stale_millis: runner.engine.stale_millis(),
        timeout,
        successor: "".into(),
        reservation_millis: config.reservation_millis(),
        candidacy: runner.engine.announcement().into(),
    };
    // At most one: the engine asks for a statement only once the last one
    // was answered (the answer was taken from here) or given up on (its
    // `Cancel` comes first in the same `carry_out`, and drops it).
    let mut in_flight: Option<InFlight<L::Error>> = None;
    let mut fatal = None;
    let mut handle_gone = false;
    // A release freed rows: successors may be acquiring them.
    let mut released = false;
    runner.handle(Input::Timeout);
    loop {
        let carried = runner.carry_out();
        if let Some(request) = carried.cancel {
            if let Some((_, ran, future)) = in_flight.take_if(|(r, _, _)| *r == request) {
                drop(future);
                tracing::warn!(
                    during = ran_name(ran),
                    ?timeout,
                    "picolease: statement timed out; cancelling it and reconnecting"
                );
                let error = link.abandon(ran, timeout);
                *last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
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
            let lone_row = matches!(statement, Statement::Row(_)) && !runner.engine.is_set();
            let stopped = lone_row.then(|| {
                let stopped: Vec<_> = runner.gates().map(|gate| gate.stopped()).collect();
                futures::future::join_all(stopped).map(drop).boxed()
            });
            let ran = Ran::of(&statement);
            let binding = match (runner.engine.successor(), runner.engine.is_set()) {
                ("", false) => binding.clone(),
                (successor, set) => Binding {
                    successor: successor.into(),
                    // A set's hand-over binds its lease.
                    lease: match runner.engine.row_lease().filter(|_| set) {
                        Some(lease) => lease.as_str().into(),
                        None => Arc::clone(&binding.lease),
                    },
                    ..binding.clone()
                },
            };
            let execute = Arc::clone(&link).execute(binding, statement);
            let future = async move {
                // The request timeout starts once the statement can be sent.
                if let Some(stopped) = stopped {
                    stopped.await;
                }
                execute.await
            };
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
                    Some(Control::SHUTDOWN)
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
        match control.map(|control| runner.obey(control)) {
            Some(Obeyed::Abort) => {
                tracing::warn!(holder = %me, "picolease: aborting without releasing");
                break;
            }
            Some(Obeyed::Loop(never)) => match never {},
            Some(Obeyed::Done) | None => {}
        }
        if let Some(first) = notice {
            take_notices(&mut runner, first, notices.as_mut());
        }
        runner.reap();
        runner.handle(Input::Timeout);
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
        (
            Ran::Row(Operation::Release { .. } | Operation::HandOver { .. }),
            Answer::Row(Reply::Accepted),
        ) => true,
        (Ran::Batch(BatchKind::Release), Answer::Batch(BatchReply::Matched(names))) => {
            !names.is_empty()
        }
        _ => false,
    }
}

/// Notifications come in bursts (a node giving up its surplus frees
/// hundreds of leases in one commit): take every one already here, and let
/// the engine plan once for all of them.
fn take_notices<F: TermFence>(
    runner: &mut TaskRunner<F>,
    first: Notice,
    mut more: Option<&mut mpsc::Receiver<Notice>>,
) {
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
        runner.handle(Input::ReleaseNotices(released));
    }
    if lost {
        runner.handle(Input::NoticesLost);
    }
}
