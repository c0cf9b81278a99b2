//! The output side both drivers share: what a driver does with the core's
//! `Publish` commands and with the timings of its renewals.
//!
//! One [`Publisher`] per lease holds the watch channel (the latest state),
//! the subscribers (every change, in order, bounded), a condition variable
//! for blocking waits, and the record of recent renew latencies. A driver
//! calls [`Publisher::publish`] for each `Publish` command and
//! [`Publisher::record_renewal`] after each accepted renew; everything a
//! handle offers to read is served from here, so the two drivers cannot
//! drift apart in what they report.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use picolease_core::{Config, HolderId, Leadership, LeaseName, Operation};
use tokio::sync::watch;

use crate::clock::SharedClock;
pub(crate) use crate::health::{stall_after, Health, SharedHealth};
use crate::lock::lock;
use crate::metrics::{Outcome, StatementKind};
use crate::subscription::{Fanout, Mailbox, Subscription, Transition};

/// How many recent renew latencies a driver keeps (the most recent).
pub const RENEW_SAMPLES: usize = 1024;

/// What the publisher learns of its lease when the handle is built.
pub(crate) struct Attached {
    pub(crate) lease: LeaseName,
    pub(crate) holder: HolderId,
    /// How long the loop may go without a step before it counts as wedged.
    pub(crate) stall_after: Duration,
    /// A lone lease's series, registered at zero; none for a set's
    /// member (see `metrics::LeaseSeries`).
    #[cfg(feature = "metrics")]
    metrics: Option<crate::metrics::Metrics>,
}

#[derive(Default)]
struct Progress {
    /// Bumped on every publication, so a blocking waiter sees changes.
    generation: u64,
    finished: bool,
}

/// The output side of one driver: see the module docs.
pub(crate) struct Publisher {
    /// The lease published about (named in every [`Transition`]).
    lease: LeaseName,
    /// A set member's: the set's subscribers, who get every transition too.
    fanout: Option<Arc<Fanout>>,
    /// Replaceable before the driver starts (a test seam; see `Clock`).
    clock: Mutex<SharedClock>,
    /// The leader's deadline on `clock`, while leading: gated work reads it
    /// here, so it learns of the deadline without waiting for the driver's
    /// loop (which may be blocked in a statement).
    deadline: Mutex<Option<Duration>>,
    leadership: watch::Sender<Leadership>,
    subscribers: Mutex<Vec<Arc<Mailbox>>>,
    progress: Mutex<Progress>,
    changed: Condvar,
    renewals: Mutex<VecDeque<Duration>>,
    attached: OnceLock<Attached>,
    health: SharedHealth,
    /// Whether the last publication was a leader's, and at which epoch.
    led: Mutex<Option<u64>>,
    /// Test seam: the loop blocks at its next step (see `wedge`); a set's
    /// members share the set loop's.
    wedged: Arc<AtomicBool>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("leadership", &self.leadership())
            .field("deadline", &self.deadline())
            .finish_non_exhaustive()
    }
}

impl Publisher {
    pub(crate) fn new(clock: SharedClock, lease: LeaseName) -> Self {
        Self::driven_by(clock, lease, Health::shared())
    }

    fn driven_by(clock: SharedClock, lease: LeaseName, health: SharedHealth) -> Self {
        Publisher {
            lease,
            fanout: None,
            clock: Mutex::new(clock),
            deadline: Mutex::new(None),
            leadership: watch::channel(Leadership::unknown()).0,
            subscribers: Mutex::default(),
            progress: Mutex::default(),
            changed: Condvar::new(),
            // Grown on the first renewal: a set's members never record any.
            renewals: Mutex::new(VecDeque::new()),
            attached: OnceLock::new(),
            health,
            led: Mutex::new(None),
            wedged: Arc::default(),
        }
    }

    /// The publisher of one lease of a set: attached at once, without a
    /// lone lease's metrics, each transition also handed to `fanout`, its
    /// health the set loop's.
    pub(crate) fn member(
        clock: SharedClock,
        config: &Config,
        fanout: Arc<Fanout>,
        health: SharedHealth,
        wedged: Arc<AtomicBool>,
    ) -> Self {
        let mut publisher = Publisher::driven_by(clock, config.lease.clone(), health);
        publisher.fanout = Some(fanout);
        publisher.wedged = wedged;
        let _ = publisher.attached.set(Attached {
            lease: config.lease.clone(),
            holder: config.holder.clone(),
            stall_after: stall_after(&config.without_lease()),
            #[cfg(feature = "metrics")]
            metrics: None,
        });
        publisher
    }

    /// Learns the lease's name and timings (once, when the handle is
    /// built): registers its metrics at zero and brings them up to date.
    pub(crate) fn attach(&self, config: &Config) {
        // Held while attaching, so a publication waits; read only for metrics.
        #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
        let led = lock(&self.led);
        let attached = Attached {
            lease: config.lease.clone(),
            holder: config.holder.clone(),
            stall_after: stall_after(&config.without_lease()),
            #[cfg(feature = "metrics")]
            metrics: Some(crate::metrics::Metrics::register(config.lease.as_str())),
        };
        if self.attached.set(attached).is_err() {
            return;
        }
        // Anything published before (the driver may start first).
        #[cfg(feature = "metrics")]
        if let Some(series) = self.series() {
            let now = self.leadership();
            series.leadership(&now, led.is_some());
        }
        lock(&self.health).last_step = std::time::Instant::now();
    }

    /// A lone lease's metrics, once attached.
    #[cfg(feature = "metrics")]
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        self.attached.get().and_then(|a| a.metrics.as_ref())
    }

    /// This lease's series: a lone lease's registered handles once
    /// attached, a set member's looked up by name; `None` for a lone
    /// lease not attached yet (`attach` brings its series up to date).
    #[cfg(feature = "metrics")]
    pub(crate) fn series(&self) -> Option<crate::metrics::LeaseSeries<'_>> {
        use crate::metrics::LeaseSeries;
        match self.metrics() {
            Some(metrics) => Some(LeaseSeries::Registered(metrics)),
            None if self.fanout.is_some() => Some(LeaseSeries::OnChange(&self.lease)),
            None => None,
        }
    }

    /// The lease's name and timings, once attached.
    pub(crate) fn attached(&self) -> Option<&Attached> {
        self.attached.get()
    }

    /// The loop's progress.
    pub(crate) fn health(&self) -> Health {
        Health::read(&self.health)
    }

    /// The health of the loop that drives this lease, to share with it.
    pub(crate) fn shared_health(&self) -> SharedHealth {
        Arc::clone(&self.health)
    }

    /// The wedge seam's flag, to share with the loop that drives this
    /// lease (it blocks at its next step while the flag is set).
    pub(crate) fn wedge_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.wedged)
    }

    /// Test seam: the driver's loop blocks at its next step, for ever, so
    /// a health check can be seen to fail.
    pub(crate) fn wedge(&self) {
        self.wedged.store(true, Ordering::SeqCst);
    }

    /// A statement ended: the loop advanced; its duration and outcome go to
    /// the metrics. Called by both drivers for every statement.
    pub(crate) fn record_statement(
        &self,
        operation: Operation,
        elapsed: Duration,
        outcome: Outcome,
    ) {
        let statement = StatementKind::of(operation);
        Health::step(&self.health, outcome == Outcome::Answered);
        #[cfg(feature = "metrics")]
        if let Some(metrics) = self.metrics() {
            metrics.statement(statement, elapsed, outcome);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (statement, elapsed);
    }

    /// Carries out the core's `Publish`: the watch channel, every
    /// subscriber, every blocking waiter.
    pub(crate) fn publish(&self, leadership: Leadership) {
        let transition = Transition {
            lease: self.lease.clone(),
            leadership: leadership.clone(),
            at: SystemTime::now(),
            instant: std::time::Instant::now(),
        };
        {
            let mut led = lock(&self.led);
            let epoch = leadership.epoch.map_or(0, |e| e.get());
            let became_leader = leadership.is_leader() && *led != Some(epoch);
            *led = leadership.is_leader().then_some(epoch);
            #[cfg(feature = "metrics")]
            if let Some(series) = self.series() {
                series.leadership(&leadership, became_leader);
            }
            #[cfg(not(feature = "metrics"))]
            let _ = became_leader;
        }
        self.leadership.send_replace(leadership);
        // A subscription dropped by its reader is dropped here too.
        lock(&self.subscribers).retain(|mailbox| {
            let alive = Arc::strong_count(mailbox) > 1;
            if alive {
                mailbox.push(transition.clone());
            }
            alive
        });
        if let Some(fanout) = &self.fanout {
            fanout.push(&transition);
        }
        lock(&self.progress).generation += 1;
        self.changed.notify_all();
    }

    /// The driver has stopped: subscribers read what is left, then
    /// `Closed`; blocking waiters return.
    pub(crate) fn finish(&self) {
        // Finished first: a reader told `Closed` then sees `is_finished`.
        lock(&self.progress).finished = true;
        for mailbox in lock(&self.subscribers).drain(..) {
            mailbox.close();
        }
        self.changed.notify_all();
    }

    /// The time now on the driver's clock.
    pub(crate) fn now(&self) -> Duration {
        self.clock().now()
    }

    /// The driver's clock.
    pub(crate) fn clock(&self) -> SharedClock {
        Arc::clone(&lock(&self.clock))
    }

    /// Replaces the clock (before the driver starts).
    pub(crate) fn set_clock(&self, clock: SharedClock) {
        *lock(&self.clock) = clock;
    }

    /// Records the leader's deadline (on the driver's clock), or `None`
    /// when not leading. Called after every step of the core.
    pub(crate) fn set_deadline(&self, deadline: Option<Duration>) {
        while self.wedged.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        *lock(&self.deadline) = deadline;
        lock(&self.health).last_step = std::time::Instant::now();
        #[cfg(feature = "metrics")]
        if let Some(series) = self.series() {
            series.time_left(self.time_left());
        }
    }

    /// The leader's deadline on the driver's clock, if leading.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        *lock(&self.deadline)
    }

    /// A renew was accepted after `latency` (from the driver issuing the
    /// statement to the core having handled its reply).
    pub(crate) fn record_renewal(&self, latency: Duration) {
        let mut samples = lock(&self.renewals);
        if samples.len() == RENEW_SAMPLES {
            samples.pop_front();
        }
        samples.push_back(latency);
    }

    pub(crate) fn subscribe(&self) -> Subscription {
        let mailbox = Arc::new(Mailbox::default());
        if lock(&self.progress).finished {
            mailbox.close();
        } else {
            lock(&self.subscribers).push(Arc::clone(&mailbox));
        }
        Subscription { mailbox }
    }

    pub(crate) fn watch(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }

    pub(crate) fn renew_latencies(&self) -> Vec<Duration> {
        lock(&self.renewals).iter().copied().collect()
    }

    pub(crate) fn is_finished(&self) -> bool {
        lock(&self.progress).finished
    }
}

mod reading;

#[cfg(test)]
#[path = "publish_tests.rs"]
mod tests;
