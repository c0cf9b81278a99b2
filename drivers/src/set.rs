//! Lease sets in the drivers (DESIGN §9): the part both databases share.
//!
//! A driver of a set owns one [`LeaseSet`] and one statement connection.
//! `SetRunner` carries the set's commands out (starting and stopping the
//! work of each lease on its own threads, publishing each lease's
//! transitions) and hands the driver the one batch to run; the driver runs
//! it on its connection (SQLite: on its thread; PostgreSQL: in its task)
//! and feeds the result back. Nothing here decides anything.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use picolease_core::{
    Batch, Epoch, HolderId, Instant, Leadership, LeaseName, LeaseSet, RequestId, SetCommand,
};

pub use crate::cancellation::Cancellation;
use crate::view::Term;

/// One lease's change, as a set's driver publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetTransition {
    /// The lease.
    pub lease: LeaseName,
    /// Its new state.
    pub leadership: Leadership,
    /// Wall-clock time of publication.
    pub at: SystemTime,
}

/// Each held lease's deadline on the boot-time clock ([`crate::boottime`]),
/// shared with its work.
type Deadlines = Arc<Mutex<HashMap<LeaseName, (Epoch, Duration)>>>;

/// What gated work of a set is handed when one of its leases' terms
/// starts: the lease, the holder, the epoch (the fencing token: check it
/// in your own writes), the term's deadline and the signal to stop.
#[derive(Clone, Debug)]
pub struct SetLeaderContext {
    /// The lease this work is for.
    pub lease: LeaseName,
    /// This node's holder id.
    pub holder: HolderId,
    /// The term's epoch.
    pub epoch: Epoch,
    /// Set when the term ends (lost, expired, given up, shut down).
    pub cancellation: Cancellation,
    term: Term,
    deadlines: Deadlines,
}

impl SetLeaderContext {
    /// The term (lease, holder, epoch), as single-lease work sees it.
    pub fn term(&self) -> &Term {
        &self.term
    }

    /// The term's current deadline on the boot-time clock
    /// ([`crate::boottime`]), moved forward by each renewal; `None` once
    /// the term is over.
    pub fn deadline(&self) -> Option<Duration> {
        let deadlines = self.deadlines.lock().unwrap_or_else(|p| p.into_inner());
        deadlines
            .get(&self.lease)
            .filter(|(epoch, _)| *epoch == self.epoch)
            .map(|&(_, at)| at)
    }

    /// True once the work must stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled()
    }

    /// Sleeps up to `timeout`; true if the work must stop.
    pub fn sleep(&self, timeout: Duration) -> bool {
        self.cancellation.wait_timeout(timeout)
    }
}

/// Gated work of a set: run on its own thread for each lease this node
/// leads, until the context is cancelled.
pub type SetWork = Arc<dyn Fn(SetLeaderContext) + Send + Sync + 'static>;

/// What a set's handle can read at any time.
#[derive(Clone, Debug, Default)]
pub struct SetStatus {
    /// This node's holder id.
    pub me: Option<HolderId>,
    /// The leases this node leads, with their epochs.
    pub held: BTreeMap<LeaseName, Epoch>,
    /// The live members as of the last step (this node included).
    pub members: Vec<HolderId>,
    /// This node's fair share, once known.
    pub target: Option<usize>,
    /// Statements sent so far.
    pub statements: u64,
    /// True once the set has finished.
    pub finished: bool,
    /// When the set's loop last stepped: the end of its last
    /// `SetRunner::carry_out`, which both drivers call on every pass of
    /// their loop and after every batch's result, so a loop that waits,
    /// runs batches (failed ones too: a database out of reach is not a
    /// wedge) or plans keeps it fresh. On the monotonic clock, as the
    /// single lease's [`crate::Snapshot::since_progress`]: it stops during
    /// a suspend, so a resumed machine is not taken for a wedged loop.
    /// `None` only for a status no driver wrote (`Default`).
    pub last_step: Option<std::time::Instant>,
    /// Past this without a step the loop counts as wedged: interval +
    /// 2 × request timeout + the reconnect backoff's cap (the interval, at
    /// least 100 ms), the single lease's bound
    /// ([`crate::Snapshot::stall_after`]). It holds for a set too: a pass
    /// waits at most for the set's next timeout (while it runs, the next
    /// survey, at most an interval after the last one was sent, or the
    /// batch in flight's give-up, a request timeout after it was sent; and
    /// never more than the drivers' longest wait, 1 s), then runs at most
    /// one batch, bounded by the request timeout.
    pub stall_after: Duration,
}

impl SetStatus {
    /// How long since the set's loop last stepped ([`SetStatus::last_step`]);
    /// zero for a status no driver wrote.
    pub fn since_progress(&self) -> Duration {
        self.since_progress_at(std::time::Instant::now())
    }

    /// True when the loop has not stepped for longer than
    /// [`SetStatus::stall_after`] and the set has not finished (never
    /// merely because this node holds nothing or the database is out of
    /// reach: failed batches are steps too), as the single lease's
    /// [`crate::Snapshot::is_wedged`].
    pub fn is_wedged(&self) -> bool {
        self.is_wedged_at(std::time::Instant::now())
    }

    fn since_progress_at(&self, now: std::time::Instant) -> Duration {
        self.last_step
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at))
    }

    fn is_wedged_at(&self, now: std::time::Instant) -> bool {
        !self.finished && self.since_progress_at(now) > self.stall_after
    }
}

/// The shared state behind a set's handle.
pub(crate) type SharedStatus = Arc<Mutex<SetStatus>>;

/// What a set's handle reads, the same on both drivers: the transitions
/// (taken once) and the status.
#[derive(Debug)]
pub(crate) struct SetOutputs {
    status: SharedStatus,
    wedge: Arc<AtomicBool>,
    transitions: Mutex<Option<mpsc::Receiver<SetTransition>>>,
}

impl SetOutputs {
    pub(crate) fn transitions(&self) -> Option<mpsc::Receiver<SetTransition>> {
        self.transitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    pub(crate) fn status(&self) -> SetStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn status_view(&self) -> SetStatusView {
        SetStatusView(Arc::clone(&self.status), Arc::clone(&self.wedge))
    }
}

/// A cheap, cloneable reader of a set's [`SetStatus`], for threads that
/// do not own the handle (an HTTP endpoint, say).
#[derive(Clone, Debug, Default)]
pub struct SetStatusView(pub(crate) SharedStatus, Arc<AtomicBool>);

impl SetStatusView {
    /// The status as of the set's last step.
    pub fn get(&self) -> SetStatus {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Test seam: blocks the set's loop at its next step, for ever, so
    /// that a health check can be seen to fail (as
    /// [`crate::Snapshots::wedge_loop_for_tests`]). Not for production use.
    #[doc(hidden)]
    pub fn wedge_loop_for_tests(&self) {
        self.1.store(true, Ordering::SeqCst);
    }
}

struct Running {
    cancellation: Cancellation,
    threads: Vec<JoinHandle<()>>,
}

/// Carries a [`LeaseSet`]'s commands out for a driver.
pub(crate) struct SetRunner {
    pub(crate) set: LeaseSet,
    /// The set's time zero on the boot-time clock, which counts suspend.
    origin: Duration,
    deadlines: Deadlines,
    holder: HolderId,
    works: Vec<SetWork>,
    running: HashMap<LeaseName, Running>,
    /// Work told to stop whose threads have not all returned yet.
    stopping: Vec<(LeaseName, Vec<JoinHandle<()>>)>,
    events: mpsc::Sender<SetTransition>,
    status: SharedStatus,
    /// Test seam: set, the loop blocks in its next `carry_out`.
    wedge: Arc<AtomicBool>,
    /// When the batch in flight was handed to the driver.
    handed_out: Option<std::time::Instant>,
}

/// How often a driver looks whether stopping work has returned.
pub(crate) const REAP_EVERY: Duration = Duration::from_millis(5);

impl SetRunner {
    /// A runner for `set` and the outputs its handle reads.
    pub(crate) fn new(set: LeaseSet, works: Vec<SetWork>) -> (Self, SetOutputs) {
        let (events, transitions) = mpsc::channel();
        let status = SharedStatus::new(Mutex::new(SetStatus {
            me: Some(set.config().holder.clone()),
            last_step: Some(std::time::Instant::now()),
            stall_after: crate::publish::stall_after(set.config()),
            ..SetStatus::default()
        }));
        let wedge = Arc::default();
        let outputs = SetOutputs {
            status: Arc::clone(&status),
            wedge: Arc::clone(&wedge),
            transitions: Mutex::new(Some(transitions)),
        };
        let runner = SetRunner {
            holder: set.config().holder.clone(),
            set,
            origin: crate::clock::boottime(),
            deadlines: Deadlines::default(),
            works,
            running: HashMap::new(),
            stopping: Vec::new(),
            events,
            status,
            wedge,
            handed_out: None,
        };
        (runner, outputs)
    }

    /// Now on the set's clock.
    pub(crate) fn now(&self) -> Instant {
        let elapsed = crate::clock::boottime().saturating_sub(self.origin);
        Instant::from_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
    }

    /// How long the driver may wait for an input: until the set's next
    /// timeout, or [`REAP_EVERY`] while work is stopping.
    pub(crate) fn wait(&self) -> Option<Duration> {
        let now = self.now();
        let until = self
            .set
            .poll_timeout()
            .map(|t| t.saturating_duration_since(now));
        match (until, self.stopping.is_empty()) {
            (Some(d), false) => Some(d.min(REAP_EVERY)),
            (None, false) => Some(REAP_EVERY),
            (d, true) => d,
        }
    }

    /// Reports the work that has stopped since the last look.
    pub(crate) fn reap(&mut self) {
        let now = self.now();
        let mut stopped = Vec::new();
        self.stopping.retain_mut(|(lease, threads)| {
            threads.retain(|t| !t.is_finished());
            if threads.is_empty() {
                stopped.push(lease.clone());
                false
            } else {
                true
            }
        });
        for lease in stopped {
            self.set.handle_work_stopped(now, lease.as_str());
        }
    }

    /// Carries out every command up to the next batch, which it returns
    /// for the driver to run (at most one is ever outstanding), and stamps
    /// the loop's progress ([`SetStatus::last_step`]).
    pub(crate) fn carry_out(&mut self) -> Option<(RequestId, Batch)> {
        while self.wedge.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut batch = None;
        while let Some(command) = self.set.poll_command() {
            match command {
                SetCommand::Execute { request, batch: b } => {
                    self.status
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .statements += 1;
                    self.handed_out = Some(std::time::Instant::now());
                    batch = Some((request, b));
                }
                // Statements run to completion (or their timeout) before
                // the next input: nothing to cancel.
                SetCommand::Cancel { .. } => {}
                SetCommand::StartWork { lease, epoch } => self.start_work(lease, epoch),
                SetCommand::StopWork { lease, .. } => self.stop_work(lease),
                SetCommand::Publish { lease, leadership } => {
                    tracing::info!(lease = %lease, holder = %self.holder, ?leadership, "leadership changed");
                    #[cfg(feature = "metrics")]
                    set_metrics::leadership(&lease, &leadership);
                    {
                        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
                        match leadership.leader_epoch() {
                            Some(epoch) => status.held.insert(lease.clone(), epoch),
                            None => status.held.remove(&lease),
                        };
                    }
                    let _ = self.events.send(SetTransition {
                        lease,
                        leadership,
                        at: SystemTime::now(),
                    });
                }
                SetCommand::Finished => {
                    self.status
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .finished = true;
                }
            }
        }
        let now = self.now();
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.last_step = Some(std::time::Instant::now());
        status.members = self.set.members(now);
        status.target = self.set.target(now);
        #[cfg(feature = "metrics")]
        set_metrics::share(status.held.len(), status.target, status.members.len());
        let mut deadlines = self.deadlines.lock().unwrap_or_else(|p| p.into_inner());
        deadlines.clear();
        for (lease, &epoch) in &status.held {
            if let Some(at) = self.boottime_deadline(lease) {
                deadlines.insert(lease.clone(), (epoch, at));
            }
        }
        drop(deadlines);
        drop(status);
        batch
    }

    /// Feeds a batch's result to the set, recording its duration (from
    /// when [`SetRunner::carry_out`] handed it out) and outcome.
    pub(crate) fn reply(
        &mut self,
        request: RequestId,
        kind: picolease_core::BatchKind,
        reply: picolease_core::BatchReply,
    ) {
        let elapsed = self
            .handed_out
            .take()
            .map_or(Duration::ZERO, |at| at.elapsed());
        #[cfg(feature = "metrics")]
        set_metrics::batch(kind, elapsed, &reply);
        #[cfg(not(feature = "metrics"))]
        let _ = (kind, elapsed);
        let now = self.now();
        self.set.handle_reply(now, request, reply);
    }

    /// `lease`'s term deadline on the boot-time clock, as work reads it.
    fn boottime_deadline(&self, lease: &LeaseName) -> Option<Duration> {
        let at = self.set.deadline(lease.as_str())?;
        Some(self.origin + Duration::from_nanos(at.as_nanos()))
    }

    fn start_work(&mut self, lease: LeaseName, epoch: Epoch) {
        self.stop_work(lease.clone());
        let cancellation = Cancellation::default();
        let context = SetLeaderContext {
            term: Term::new(lease.clone(), self.holder.clone(), epoch),
            lease: lease.clone(),
            holder: self.holder.clone(),
            epoch,
            cancellation: cancellation.clone(),
            deadlines: Arc::clone(&self.deadlines),
        };
        // The work reads its deadline as soon as its thread starts: record
        // it now, not only at the end of this step (a work that found none
        // would take its term as already over and never start).
        if let Some(at) = self.boottime_deadline(&lease) {
            self.deadlines
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(lease.clone(), (epoch, at));
        }
        let threads = self
            .works
            .iter()
            .filter_map(|work| {
                let work = Arc::clone(work);
                let context = context.clone();
                std::thread::Builder::new()
                    .name(format!("picolease-work-{lease}"))
                    .spawn(move || work(context))
                    .map_err(|e| tracing::error!(lease = %lease, "could not start the work: {e}"))
                    .ok()
            })
            .collect();
        self.running.insert(
            lease,
            Running {
                cancellation,
                threads,
            },
        );
    }

    fn stop_work(&mut self, lease: LeaseName) {
        match self.running.remove(&lease) {
            Some(running) => {
                running.cancellation.cancel();
                self.stopping.push((lease, running.threads));
            }
            None => self.stopping.push((lease, Vec::new())),
        }
    }

    /// Stops every lease's work and waits for it (the driver's end).
    pub(crate) fn stop_all(&mut self) {
        let leases: Vec<LeaseName> = self.running.keys().cloned().collect();
        for lease in leases {
            self.stop_work(lease);
        }
        for (_, threads) in self.stopping.drain(..) {
            for thread in threads {
                let _ = thread.join();
            }
        }
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.held.clear();
        status.finished = true;
    }
}

/// The statement a batch runs.
pub(crate) fn statement_for(
    statements: &picolease_core::sql::Statements,
    kind: picolease_core::BatchKind,
) -> &picolease_core::sql::Statement {
    use picolease_core::BatchKind;
    match kind {
        BatchKind::Acquire => statements.acquire_batch(),
        BatchKind::Renew => statements.renew_batch(),
        BatchKind::Release => statements.release_batch(),
        BatchKind::Survey => statements.survey(),
    }
}

/// Decodes a batch's rows into the set's reply.
pub(crate) fn decode(
    statements: &picolease_core::sql::Statements,
    kind: picolease_core::BatchKind,
    me: &HolderId,
    rows: &[Vec<picolease_core::sql::Cell>],
) -> Result<picolease_core::BatchReply, picolease_core::RowError> {
    use picolease_core::{BatchKind, BatchReply};
    Ok(match kind {
        BatchKind::Acquire => BatchReply::Acquired(statements.decode_acquire_batch(me, rows)?),
        BatchKind::Renew | BatchKind::Release => BatchReply::Matched(
            statements
                .decode_batch_names(rows)?
                .into_iter()
                .map(|(name, _)| name)
                .collect(),
        ),
        BatchKind::Survey => BatchReply::Survey(statements.decode_survey(rows)?),
    })
}

/// The metrics of lease sets (feature `metrics`), beside the single-lease
/// ones of `crate::metrics`:
///
/// | name | kind | labels | what |
/// | --- | --- | --- | --- |
/// | `picolease_leader` | gauge | `lease` | 1 while this node leads that lease |
/// | `picolease_epoch` | gauge | `lease` | the epoch last held or observed |
/// | `picolease_transitions_total` | counter | `lease`, `to`, `reason` | terms begun and ended, per lease |
/// | `picolease_batch_duration_seconds` | histogram | `statement` = `acquire`\|`renew`\|`release`\|`survey` | one batch, from handing it out to its result |
/// | `picolease_batch_failures_total` | counter | `statement`, `kind` = `transient`\|`fatal` | failed batches |
/// | `picolease_set_held`, `picolease_set_target`, `picolease_set_members` | gauges | | leases held, the fair share, live members |
///
/// Per-lease series appear with the lease's first change (not at zero:
/// a set may have 100,000 leases).
#[cfg(feature = "metrics")]
mod set_metrics {
    use std::time::Duration;

    use picolease_core::{BatchKind, BatchReply, Failure, Leadership, LeaseName};

    pub(super) fn leadership(lease: &LeaseName, leadership: &Leadership) {
        let name = lease.as_str().to_string();
        metrics::gauge!("picolease_leader", "lease" => name.clone())
            .set(if leadership.is_leader() { 1.0 } else { 0.0 });
        if let Some(epoch) = leadership.epoch {
            metrics::gauge!("picolease_epoch", "lease" => name.clone()).set(epoch.get() as f64);
        }
        if leadership.is_leader() {
            metrics::counter!("picolease_transitions_total", "lease" => name, "to" => "leader", "reason" => "acquired")
                .increment(1);
        } else if let Some(reason) = leadership.reason {
            metrics::counter!("picolease_transitions_total", "lease" => name, "to" => "follower", "reason" => reason.as_str())
                .increment(1);
        }
    }

    pub(super) fn share(held: usize, target: Option<usize>, members: usize) {
        metrics::gauge!("picolease_set_held").set(held as f64);
        metrics::gauge!("picolease_set_target").set(target.map_or(0.0, |t| t as f64));
        metrics::gauge!("picolease_set_members").set(members as f64);
    }

    pub(super) fn batch(kind: BatchKind, elapsed: Duration, reply: &BatchReply) {
        let statement = match kind {
            BatchKind::Acquire => "acquire",
            BatchKind::Renew => "renew",
            BatchKind::Release => "release",
            BatchKind::Survey => "survey",
        };
        match reply {
            BatchReply::Failed(failure) => {
                let kind = match failure {
                    Failure::Transient => "transient",
                    Failure::Fatal => "fatal",
                };
                metrics::counter!("picolease_batch_failures_total", "statement" => statement, "kind" => kind)
                    .increment(1);
            }
            _ => metrics::histogram!("picolease_batch_duration_seconds", "statement" => statement)
                .record(elapsed.as_secs_f64()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> picolease_core::Config {
        picolease_core::Config::with_ttl(
            LeaseName::new("unused").unwrap(),
            HolderId::new("me").unwrap(),
            Duration::from_secs(1),
        )
    }

    #[test]
    fn a_set_is_wedged_once_its_loop_has_not_stepped_for_the_bound() {
        let stall_after = crate::publish::stall_after(&template());
        // interval 250 ms + 2 × 250 ms + max(250 ms, 100 ms): the single
        // lease's bound for the same timings.
        assert_eq!(stall_after, Duration::from_millis(1_000));
        let t0 = std::time::Instant::now();
        let status = SetStatus {
            last_step: Some(t0),
            stall_after,
            ..SetStatus::default()
        };
        let healthy = t0 + stall_after;
        assert_eq!(status.since_progress_at(healthy), stall_after);
        assert!(!status.is_wedged_at(t0));
        assert!(!status.is_wedged_at(healthy), "at the bound, still healthy");
        let wedged = healthy + Duration::from_millis(1);
        assert!(status.is_wedged_at(wedged));
        // A step brings it back.
        let stepped = SetStatus {
            last_step: Some(wedged),
            ..status.clone()
        };
        assert!(!stepped.is_wedged_at(wedged + Duration::from_millis(1)));
        // A finished set is stopped, not wedged; a status no driver wrote
        // is neither.
        let finished = SetStatus {
            finished: true,
            ..status.clone()
        };
        assert!(!finished.is_wedged_at(wedged));
        assert_eq!(SetStatus::default().since_progress(), Duration::ZERO);
        assert!(!SetStatus::default().is_wedged());
    }

    #[test]
    fn carry_out_stamps_the_last_step_with_the_sets_bound() {
        let set = LeaseSet::new(
            template(),
            vec![LeaseName::new("a").unwrap(), LeaseName::new("b").unwrap()],
            picolease_core::Instant::ZERO,
        )
        .unwrap();
        let (mut runner, outputs) = SetRunner::new(set, Vec::new());
        let view = outputs.status_view();
        let started = view.get();
        assert_eq!(
            started.stall_after,
            crate::publish::stall_after(&template())
        );
        let first = started.last_step.expect("stamped at the start");
        assert!(!started.is_wedged());
        std::thread::sleep(Duration::from_millis(5));
        let now = runner.now();
        runner.set.handle_timeout(now);
        assert!(runner.carry_out().is_some(), "the first batch goes out");
        let stepped = view.get();
        assert!(stepped.last_step.unwrap() > first);
        assert!(stepped.since_progress() < started.stall_after);
        assert!(!stepped.is_wedged());
    }
}
