//! The driver loop: one tokio task owning one `LeaseState`.
//!
//! It waits on whichever comes first — the machine's next wake-up, the
//! statement in flight, a release notification, a control message — feeds
//! it to the machine, and carries out the commands the machine emits, in
//! order. It holds no election logic: every decision is the core's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use picolease_core::sql::{Cell, Statements};
use picolease_core::{Command, Failure, Instant, LeaseState, Operation, Reply, RequestId, Role};
use tokio::sync::mpsc;

use super::error::PgError;
use super::gate::{Gate, GatedTask};
use super::link::{operation_name, Call, Link};
use crate::metrics::Outcome;
use crate::publish::Publisher;

/// Messages from the handle to the loop.
pub(crate) enum Control {
    /// Add a gated task (started at once if leading).
    AddTask(GatedTask),
    /// Stop: gated work, then release, then finish.
    Shutdown,
}

/// The statement in flight (the core allows at most one).
struct InFlight {
    request: RequestId,
    operation: Operation,
    /// When the driver issued it (for the renew latency figures).
    issued: std::time::Instant,
    future: BoxFuture<'static, Result<Vec<Vec<Cell>>, PgError>>,
}

/// The most recent error, shared with the handle (transient errors are
/// retried, so they are only visible here and in the logs).
pub(crate) type LastError = Arc<Mutex<Option<PgError>>>;

pub(crate) struct Driver {
    pub(crate) lease: LeaseState,
    /// Local monotonic time zero: the core's `Instant`s are nanoseconds
    /// since this.
    pub(crate) origin: Duration,
    pub(crate) statements: Arc<Statements>,
    pub(crate) link: Arc<Link>,
    pub(crate) gate: Gate,
    pub(crate) lease_name: Arc<str>,
    pub(crate) holder: Arc<str>,
    pub(crate) publisher: Arc<Publisher>,
    pub(crate) notices: Option<mpsc::Receiver<super::notify::Notice>>,
    pub(crate) control: mpsc::UnboundedReceiver<Control>,
    pub(crate) last_error: LastError,
    pub(crate) listener: Option<tokio::task::JoinHandle<()>>,
    /// How long the connections stay open after a release freed the row.
    pub(crate) linger: Duration,
    /// A release freed the row: a successor may be acquiring it now.
    pub(crate) released: bool,
}

/// However the loop ends (finished, or its task aborted or dropped with
/// the runtime), subscribers learn that nothing more will come.
impl Drop for Driver {
    fn drop(&mut self) {
        self.publisher.set_deadline(None);
        self.publisher.finish();
    }
}

impl Driver {
    fn now(&self) -> Instant {
        let elapsed = self.publisher.now().saturating_sub(self.origin);
        Instant::from_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The leader's deadline, handed to the publisher on its clock so gated
    /// tasks can read it without this task.
    fn publish_deadline(&self) {
        let deadline = self
            .lease
            .leader_deadline()
            .map(|at| self.origin + Duration::from_nanos(at.as_nanos()));
        self.publisher.set_deadline(deadline);
    }

    /// Runs until the machine finishes; returns the fatal error that
    /// finished it, if any.
    pub(crate) async fn run(mut self) -> Result<(), PgError> {
        let mut in_flight: Option<InFlight> = None;
        let mut fatal: Option<PgError> = None;
        let mut control_open = true;
        let now = self.now();
        self.lease.handle_timeout(now);
        loop {
            // Before any command: gated tasks started below read it.
            self.publish_deadline();
            self.carry_out(&mut in_flight);
            if self.lease.is_finished() {
                break;
            }
            // Sleeps run on the monotonic clock, which stops during
            // suspend: a bounded sleep re-reads the suspend-aware clock soon
            // after a resume.
            let wait = self.lease.poll_timeout().map(|wake| {
                wake.saturating_duration_since(self.now())
                    .min(crate::clock::LONGEST_WAIT)
            });
            tokio::select! {
                control = self.control.recv(), if control_open => match control {
                    Some(Control::AddTask(task)) => self.gate.add(task),
                    Some(Control::Shutdown) | None => {
                        // A dropped handle shuts down like an explicit call.
                        control_open = false;
                        let now = self.now();
                        self.lease.handle_shutdown(now);
                    }
                },
                result = reply_of(&mut in_flight) => {
                    let Some(InFlight { request, operation, issued, .. }) = in_flight.take() else {
                        continue;
                    };
                    let reply = self.reply(operation, result, &mut fatal);
                    self.publisher.record_statement(operation, issued.elapsed(), match reply {
                        Reply::Failed(Failure::Fatal) => Outcome::Fatal,
                        Reply::Failed(Failure::Transient) => Outcome::Transient,
                        _ => Outcome::Answered,
                    });
                    let accepted_renew = matches!((operation, &reply), (Operation::Renew { .. }, Reply::Accepted));
                    if matches!((operation, &reply), (Operation::Release { .. }, Reply::Accepted)) {
                        self.released = true;
                    }
                    let now = self.now();
                    self.lease.handle_reply(now, request, reply);
                    if accepted_renew {
                        self.publisher.record_renewal(issued.elapsed());
                    }
                }
                () = tokio::time::sleep(wait.unwrap_or(crate::clock::LONGEST_WAIT)), if wait.is_some() => {
                    let now = self.now();
                    self.lease.handle_timeout(now);
                }
                notice = next_notice(&mut self.notices) => match notice {
                    // Its row was released, or notices may have been lost
                    // while the listener was down: try at once.
                    Some(_) => {
                        let now = self.now();
                        self.lease.handle_release_notice(now);
                    }
                    None => self.notices = None,
                },
            }
        }
        if self.released && !self.linger.is_zero() {
            // Closing both connections now would have the server tear two
            // backends down while the successor acquires (DEFAULT_LINGER).
            tokio::time::sleep(self.linger).await;
        }
        if let Some(listener) = self.listener.take() {
            listener.abort();
        }
        // The core stopped every term it started; make sure their tasks
        // have finished before reporting done.
        self.gate.stop_all().await;
        match fatal {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Interprets a statement's outcome as the core's `Reply`.
    fn reply(
        &self,
        operation: Operation,
        result: Result<Vec<Vec<Cell>>, PgError>,
        fatal: &mut Option<PgError>,
    ) -> Reply {
        let decoded = result.and_then(|rows| {
            self.statements
                .decode_reply(operation, &self.lease.config().holder, &rows)
                .map_err(|source| PgError::Row {
                    table: self.statements.table().to_string(),
                    source: source.for_lease(&self.lease_name),
                })
        });
        match decoded {
            Ok(reply) => {
                *self.last_error() = None;
                reply
            }
            Err(e) => {
                let failure = e.failure();
                match failure {
                    Failure::Fatal => {
                        tracing::error!(error = %e, lease = %self.lease_name, "picolease: giving up");
                        *fatal = Some(e.clone());
                    }
                    Failure::Transient => {
                        tracing::warn!(error = %e, lease = %self.lease_name, "picolease: statement failed, will retry");
                    }
                }
                *self.last_error() = Some(e);
                Reply::Failed(failure)
            }
        }
    }

    fn last_error(&self) -> std::sync::MutexGuard<'_, Option<PgError>> {
        self.last_error.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drains the machine's commands and carries them out, in order.
    fn carry_out(&mut self, in_flight: &mut Option<InFlight>) {
        while let Some(command) = self.lease.poll_command() {
            match command {
                Command::Execute { request, operation } => {
                    let timeout = self.lease.config().request_timeout;
                    let call = Call {
                        operation,
                        lease: self.lease_name.clone(),
                        holder: self.holder.clone(),
                        ttl_millis: self.lease.config().ttl_millis(),
                        deadline: tokio::time::Instant::now() + timeout,
                        timeout,
                    };
                    let link = self.link.clone();
                    // Stopped work finishes before the next statement: on
                    // shutdown, that puts the release after the work. The
                    // statement's own time starts once it can be sent (the
                    // core allows a shutdown's release to wait for the work
                    // until the ended term's deadline).
                    let stopped = self.gate.stopped();
                    let future = async move {
                        stopped.await;
                        let call = Call {
                            deadline: tokio::time::Instant::now() + call.timeout,
                            ..call
                        };
                        link.execute(call).await
                    };
                    *in_flight = Some(InFlight {
                        request,
                        operation,
                        issued: std::time::Instant::now(),
                        future: future.boxed(),
                    });
                }
                Command::Cancel { request } => {
                    let Some(abandoned) = in_flight.take_if(|f| f.request == request) else {
                        continue;
                    };
                    let timeout = self.lease.config().request_timeout;
                    let during = operation_name(abandoned.operation);
                    tracing::warn!(during, ?timeout, lease = %self.lease_name, "picolease: statement timed out; cancelling it and reconnecting");
                    *self.last_error() = Some(PgError::Timeout {
                        during,
                        after: timeout,
                    });
                    self.publisher.record_statement(
                        abandoned.operation,
                        abandoned.issued.elapsed(),
                        Outcome::Timeout,
                    );
                    drop(abandoned);
                    if let Some(token) = self.link.abandon() {
                        let cancel = self.link.connector().cancel(token);
                        // Never waited for: the server may be unreachable.
                        tokio::spawn(async move {
                            let _ = tokio::time::timeout(timeout, cancel).await;
                        });
                    }
                }
                Command::StartWork { epoch } => self.gate.start(epoch),
                Command::StopWork { epoch, reason } => {
                    tracing::info!(epoch = epoch.get(), reason = reason.as_str(), lease = %self.lease_name, "picolease: stopping gated work");
                    self.gate.stop(epoch);
                }
                Command::Publish(leadership) => {
                    if leadership.role == Role::Leader {
                        tracing::info!(epoch = ?leadership.epoch.map(|e| e.get()), lease = %self.lease_name, "picolease: leading");
                    }
                    self.publisher.publish(leadership);
                }
                Command::Finished => {
                    tracing::debug!(lease = %self.lease_name, "picolease: driver finished");
                }
            }
        }
    }
}

/// The outcome of the statement in flight; pending while there is none.
async fn reply_of(in_flight: &mut Option<InFlight>) -> Result<Vec<Vec<Cell>>, PgError> {
    match in_flight {
        Some(f) => (&mut f.future).await,
        None => std::future::pending().await,
    }
}

/// The next release notice; pending forever without a listener.
async fn next_notice(
    notices: &mut Option<mpsc::Receiver<super::notify::Notice>>,
) -> Option<super::notify::Notice> {
    match notices {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
