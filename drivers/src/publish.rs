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
use crate::metrics::{Outcome, StatementKind};
use crate::subscription::{lock, Mailbox, Subscription};

/// How many recent renew latencies a driver keeps (the most recent).
pub const RENEW_SAMPLES: usize = 1024;

/// One published change of leadership, stamped when the driver published
/// it. Unlike the watch channel, a subscriber sees every change in order
/// (or an explicit [`crate::RecvError::Lagged`] if it fell too far behind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The new state.
    pub leadership: Leadership,
    /// Wall-clock time of publication (for logs and events).
    pub at: SystemTime,
    /// Monotonic time of publication (for measuring gaps and overlaps).
    pub instant: std::time::Instant,
}

/// What the publisher learns of its lease when the handle is built.
pub(crate) struct Attached {
    pub(crate) lease: LeaseName,
    pub(crate) holder: HolderId,
    /// How long the loop may go without a step before it counts as wedged.
    pub(crate) stall_after: Duration,
    #[cfg(feature = "metrics")]
    metrics: crate::metrics::Metrics,
}

/// The loop's progress, for health checks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Health {
    /// The loop's last step (a step of the core, or a statement's outcome).
    pub(crate) last_step: std::time::Instant,
    /// The last statement the database answered.
    pub(crate) last_success: Option<(std::time::Instant, SystemTime)>,
    /// Whether the last publication was a leader's, and at which epoch.
    led: Option<u64>,
}

#[derive(Default)]
struct Progress {
    /// Bumped on every publication, so a blocking waiter sees changes.
    generation: u64,
    finished: bool,
}

/// The output side of one driver: see the module docs.
pub(crate) struct Publisher {
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
    health: Mutex<Health>,
    /// Test seam: the loop blocks at its next step (see `wedge`).
    wedged: AtomicBool,
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
    pub(crate) fn new(clock: SharedClock) -> Self {
        Publisher {
            clock: Mutex::new(clock),
            deadline: Mutex::new(None),
            leadership: watch::channel(Leadership::unknown()).0,
            subscribers: Mutex::default(),
            progress: Mutex::default(),
            changed: Condvar::new(),
            renewals: Mutex::new(VecDeque::with_capacity(RENEW_SAMPLES)),
            attached: OnceLock::new(),
            health: Mutex::new(Health {
                last_step: std::time::Instant::now(),
                last_success: None,
                led: None,
            }),
            wedged: AtomicBool::new(false),
        }
    }

    /// Learns the lease's name and timings (once, when the handle is
    /// built): registers its metrics at zero and brings them up to date.
    pub(crate) fn attach(&self, config: &Config) {
        let mut health = lock(&self.health);
        let attached = Attached {
            lease: config.lease.clone(),
            holder: config.holder.clone(),
            stall_after: stall_after(config),
            #[cfg(feature = "metrics")]
            metrics: crate::metrics::Metrics::register(config.lease.as_str()),
        };
        if self.attached.set(attached).is_err() {
            return;
        }
        // Anything published before (the driver may start first).
        #[cfg(feature = "metrics")]
        if let Some(attached) = self.attached.get() {
            let now = self.leadership();
            attached.metrics.leadership(&now, health.led.is_some());
        }
        health.last_step = std::time::Instant::now();
    }

    /// The lease's name and timings, once attached.
    pub(crate) fn attached(&self) -> Option<&Attached> {
        self.attached.get()
    }

    /// The loop's progress.
    pub(crate) fn health(&self) -> Health {
        *lock(&self.health)
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
        {
            let mut health = lock(&self.health);
            let now = std::time::Instant::now();
            health.last_step = now;
            if outcome == Outcome::Answered {
                health.last_success = Some((now, SystemTime::now()));
            }
        }
        #[cfg(feature = "metrics")]
        if let Some(attached) = self.attached.get() {
            attached.metrics.statement(statement, elapsed, outcome);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (statement, elapsed);
    }

    /// Carries out the core's `Publish`: the watch channel, every
    /// subscriber, every blocking waiter.
    pub(crate) fn publish(&self, leadership: Leadership) {
        let transition = Transition {
            leadership: leadership.clone(),
            at: SystemTime::now(),
            instant: std::time::Instant::now(),
        };
        {
            let mut health = lock(&self.health);
            let epoch = leadership.epoch.map_or(0, |e| e.get());
            let became_leader = leadership.is_leader() && health.led != Some(epoch);
            health.led = leadership.is_leader().then_some(epoch);
            #[cfg(feature = "metrics")]
            if let Some(attached) = self.attached.get() {
                attached.metrics.leadership(&leadership, became_leader);
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
        if let Some(attached) = self.attached.get() {
            attached.metrics.remaining(self.time_left());
        }
    }

    /// The leader's deadline on the driver's clock, if leading.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        *lock(&self.deadline)
    }

    /// Time left before the leader's deadline: `None` when not leading,
    /// zero once it has passed.
    pub(crate) fn time_left(&self) -> Option<Duration> {
        self.deadline()
            .map(|deadline| deadline.saturating_sub(self.now()))
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

    pub(crate) fn subscribe(self: &Arc<Self>) -> Subscription {
        let mailbox = Arc::new(Mailbox::default());
        if lock(&self.progress).finished {
            mailbox.close();
        } else {
            lock(&self.subscribers).push(Arc::clone(&mailbox));
        }
        Subscription {
            mailbox,
            source: Arc::clone(self),
        }
    }

    pub(crate) fn leadership(&self) -> Leadership {
        self.leadership.borrow().clone()
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

    /// Blocks until the state satisfies `done` (checked now and on every
    /// change), the driver finishes, or `timeout` passes.
    pub(crate) fn wait_for(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&Leadership) -> bool,
    ) -> Option<Leadership> {
        let mut met = None;
        self.wait_until(timeout, |_| {
            let now = self.leadership();
            let ok = done(&now);
            met = ok.then_some(now);
            ok
        });
        met
    }

    /// Blocks until the next change or `timeout`; the new state if changed
    /// (or if the driver finished meanwhile).
    pub(crate) fn wait_change(&self, timeout: Duration) -> Option<Leadership> {
        let seen = lock(&self.progress).generation;
        self.wait_until(timeout, |progress| {
            progress.generation != seen || progress.finished
        })
        .then(|| self.leadership())
    }

    /// Blocks until `ready` holds (checked now and after every change), the
    /// driver finishes, or `timeout` passes; true unless it timed out.
    fn wait_until(&self, timeout: Duration, mut ready: impl FnMut(&Progress) -> bool) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut progress = lock(&self.progress);
        loop {
            if ready(&progress) {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if progress.finished || left.is_zero() {
                return false;
            }
            progress = self
                .changed
                .wait_timeout(progress, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// How long the loop may go without a step before a health check calls it
/// wedged: a follower's poll (the interval), a statement and a timed-out
/// one (2 × request timeout), and the longest reconnect backoff (the
/// PostgreSQL driver's cap: the interval, at least 100 ms).
pub(crate) fn stall_after(config: &Config) -> Duration {
    config.interval + config.request_timeout * 2 + config.interval.max(Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subscription::{RecvError, SUBSCRIPTION_CAPACITY};
    use crate::Snapshot;
    use picolease_core::{Epoch, Role};

    fn leading(epoch: u64) -> Leadership {
        Leadership {
            role: Role::Leader,
            epoch: Some(Epoch::new(epoch)),
            holder: None,
            reason: None,
        }
    }

    #[test]
    fn a_subscriber_sees_every_change_in_order_then_closed() {
        let publisher = Arc::new(Publisher::new(crate::clock::system()));
        let mut sub = publisher.subscribe();
        for epoch in 1..=3 {
            publisher.publish(leading(epoch));
        }
        publisher.finish();
        let epochs: Vec<u64> = sub
            .by_ref()
            .map(|t| t.unwrap().leadership.epoch.unwrap().get())
            .collect();
        assert_eq!(epochs, [1, 2, 3]);
        assert_eq!(sub.try_recv(), Err(RecvError::Closed));
        assert_eq!(publisher.leadership(), leading(3));
    }

    #[test]
    fn a_subscriber_that_never_reads_is_bounded_and_told_what_it_missed() {
        let publisher = Arc::new(Publisher::new(crate::clock::system()));
        let mut sub = publisher.subscribe();
        let extra = 10u64;
        for epoch in 0..(SUBSCRIPTION_CAPACITY as u64 + extra) {
            publisher.publish(leading(epoch));
        }
        assert_eq!(sub.pending(), SUBSCRIPTION_CAPACITY, "memory stays bounded");
        assert_eq!(sub.try_recv(), Err(RecvError::Lagged(extra)));
        // Then the oldest change still kept, and on in order.
        let next = sub.try_recv().unwrap();
        assert_eq!(next.leadership.epoch, Some(Epoch::new(extra)));
        let next = sub.recv_timeout(Duration::ZERO).unwrap();
        assert_eq!(next.leadership.epoch, Some(Epoch::new(extra + 1)));
    }

    #[test]
    fn a_dropped_subscription_is_forgotten_and_a_late_one_is_closed() {
        let publisher = Arc::new(Publisher::new(crate::clock::system()));
        drop(publisher.subscribe());
        publisher.publish(leading(1));
        assert!(lock(&publisher.subscribers).is_empty());
        publisher.finish();
        let mut late = publisher.subscribe();
        assert_eq!(
            late.recv_timeout(Duration::from_secs(1)),
            Err(RecvError::Closed)
        );
        assert!(publisher.is_finished());
    }

    #[test]
    fn renew_latencies_keep_the_most_recent() {
        let publisher = Arc::new(Publisher::new(crate::clock::system()));
        for ms in 0..(RENEW_SAMPLES as u64 + 5) {
            publisher.record_renewal(Duration::from_millis(ms));
        }
        let kept = publisher.renew_latencies();
        assert_eq!(kept.len(), RENEW_SAMPLES);
        assert_eq!(kept[0], Duration::from_millis(5));
    }

    #[test]
    fn an_async_reader_wakes_on_publication() {
        let publisher = Arc::new(Publisher::new(crate::clock::system()));
        let mut sub = publisher.subscribe();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let theirs = Arc::clone(&publisher);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            theirs.publish(leading(7));
        });
        let got = runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), sub.recv()).await });
        writer.join().unwrap();
        assert_eq!(got.unwrap().unwrap().leadership.epoch, Some(Epoch::new(7)));
    }

    fn attached_config() -> Config {
        Config::with_ttl(
            picolease_core::LeaseName::new("m").unwrap(),
            HolderId::new("me").unwrap(),
            Duration::from_secs(1),
        )
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn metrics_are_registered_at_zero_and_follow_the_output_side() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let publisher = Arc::new(Publisher::new(crate::clock::system()));
        metrics::with_local_recorder(&recorder, || publisher.attach(&attached_config()));
        let value = |series: &str| -> Option<f64> {
            handle
                .render()
                .lines()
                .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        };
        let renews = r#"picolease_statement_duration_seconds_count{lease="m",statement="renew"}"#;
        let to_leader = r#"picolease_transitions_total{lease="m",to="leader",reason="acquired"}"#;
        let lost = r#"picolease_transitions_total{lease="m",to="follower",reason="lost"}"#;
        let timeouts =
            r#"picolease_statement_failures_total{lease="m",statement="renew",kind="timeout"}"#;
        // Every series at zero before any event.
        assert_eq!(value(r#"picolease_leader{lease="m"}"#), Some(0.0));
        assert_eq!(value(r#"picolease_epoch{lease="m"}"#), Some(0.0));
        assert_eq!(
            value(r#"picolease_lease_remaining_seconds{lease="m"}"#),
            Some(0.0)
        );
        assert_eq!(value(to_leader), Some(0.0));
        assert_eq!(value(lost), Some(0.0));
        assert_eq!(value(timeouts), Some(0.0));

        publisher.publish(leading(4));
        publisher.set_deadline(Some(publisher.now() + Duration::from_millis(800)));
        let renew = Operation::Renew {
            epoch: Epoch::new(4),
        };
        publisher.record_statement(renew, Duration::from_millis(2), Outcome::Answered);
        publisher.record_statement(renew, Duration::from_millis(1), Outcome::Answered);
        publisher.record_statement(renew, Duration::from_millis(250), Outcome::Timeout);
        assert_eq!(value(r#"picolease_leader{lease="m"}"#), Some(1.0));
        assert_eq!(value(r#"picolease_epoch{lease="m"}"#), Some(4.0));
        assert_eq!(value(to_leader), Some(1.0));
        assert_eq!(value(renews), Some(2.0), "a timeout has no duration");
        assert_eq!(value(timeouts), Some(1.0));
        let left = value(r#"picolease_lease_remaining_seconds{lease="m"}"#).unwrap();
        assert!(left > 0.5 && left <= 0.8, "{left}");

        publisher.publish(Leadership {
            role: Role::Follower,
            epoch: Some(Epoch::new(4)),
            holder: None,
            reason: Some(picolease_core::Demotion::Lost),
        });
        publisher.set_deadline(None);
        assert_eq!(value(r#"picolease_leader{lease="m"}"#), Some(0.0));
        assert_eq!(value(lost), Some(1.0));
        assert_eq!(
            value(r#"picolease_lease_remaining_seconds{lease="m"}"#),
            Some(0.0)
        );
        // The same term published again is not a new transition.
        publisher.publish(leading(5));
        publisher.publish(leading(5));
        assert_eq!(value(to_leader), Some(2.0));
    }

    #[test]
    fn the_snapshot_shows_role_holder_progress_and_success() {
        let publisher = Arc::new(Publisher::new(crate::clock::system()));
        let view = crate::LeaseView::new(attached_config(), Arc::clone(&publisher));
        let snapshot = view.snapshot();
        assert_eq!(snapshot.lease.as_str(), "m");
        assert_eq!(snapshot.me.as_str(), "me");
        assert!(!snapshot.is_leader() && snapshot.epoch.is_none());
        assert_eq!(snapshot.last_success, None);
        // interval 250 ms + 2 × 250 ms + max(250 ms, 100 ms).
        assert_eq!(snapshot.stall_after, Duration::from_millis(1_000));
        assert!(!snapshot.is_wedged());

        publisher.record_statement(Operation::Acquire, Duration::ZERO, Outcome::Answered);
        publisher.publish(leading(2));
        publisher.set_deadline(Some(publisher.now() + Duration::from_secs(1)));
        let snapshot = view.snapshots().snapshot();
        assert!(snapshot.is_leader());
        assert_eq!(snapshot.epoch, Some(Epoch::new(2)));
        assert!(snapshot.last_success.is_some());
        assert!(snapshot.time_left.is_some_and(|left| left > Duration::ZERO));
        // A failure is progress, not success.
        std::thread::sleep(Duration::from_millis(20));
        publisher.record_statement(Operation::Acquire, Duration::ZERO, Outcome::Transient);
        let snapshot = publisher.subscribe().snapshots().snapshot();
        assert!(snapshot.since_progress < snapshot.since_success.unwrap());
        let stalled = Snapshot {
            since_progress: Duration::from_millis(1_001),
            ..snapshot.clone()
        };
        assert!(stalled.is_wedged());
        assert!(!Snapshot {
            finished: true,
            ..stalled
        }
        .is_wedged());
    }
}
