//! `Runner`: feeds the core's [`Engine`] its inputs and carries its
//! orders out for either driver: a lone lease's or a set's, on the one
//! loop each database has.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use picolease_core::{Epoch, HolderId, Instant, LeaseName, RequestId};
use tokio::sync::watch;

use crate::clock::SharedClock;
use crate::metrics::Outcome;
use crate::publish::{Health, Publisher, SharedHealth};
use crate::set::SharedSnapshot;
use crate::subscription::Fanout;
use picolease_core::engine::{Engine, Order};

/// The core's engine, which the loops drive through [`Runner`], and
/// what its statements are.
pub(crate) use picolease_core::engine::{Answer, Input, Ran, Statement};

/// One lease of the set: a lone lease's publisher and gate.
struct Member<G> {
    publisher: Arc<Publisher>,
    gate: G,
    /// The deadline last handed to the publisher: a step hands it again
    /// only when it moved (a renewal), which keeps a step cheap when a
    /// node holds thousands of leases.
    published: Option<Duration>,
}

impl<G> Member<G> {
    /// Hands `deadline` to the publisher unless it already has it.
    fn publish_deadline(&mut self, deadline: Option<Duration>) {
        if self.published != deadline {
            self.published = deadline;
            self.publisher.set_deadline(deadline);
        }
    }
}

/// Carries an [`Engine`]'s orders out for a driver.
pub(crate) struct Runner<G> {
    pub(crate) engine: Engine,
    clock: SharedClock,
    /// The set's time zero on `clock`.
    origin: Duration,
    holder: HolderId,
    members: HashMap<LeaseName, Member<G>>,
    /// Leases whose work was told to stop and has not all returned yet.
    stopping: Vec<LeaseName>,
    snapshot: SharedSnapshot,
    /// The loop's health, which every lease's publisher reports.
    health: SharedHealth,
    held: watch::Sender<BTreeMap<LeaseName, Epoch>>,
    fanout: Arc<Fanout>,
    /// Test seam: set, the loop blocks in its next `carry_out`.
    wedge: Arc<AtomicBool>,
    /// When the statement in flight was handed to the driver, and what it
    /// runs.
    handed_out: Option<(std::time::Instant, Ran)>,
    /// What the engine last said of watching for changes.
    watching: bool,
}

/// A statement for the driver to run, as the engine asked for it.
#[derive(Debug)]
pub(crate) struct Execute {
    /// The id to answer with ([`Runner::reply`]).
    pub(crate) request: RequestId,
    /// What to run.
    pub(crate) statement: Statement,
    /// When the statement must have ended by, on the engine's clock (a
    /// leader's deadline, a batch's give-up); `None`: the request timeout.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // the SQLite loop's alone
    pub(crate) end_by: Option<Instant>,
}

/// What one [`Runner::carry_out`] leaves to the driver.
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

impl<G: TermGate> Runner<G> {
    /// Whether the engine asks the driver to look for other connections'
    /// commits ([`picolease_core::Command::WatchChanges`]): SQLite's file
    /// watch or change counter.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // the SQLite loop's alone
    pub(crate) fn watching(&self) -> bool {
        self.watching
    }

    /// Now on the set's clock.
    pub(crate) fn now(&self) -> Instant {
        let elapsed = self.clock.now().saturating_sub(self.origin);
        Instant::from_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
    }

    /// How long the driver may wait for an input: until the set's next
    /// timeout, or [`REAP_EVERY`] while work is stopping.
    pub(crate) fn wait(&self) -> Option<Duration> {
        let now = self.now();
        let until = self
            .engine
            .poll_timeout()
            .map(|t| t.saturating_duration_since(now));
        match (until, self.stopping.is_empty()) {
            (Some(d), false) => Some(d.min(REAP_EVERY)),
            (None, false) => Some(REAP_EVERY),
            (d, true) => d,
        }
    }

    /// Reports the work that has stopped since the last look; true if any
    /// had.
    pub(crate) fn reap(&mut self) -> bool {
        if self.stopping.is_empty() {
            return false;
        }
        let now = self.now();
        let mut stopped = Vec::new();
        let members = &mut self.members;
        self.stopping.retain(|lease| {
            let done = members
                .get_mut(lease)
                .is_none_or(|member| member.gate.has_stopped());
            if done {
                stopped.push(lease.clone());
            }
            !done
        });
        let any = !stopped.is_empty();
        for lease in stopped {
            self.engine.handle(now, Input::WorkStopped(lease));
        }
        any
    }

    /// Carries out every command up to the next batch, which it returns
    /// for the driver to run (at most one is ever outstanding) with the
    /// batch the set gave up on, if any, and stamps the loop's progress
    /// ([`SetSnapshot::last_step`]). Work that stopped at once (none was
    /// running) is reported in the same call.
    pub(crate) fn carry_out(&mut self) -> Carried {
        while self.wedge.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut carried = Carried::default();
        let mut held_changed = false;
        loop {
            while let Some(order) = self.engine.poll_order() {
                held_changed |= self.carry(order, &mut carried);
            }
            if !self.reap() {
                break;
            }
        }
        let now = self.now();
        Health::step(&self.health, false);
        let mut snapshot = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((members, target)) = self.engine.share(now) {
            if members != snapshot.members || target != snapshot.target {
                tracing::debug!(holder = %self.holder, ?target, ?members, "share planned");
            }
            snapshot.members = members;
            snapshot.target = target;
            #[cfg(feature = "metrics")]
            crate::metrics::set::share(
                snapshot.held.len(),
                snapshot.target,
                snapshot.members.len(),
            );
        }
        if held_changed {
            self.held.send_replace(snapshot.held.clone());
        }
        // Each held lease's deadline to its publisher, where its work
        // reads it, when it moved (a lease that stopped being held was
        // given none when its demotion was published).
        let (engine, origin, members) = (&self.engine, self.origin, &mut self.members);
        for lease in snapshot.held.keys() {
            let deadline = engine
                .deadline(lease.as_str())
                .map(|at| origin + Duration::from_nanos(at.as_nanos()));
            if let Some(member) = members.get_mut(lease) {
                member.publish_deadline(deadline);
            }
        }
        drop(snapshot);
        carried
    }

    /// Carries out one order; true if it changed what this node holds.
    fn carry(&mut self, order: Order, carried: &mut Carried) -> bool {
        match order {
            Order::Execute {
                request,
                statement,
                end_by,
            } => {
                self.snapshot
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .statements += 1;
                self.handed_out = Some((std::time::Instant::now(), Ran::of(&statement)));
                carried.execute = Some(Execute {
                    request,
                    statement,
                    end_by,
                });
            }
            Order::Cancel { request } => {
                if carried
                    .execute
                    .as_ref()
                    .is_some_and(|e| e.request == request)
                {
                    carried.execute = None;
                } else {
                    carried.cancel = Some(request);
                }
                if let Some((at, ran)) = self.handed_out.take() {
                    self.record(ran, at.elapsed(), Outcome::Timeout, None);
                }
            }
            Order::StartWork { lease, epoch } => {
                // The work reads its deadline as soon as it starts: publish
                // it now, not only at the end of this step.
                let deadline = self.clock_deadline(&lease);
                if let Some(member) = self.members.get_mut(&lease) {
                    member.publish_deadline(deadline);
                    member.gate.start(epoch);
                }
            }
            Order::StopWork { lease, epoch, .. } => {
                if let Some(member) = self.members.get_mut(&lease) {
                    member.gate.stop(epoch);
                }
                self.stopping.push(lease);
            }
            Order::Publish { lease, leadership } => {
                // Under the target `picolease` whatever module logs it, with
                // fields a log query can select on.
                tracing::info!(
                    target: "picolease",
                    lease = %lease,
                    holder = %self.holder,
                    leader = leadership.is_leader(),
                    epoch = leadership.epoch.map(|e| e.get()),
                    reason = leadership.reason.map(|r| r.as_str()),
                    "{lease}: {leadership}"
                );
                {
                    let mut snapshot = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
                    match leadership.leader_epoch() {
                        Some(epoch) => snapshot.held.insert(lease.clone(), epoch),
                        None => snapshot.held.remove(&lease),
                    };
                }
                // The deadline first: a reader never sees a leader whose
                // deadline it cannot check (it would read it as ended).
                let deadline = self
                    .clock_deadline(&lease)
                    .filter(|_| leadership.is_leader());
                if let Some(member) = self.members.get_mut(&lease) {
                    member.publish_deadline(deadline);
                    member.publisher.publish(leadership);
                }
                return true;
            }
            Order::WatchChanges(on) => self.watching = on,
            Order::Finished => {
                self.snapshot
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .finished = true;
            }
        }
        false
    }

    /// How long from now until `end_by` (an instant of the set's clock):
    /// what a blocking driver cuts its waits to.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // the SQLite loop's alone
    pub(crate) fn time_until(&self, end_by: Instant) -> Duration {
        end_by.saturating_duration_since(self.now())
    }

    /// Feeds a statement's answer to the engine, recording its duration
    /// (from when [`Runner::carry_out`] handed it out) and `outcome`
    /// (how the driver saw it end: answered, failed, interrupted).
    pub(crate) fn reply(&mut self, request: RequestId, answer: Answer, outcome: Outcome) {
        if let Some((at, ran)) = self.handed_out.take() {
            self.record(ran, at.elapsed(), outcome, Some(&answer));
        }
        self.handle(Input::Answer { request, answer });
    }

    /// Feeds `input` to the engine, as of now on the set's clock.
    pub(crate) fn handle(&mut self, input: Input) {
        let now = self.now();
        self.engine.handle(now, input);
    }

    /// `lease`'s term deadline on the set's clock, as its work reads it.
    fn clock_deadline(&self, lease: &LeaseName) -> Option<Duration> {
        let at = self.engine.deadline(lease.as_str())?;
        Some(self.origin + Duration::from_nanos(at.as_nanos()))
    }

    /// Tells every lease's work to stop (the driver's end); the driver then
    /// waits until [`Runner::has_stopped`] and calls
    /// [`Runner::finish`].
    pub(crate) fn stop_all(&mut self) {
        for member in self.members.values_mut() {
            member.publish_deadline(None);
            member.gate.stop_all();
        }
    }

    /// Every lease's gate (to register work on a running set).
    pub(crate) fn gates(&mut self) -> impl Iterator<Item = &mut G> {
        self.members.values_mut().map(|member| &mut member.gate)
    }

    /// True once every lease's work has returned.
    pub(crate) fn has_stopped(&mut self) -> bool {
        self.members
            .values_mut()
            .all(|member| member.gate.has_stopped())
    }

    /// The loop has ended: every subscriber reads what is left, then
    /// `Closed`; the snapshot says finished, holding nothing.
    pub(crate) fn finish(&mut self) {
        self.close();
    }
}

impl<G> Runner<G> {
    /// Closes the output side (idempotent): see [`Runner::finish`].
    fn close(&mut self) {
        {
            let mut snapshot = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
            snapshot.held.clear();
            snapshot.finished = true;
        }
        self.held.send_replace(BTreeMap::new());
        for member in self.members.values_mut() {
            member.publish_deadline(None);
            member.publisher.finish();
        }
        self.fanout.close();
    }
}

/// However the loop ends (finished, or its task aborted or dropped with
/// the runtime), subscribers learn that nothing more will come.
impl<G> Drop for Runner<G> {
    fn drop(&mut self) {
        self.close();
    }
}

/// How a runner is put together, for a set or a lone lease.
mod assembly;
mod control;
mod term_gate;

pub(crate) use control::{Control, Obeyed};
#[cfg(test)]
pub(crate) use term_gate::NoWork;
pub(crate) use term_gate::TermGate;
/// What a statement's end records: the loop's health, the metrics, the
/// renew latencies.
mod record;

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;

/// The template of the set tests: holder `me`, ttl 1 s.
#[cfg(test)]
pub(crate) fn test_template() -> picolease_core::SetConfig {
    picolease_core::SetConfig::with_ttl(
        picolease_core::HolderId::new("me").expect("valid"),
        std::time::Duration::from_secs(1),
    )
}
