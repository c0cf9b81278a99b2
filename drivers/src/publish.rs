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
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use picolease_core::Leadership;
use tokio::sync::watch;

use crate::clock::SharedClock;
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
        }
    }

    /// Carries out the core's `Publish`: the watch channel, every
    /// subscriber, every blocking waiter.
    pub(crate) fn publish(&self, leadership: Leadership) {
        let transition = Transition {
            leadership: leadership.clone(),
            at: SystemTime::now(),
            instant: std::time::Instant::now(),
        };
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
        *lock(&self.deadline) = deadline;
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

    pub(crate) fn subscribe(&self) -> Subscription {
        let mailbox = Arc::new(Mailbox::default());
        if lock(&self.progress).finished {
            mailbox.close();
        } else {
            lock(&self.subscribers).push(Arc::clone(&mailbox));
        }
        Subscription { mailbox }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subscription::{RecvError, SUBSCRIPTION_CAPACITY};
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
        let publisher = Publisher::new(crate::clock::system());
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
        let publisher = Publisher::new(crate::clock::system());
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
        let publisher = Publisher::new(crate::clock::system());
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
        let publisher = Publisher::new(crate::clock::system());
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
}
