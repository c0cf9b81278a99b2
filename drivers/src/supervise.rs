//! Supervised work (DESIGN §5 "Work that fails") on the drivers' side: a
//! gated task's end is an outcome. A panic or an error return is a
//! failure; the core's [`Supervisor`] says whether to start the work
//! again after a backoff or, past the restart intensity, to escalate,
//! which this sends to the driver's loop as
//! [`Input::WorkEscalated`]: the core moves the lease. A normal return
//! means the work is done for this term; it is not started again until
//! the next term.

use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picolease_core::engine::Input;
use picolease_core::supervision::{Supervisor, Verdict};
use picolease_core::{Epoch, Instant, LeaseName};

pub use picolease_core::supervision::RestartPolicy;

use crate::lock::lock;

/// What a gated task may return: `()` (it never fails but by a panic) or
/// `Result<(), E>` (an `Err` is a failure, named by its `Display`).
pub trait WorkOutcome: Send + 'static {
    /// The failure this outcome is, if it is one.
    fn into_failure(self) -> Option<String>;
}

impl WorkOutcome for () {
    fn into_failure(self) -> Option<String> {
        None
    }
}

impl<E: std::fmt::Display + Send + 'static> WorkOutcome for Result<(), E> {
    fn into_failure(self) -> Option<String> {
        self.err().map(|e| e.to_string())
    }
}

/// The text of a caught panic.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_string());
    format!("panicked: {text}")
}

/// Posts an input to the driver's loop.
type Post = Box<dyn Fn(Input) + Send + Sync>;

/// Where a gate's escalation goes: the driver's loop, connected once the
/// loop runs (an escalation before that waits here). It holds no strong
/// reference to the loop's channel, so a dropped handle still closes it
/// (the loop shuts down then).
#[derive(Clone, Default)]
pub(crate) struct Mailbox(Arc<Mutex<MailboxState>>);

#[derive(Default)]
struct MailboxState {
    post: Option<Post>,
    /// Posted before the loop was connected.
    waiting: Vec<Input>,
}

impl Mailbox {
    /// Connects the mailbox to the loop and hands it what waited.
    pub(crate) fn connect(&self, post: impl Fn(Input) + Send + Sync + 'static) {
        let mut state = lock(&self.0);
        for input in state.waiting.drain(..) {
            post(input);
        }
        state.post = Some(Box::new(post));
    }

    /// Sends `input` to the loop, or keeps it until the loop is connected.
    fn post(&self, input: Input) {
        let mut state = lock(&self.0);
        match &state.post {
            Some(post) => post(input),
            None => state.waiting.push(input),
        }
    }
}

/// One lease's supervised work on this node, across its terms.
pub(crate) struct Supervision {
    lease: LeaseName,
    supervisor: Mutex<Supervisor>,
    /// The supervisor's time zero.
    base: std::time::Instant,
    mailbox: Mailbox,
}

impl Supervision {
    /// `lease`'s supervision under `policy`, escalating through `mailbox`.
    pub(crate) fn new(lease: LeaseName, policy: RestartPolicy, mailbox: Mailbox) -> Arc<Self> {
        #[cfg(feature = "metrics")]
        metrics::counter!("picolease_work_failures_total", "lease" => lease.as_str().to_string())
            .absolute(0);
        Arc::new(Supervision {
            lease,
            supervisor: Mutex::new(Supervisor::new(policy)),
            base: std::time::Instant::now(),
            mailbox,
        })
    }

    /// The work of term `epoch` failed (`why`). Returns how long to wait
    /// before starting it again in the same term: the backoff, or after an
    /// escalation (the loop told) the longest backoff, since a degraded
    /// leader that keeps the lease (no healthy node to take it) must still
    /// try its work (DESIGN §5).
    pub(crate) fn failed(&self, epoch: Epoch, why: &str) -> Duration {
        #[cfg(feature = "metrics")]
        metrics::counter!("picolease_work_failures_total", "lease" => self.lease.as_str().to_string())
            .increment(1);
        let now =
            Instant::from_nanos(u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX));
        let mut supervisor = lock(&self.supervisor);
        let policy = *supervisor.policy();
        match supervisor.work_failed(now) {
            Verdict::Restart { at, restarts } => {
                let wait = at.saturating_duration_since(now);
                tracing::warn!(
                    lease = self.lease.as_str(),
                    epoch = epoch.get(),
                    restarts,
                    failure = why,
                    "picolease: the gated work failed; starting it again in {wait:?}"
                );
                wait
            }
            Verdict::Escalate => {
                tracing::error!(
                    lease = self.lease.as_str(),
                    epoch = epoch.get(),
                    failure = why,
                    intensity = policy.intensity,
                    period = ?policy.period,
                    "picolease: the gated work failed more often than its restart policy allows; handing the lease over and standing aside for {:?}",
                    policy.cool_down
                );
                self.mailbox.post(Input::WorkEscalated {
                    lease: Some(self.lease.clone()),
                    epoch: Some(epoch),
                    cool_down: policy.cool_down,
                });
                policy.max_backoff
            }
        }
    }
}

/// A health probe of the async drivers: resolves `Ok` when healthy, else
/// `Err` with the reason.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub type AsyncProbe =
    Probe<Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<(), String>> + Send + Sync>>;

/// A health probe of the SQLite driver: a blocking closure.
#[cfg(feature = "sqlite")]
pub type BlockingProbe = Probe<Arc<dyn Fn() -> Result<(), String> + Send + Sync>>;

/// A health probe (DESIGN §5 "Work that fails"): `check`, run every
/// `every`, each run given at most `timeout` (one that takes longer is a
/// failure). Each change of its verdict is an input of the core
/// ([`Input::Health`]); the first verdict is one too.
#[derive(Clone)]
pub struct Probe<C> {
    pub(crate) check: C,
    pub(crate) every: Duration,
    pub(crate) timeout: Duration,
}

impl<C> std::fmt::Debug for Probe<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("every", &self.every)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Tells the loop a probe's verdict when it changes; false once the loop
/// is gone (the probe then stops).
pub(crate) struct Verdicts<P> {
    post: P,
    last: Option<bool>,
    lease: String,
}

impl<P: Fn(Input) -> bool> Verdicts<P> {
    /// Verdicts about `lease` (a lone lease's name, or what a set's loop
    /// runs), posted through `post`.
    pub(crate) fn new(lease: &str, post: P) -> Self {
        Verdicts {
            post,
            last: None,
            lease: lease.to_string(),
        }
    }

    /// The probe said `verdict`; false once the loop is gone. Every
    /// verdict is posted (an unchanged one changes nothing in the core),
    /// so a probe learns at once that its loop is gone; a change is logged
    /// and set on the gauge.
    pub(crate) fn heard(&mut self, verdict: Result<(), String>) -> bool {
        let healthy = verdict.is_ok();
        if self.last == Some(healthy) {
            return (self.post)(Input::Health { healthy });
        }
        self.last = Some(healthy);
        match &verdict {
            Ok(()) => tracing::info!(lease = %self.lease, "picolease: the health probe passes"),
            Err(reason) => {
                tracing::warn!(lease = %self.lease, reason = %reason, "picolease: the health probe fails")
            }
        }
        #[cfg(feature = "metrics")]
        metrics::gauge!("picolease_healthy", "lease" => self.lease.clone()).set(if healthy {
            1.0
        } else {
            0.0
        });
        (self.post)(Input::Health { healthy })
    }
}

/// Runs an async probe until the loop is gone.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn run_async_probe(
    probe: AsyncProbe,
    mut verdicts: Verdicts<impl Fn(Input) -> bool>,
) {
    loop {
        let verdict = match tokio::time::timeout(probe.timeout, (probe.check)()).await {
            Ok(verdict) => verdict,
            Err(_) => Err(format!("the probe took longer than {:?}", probe.timeout)),
        };
        if !verdicts.heard(verdict) {
            return;
        }
        tokio::time::sleep(probe.every).await;
    }
}

/// Runs a blocking probe on its own thread until the loop is gone: each
/// run on a thread of its own, so that one that hangs past its timeout
/// counts as a failure and the next still runs.
#[cfg(feature = "sqlite")]
pub(crate) fn run_blocking_probe(
    probe: BlockingProbe,
    mut verdicts: Verdicts<impl Fn(Input) -> bool + Send + 'static>,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("picolease-probe-{}", verdicts.lease))
        .spawn(move || {
            // A run that outlived its timeout: no new run starts (one
            // thread at most hangs in `check`) until it returns.
            let mut hung: Option<std::sync::mpsc::Receiver<Result<(), String>>> = None;
            loop {
                let verdict = match hung.as_ref().map(|rx| rx.try_recv()) {
                    Some(Err(std::sync::mpsc::TryRecvError::Empty)) => Err(format!(
                        "the probe has not returned, {:?} after its timeout",
                        probe.timeout
                    )),
                    _ => {
                        hung = None;
                        let (tx, rx) = std::sync::mpsc::channel();
                        let check = Arc::clone(&probe.check);
                        let _ = std::thread::Builder::new()
                            .name("picolease-probe-run".into())
                            .spawn(move || {
                                let _ = tx.send(check());
                            });
                        match rx.recv_timeout(probe.timeout) {
                            Ok(verdict) => verdict,
                            Err(_) => {
                                hung = Some(rx);
                                Err(format!("the probe took longer than {:?}", probe.timeout))
                            }
                        }
                    }
                };
                if !verdicts.heard(verdict) {
                    return;
                }
                std::thread::sleep(probe.every);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("picolease: cannot start the health probe's thread: {e}");
    }
}

/// A probe built from its parts, refused when its timings cannot work.
pub(crate) fn probe<C>(check: C, every: Duration, timeout: Duration) -> Probe<C> {
    Probe {
        check,
        every: every.max(Duration::from_millis(1)),
        timeout: timeout.max(Duration::from_millis(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_escalation_before_the_loop_is_connected_waits_for_it() {
        let mailbox = Mailbox::default();
        let escalation = Input::WorkEscalated {
            lease: None,
            epoch: Some(Epoch::new(3)),
            cool_down: Duration::from_secs(1),
        };
        mailbox.post(escalation.clone());
        let heard = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&heard);
        mailbox.connect(move |input| lock(&into).push(input));
        mailbox.post(Input::Health { healthy: true });
        assert_eq!(
            *lock(&heard),
            vec![escalation, Input::Health { healthy: true }]
        );
    }

    #[test]
    fn a_failure_after_the_intensity_escalates_and_waits_the_longest_backoff() {
        let mailbox = Mailbox::default();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&heard);
        mailbox.connect(move |input| lock(&into).push(input));
        let policy = RestartPolicy {
            intensity: 1,
            ..RestartPolicy::default()
        };
        let supervision = Supervision::new(LeaseName::new("l").unwrap(), policy, mailbox);
        let epoch = Epoch::new(2);
        assert_eq!(supervision.failed(epoch, "boom"), policy.backoff);
        assert!(lock(&heard).is_empty());
        assert_eq!(supervision.failed(epoch, "boom"), policy.max_backoff);
        assert_eq!(
            *lock(&heard),
            vec![Input::WorkEscalated {
                lease: Some(LeaseName::new("l").unwrap()),
                epoch: Some(epoch),
                cool_down: policy.cool_down,
            }]
        );
    }
}
