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

    /// Time left before the term's deadline (zero once it has passed or
    /// the term is over), on the suspend-aware clock; renewals push it
    /// back.
    pub fn time_left(&self) -> Duration {
        self.deadline().map_or(Duration::ZERO, |at| {
            at.saturating_sub(crate::clock::boottime())
        })
    }

    /// True once the work must stop: the driver stopped it (lost, given
    /// up, shut down), or its deadline has passed, which this reads
    /// itself, as the single lease's `LeaderContext::is_cancelled` does:
    /// the set's thread may be blocked in a batch, and work that polls
    /// this in a loop must still stop by the deadline.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled() || self.time_left().is_zero()
    }

    /// Sleeps up to `timeout`, waking at once when the term ends or its
    /// deadline passes; true if the work must stop.
    pub fn sleep(&self, timeout: Duration) -> bool {
        let until = std::time::Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            let to_deadline = self.time_left();
            if to_deadline.is_zero() {
                return true;
            }
            let step = left.min(to_deadline);
            if self.cancellation.wait_timeout(step) {
                return true;
            }
            if step == left {
                return self.is_cancelled();
            }
        }
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
    /// When the batch in flight was handed to the driver, and its kind.
    handed_out: Option<(std::time::Instant, picolease_core::BatchKind)>,
}

/// A batch for the driver to run, as the set asked for it.
#[derive(Debug)]
pub(crate) struct Execute {
    /// The id to answer with ([`SetRunner::reply`]).
    pub(crate) request: RequestId,
    /// What to run.
    pub(crate) batch: Batch,
    /// When the statement must have ended by, on the set's clock
    /// ([`SetCommand::Execute`]).
    pub(crate) end_by: Instant,
}

/// What one [`SetRunner::carry_out`] leaves to the driver.
#[derive(Debug, Default)]
pub(crate) struct Carried {
    /// The next batch to run.
    pub(crate) execute: Option<Execute>,
    /// The batch the set gave up on (past its request timeout): the
    /// driver cancels it on the server and forgets it; its result, should
    /// it still come, would be ignored by the set.
    pub(crate) cancel: Option<RequestId>,
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
    /// for the driver to run (at most one is ever outstanding) with the
    /// batch the set gave up on, if any, and stamps the loop's progress
    /// ([`SetStatus::last_step`]).
    pub(crate) fn carry_out(&mut self) -> Carried {
        while self.wedge.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut carried = Carried::default();
        while let Some(command) = self.set.poll_command() {
            match command {
                SetCommand::Execute {
                    request,
                    batch,
                    end_by,
                } => {
                    self.status
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .statements += 1;
                    self.handed_out = Some((std::time::Instant::now(), batch.kind));
                    carried.execute = Some(Execute {
                        request,
                        batch,
                        end_by,
                    });
                }
                SetCommand::Cancel { request } => {
                    if carried
                        .execute
                        .as_ref()
                        .is_some_and(|e| e.request == request)
                    {
                        carried.execute = None;
                    } else {
                        carried.cancel = Some(request);
                    }
                    if let Some((_, kind)) = self.handed_out.take() {
                        #[cfg(feature = "metrics")]
                        crate::metrics::set::batch_timed_out(kind);
                        #[cfg(not(feature = "metrics"))]
                        let _ = kind;
                    }
                }
                SetCommand::StartWork { lease, epoch } => self.start_work(lease, epoch),
                SetCommand::StopWork { lease, .. } => self.stop_work(lease),
                SetCommand::Publish { lease, leadership } => {
                    tracing::info!(lease = %lease, holder = %self.holder, ?leadership, "leadership changed");
                    #[cfg(feature = "metrics")]
                    crate::metrics::set::leadership(&lease, &leadership);
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
        crate::metrics::set::share(status.held.len(), status.target, status.members.len());
        let mut deadlines = self.deadlines.lock().unwrap_or_else(|p| p.into_inner());
        deadlines.clear();
        for (lease, &epoch) in &status.held {
            if let Some(at) = self.boottime_deadline(lease) {
                deadlines.insert(lease.clone(), (epoch, at));
            }
        }
        drop(deadlines);
        drop(status);
        carried
    }

    /// How long from now until `end_by` (an instant of the set's clock):
    /// what a blocking driver cuts its waits to.
    pub(crate) fn time_until(&self, end_by: Instant) -> Duration {
        end_by.saturating_duration_since(self.now())
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
            .map_or(Duration::ZERO, |(at, _)| at.elapsed());
        #[cfg(feature = "metrics")]
        crate::metrics::set::batch(kind, elapsed, &reply);
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

    /// The guarantee that does not rest on the set's loop (which may be
    /// blocked in a batch): the work reads its deadline itself, so a work
    /// that sleeps and a work that polls in a busy loop both stop at the
    /// deadline although nobody cancels them.
    #[test]
    fn set_work_stops_at_its_deadline_with_nobody_cancelling_it() {
        let lease = LeaseName::new("a").unwrap();
        let holder = HolderId::new("me").unwrap();
        let epoch = Epoch::new(3);
        let context = |deadlines: &Deadlines| SetLeaderContext {
            term: Term::new(lease.clone(), holder.clone(), epoch),
            lease: lease.clone(),
            holder: holder.clone(),
            epoch,
            cancellation: Cancellation::default(),
            deadlines: Arc::clone(deadlines),
        };
        let deadlines = Deadlines::default();
        let set_deadline = |after: Duration| {
            let at = crate::clock::boottime() + after;
            deadlines.lock().unwrap().insert(lease.clone(), (epoch, at));
            at
        };

        let at = set_deadline(Duration::from_millis(40));
        let sleeper = context(&deadlines);
        assert!(!sleeper.is_cancelled());
        assert!(sleeper.time_left() > Duration::ZERO);
        assert!(sleeper.time_left() <= Duration::from_millis(40));
        assert!(sleeper.sleep(Duration::from_secs(3600)), "woken as ended");
        assert!(crate::clock::boottime() >= at, "not before the deadline");
        assert!(sleeper.is_cancelled());
        assert_eq!(sleeper.time_left(), Duration::ZERO);
        assert!(!sleeper.cancellation.is_cancelled(), "nobody cancelled it");

        let at = set_deadline(Duration::from_millis(40));
        let poller = context(&deadlines);
        let mut spins = 0u64;
        while !poller.is_cancelled() {
            spins += 1;
        }
        assert!(crate::clock::boottime() >= at);
        assert!(spins > 0, "it polled before the deadline");

        // Another term's deadline, or none, is no time left for this one.
        deadlines.lock().unwrap().insert(
            lease.clone(),
            (
                Epoch::new(4),
                crate::clock::boottime() + Duration::from_secs(60),
            ),
        );
        assert!(context(&deadlines).is_cancelled());
        deadlines.lock().unwrap().clear();
        let over = context(&deadlines);
        assert!(over.is_cancelled());
        assert!(over.sleep(Duration::from_secs(3600)));
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
        assert!(
            runner.carry_out().execute.is_some(),
            "the first batch goes out"
        );
        let stepped = view.get();
        assert!(stepped.last_step.unwrap() > first);
        assert!(stepped.since_progress() < started.stall_after);
        assert!(!stepped.is_wedged());
    }
}
