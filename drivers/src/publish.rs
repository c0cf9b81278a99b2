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
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use picolease_core::Leadership;
use tokio::sync::{watch, Notify};

/// How many recent renew latencies a driver keeps (the most recent).
pub const RENEW_SAMPLES: usize = 1024;

/// How many transitions a subscriber may fall behind before the oldest are
/// dropped and it is told how many it missed ([`RecvError::Lagged`]).
pub const SUBSCRIPTION_CAPACITY: usize = 1024;

/// One published change of leadership, stamped when the driver published
/// it. Unlike the watch channel, a subscriber sees every change in order
/// (or an explicit [`RecvError::Lagged`] if it fell too far behind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The new state.
    pub leadership: Leadership,
    /// Wall-clock time of publication (for logs and events).
    pub at: SystemTime,
    /// Monotonic time of publication (for measuring gaps and overlaps).
    pub instant: std::time::Instant,
}

/// Why [`Subscription`] returned no transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// The subscriber fell more than [`SUBSCRIPTION_CAPACITY`] changes
    /// behind: this many of the oldest were dropped. The next call returns
    /// the oldest change still kept.
    #[error("the subscriber fell behind and missed {0} transitions")]
    Lagged(u64),
    /// The driver has stopped and every transition has been read.
    #[error("the lease driver has stopped")]
    Closed,
    /// The wait of [`Subscription::recv_timeout`] ran out.
    #[error("no transition within the timeout")]
    Timeout,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a few assignments: a panic cannot
    // leave the data inconsistent, so poisoning is ignored.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Transition>,
    missed: u64,
    closed: bool,
}

/// One subscriber's bounded queue, readable from blocking and async code.
#[derive(Default)]
struct Mailbox {
    queue: Mutex<Queue>,
    /// Wakes a blocking reader.
    ready: Condvar,
    /// Wakes an async reader.
    notify: Notify,
}

impl Mailbox {
    fn push(&self, transition: Transition) {
        let mut queue = lock(&self.queue);
        if queue.items.len() == SUBSCRIPTION_CAPACITY {
            queue.items.pop_front();
            queue.missed += 1;
        }
        queue.items.push_back(transition);
        drop(queue);
        self.ready.notify_all();
        self.notify.notify_one();
    }

    fn close(&self) {
        lock(&self.queue).closed = true;
        self.ready.notify_all();
        self.notify.notify_one();
    }

    /// The next outcome, if one is ready.
    fn take(queue: &mut Queue) -> Option<Result<Transition, RecvError>> {
        if queue.missed > 0 {
            return Some(Err(RecvError::Lagged(std::mem::take(&mut queue.missed))));
        }
        match queue.items.pop_front() {
            Some(transition) => Some(Ok(transition)),
            None if queue.closed => Some(Err(RecvError::Closed)),
            None => None,
        }
    }
}

/// Every leadership change of one lease from the moment of subscribing,
/// in order. Bounded: a subscriber that stops reading holds at most
/// [`SUBSCRIPTION_CAPACITY`] changes, and learns how many it missed.
///
/// Read it from blocking code ([`Subscription::recv_timeout`], the
/// iterator) or async code ([`Subscription::recv`]).
pub struct Subscription {
    mailbox: Arc<Mailbox>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = lock(&self.mailbox.queue);
        f.debug_struct("Subscription")
            .field("pending", &queue.items.len())
            .field("missed", &queue.missed)
            .field("closed", &queue.closed)
            .finish()
    }
}

impl Subscription {
    /// The next change, waiting for it (async). `Err(Lagged(n))` reports
    /// dropped changes; `Err(Closed)` that the driver stopped and nothing
    /// is left. Cancel-safe.
    pub async fn recv(&mut self) -> Result<Transition, RecvError> {
        loop {
            let notified = self.mailbox.notify.notified();
            if let Some(outcome) = Mailbox::take(&mut lock(&self.mailbox.queue)) {
                return outcome;
            }
            notified.await;
        }
    }

    /// The next change, waiting up to `timeout` (blocking).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Transition, RecvError> {
        let deadline = std::time::Instant::now() + timeout;
        let mut queue = lock(&self.mailbox.queue);
        loop {
            if let Some(outcome) = Mailbox::take(&mut queue) {
                return outcome;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(RecvError::Timeout);
            }
            queue = self
                .mailbox
                .ready
                .wait_timeout(queue, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The next change if one is ready now; `Err(Timeout)` if none is.
    pub fn try_recv(&mut self) -> Result<Transition, RecvError> {
        Mailbox::take(&mut lock(&self.mailbox.queue)).unwrap_or(Err(RecvError::Timeout))
    }
}

impl Iterator for Subscription {
    type Item = Result<Transition, RecvError>;

    /// Blocks for the next change; `None` once the driver has stopped and
    /// every change has been read.
    fn next(&mut self) -> Option<Self::Item> {
        let mut queue = lock(&self.mailbox.queue);
        loop {
            match Mailbox::take(&mut queue) {
                Some(Err(RecvError::Closed)) => return None,
                Some(outcome) => return Some(outcome),
                None => {
                    queue = self
                        .mailbox
                        .ready
                        .wait(queue)
                        .unwrap_or_else(|p| p.into_inner())
                }
            }
        }
    }
}

#[derive(Default)]
struct Progress {
    /// Bumped on every publication, so a blocking waiter sees changes.
    generation: u64,
    finished: bool,
}

/// The output side of one driver: see the module docs.
pub(crate) struct Publisher {
    leadership: watch::Sender<Leadership>,
    subscribers: Mutex<Vec<Arc<Mailbox>>>,
    progress: Mutex<Progress>,
    changed: Condvar,
    renewals: Mutex<VecDeque<Duration>>,
}

impl Publisher {
    pub(crate) fn new() -> Self {
        Publisher {
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
        for mailbox in lock(&self.subscribers).drain(..) {
            mailbox.close();
        }
        lock(&self.progress).finished = true;
        self.changed.notify_all();
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
        let deadline = std::time::Instant::now() + timeout;
        let mut progress = lock(&self.progress);
        loop {
            let now = self.leadership();
            if done(&now) {
                return Some(now);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if progress.finished || left.is_zero() {
                return None;
            }
            progress = self
                .changed
                .wait_timeout(progress, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Blocks until the next change or `timeout`; the new state if changed.
    pub(crate) fn wait_change(&self, timeout: Duration) -> Option<Leadership> {
        let deadline = std::time::Instant::now() + timeout;
        let mut progress = lock(&self.progress);
        let seen = progress.generation;
        while progress.generation == seen && !progress.finished {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            progress = self
                .changed
                .wait_timeout(progress, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(progress);
        Some(self.leadership())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let publisher = Publisher::new();
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
        let publisher = Publisher::new();
        let mut sub = publisher.subscribe();
        let extra = 10u64;
        for epoch in 0..(SUBSCRIPTION_CAPACITY as u64 + extra) {
            publisher.publish(leading(epoch));
        }
        assert_eq!(
            lock(&sub.mailbox.queue).items.len(),
            SUBSCRIPTION_CAPACITY,
            "memory stays bounded"
        );
        assert_eq!(sub.try_recv(), Err(RecvError::Lagged(extra)));
        // Then the oldest change still kept, and on in order.
        let next = sub.try_recv().unwrap();
        assert_eq!(next.leadership.epoch, Some(Epoch::new(extra)));
        let next = sub.recv_timeout(Duration::ZERO).unwrap();
        assert_eq!(next.leadership.epoch, Some(Epoch::new(extra + 1)));
    }

    #[test]
    fn a_dropped_subscription_is_forgotten_and_a_late_one_is_closed() {
        let publisher = Publisher::new();
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
        let publisher = Publisher::new();
        for ms in 0..(RENEW_SAMPLES as u64 + 5) {
            publisher.record_renewal(Duration::from_millis(ms));
        }
        let kept = publisher.renew_latencies();
        assert_eq!(kept.len(), RENEW_SAMPLES);
        assert_eq!(kept[0], Duration::from_millis(5));
    }

    #[test]
    fn an_async_reader_wakes_on_publication() {
        let publisher = Arc::new(Publisher::new());
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
