//! `SetRunner`: carries a `LeaseSet`'s commands out for either driver.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use picolease_core::{Batch, Epoch, HolderId, Instant, LeaseName, LeaseSet, RequestId, SetCommand};

use super::context::{Deadlines, SetLeaderContext};
use super::status::{Leaderships, SetStatus, SetView, SharedStatus};
use super::{SetTransition, SetWork};
use crate::cancellation::Cancellation;
use crate::view::Term;

struct LeaseWork {
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
    running: HashMap<LeaseName, LeaseWork>,
    /// Work told to stop whose threads have not all returned yet.
    stopping: Vec<(LeaseName, Vec<JoinHandle<()>>)>,
    events: mpsc::Sender<SetTransition>,
    status: SharedStatus,
    /// Each lease's last publication, for `leadership(lease)`.
    leaderships: Leaderships,
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
    pub(crate) fn new(set: LeaseSet, works: Vec<SetWork>) -> (Self, SetView) {
        let (events, transitions) = mpsc::channel();
        let status = SharedStatus::new(Mutex::new(SetStatus {
            me: Some(set.config().holder.clone()),
            last_step: Some(std::time::Instant::now()),
            stall_after: crate::publish::stall_after(set.config()),
            ..SetStatus::default()
        }));
        let wedge = Arc::default();
        // Every lease of the set is known from the start, as a lone
        // lease's `leadership()` is: unknown until a step tells.
        let leaderships = Leaderships::new(Mutex::new(
            set.leases()
                .map(|lease| (lease.clone(), picolease_core::Leadership::unknown()))
                .collect(),
        ));
        let outputs = SetView {
            status: Arc::clone(&status),
            wedge: Arc::clone(&wedge),
            leaderships: Arc::clone(&leaderships),
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
            leaderships,
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
                    self.leaderships
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(lease.clone(), leadership.clone());
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
            LeaseWork {
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

    use crate::set::test_template as template;

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
