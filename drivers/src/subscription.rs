//! Subscriptions: every leadership change of one lease (or of every lease
//! of a set), in order, bounded, readable from blocking and async code.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use std::time::SystemTime;

use picolease_core::{Leadership, LeaseName};
use tokio::sync::Notify;

use crate::lock::lock;

/// One published change of leadership, stamped when the driver published
/// it. Unlike the watch channel, a subscriber sees every change in order
/// (or an explicit [`crate::RecvError::Lagged`] if it fell too far behind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The lease that changed (in a set's subscription, each transition
    /// names its own).
    pub lease: LeaseName,
    /// The new state.
    pub leadership: Leadership,
    /// Wall-clock time of publication (for logs and events).
    pub at: SystemTime,
    /// Monotonic time of publication (for measuring gaps and overlaps).
    pub instant: std::time::Instant,
}

/// How many transitions a subscriber may fall behind before the oldest are
/// dropped and it is told how many it missed ([`RecvError::Lagged`]).
pub const SUBSCRIPTION_CAPACITY: usize = 1024;

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

#[derive(Default)]
struct Queue {
    items: VecDeque<Transition>,
    missed: u64,
    closed: bool,
}

/// One subscriber's bounded queue, readable from blocking and async code.
pub(crate) struct Mailbox {
    queue: Mutex<Queue>,
    /// How many transitions it keeps before dropping the oldest.
    capacity: usize,
    /// Wakes a blocking reader.
    ready: Condvar,
    /// Wakes an async reader.
    notify: Notify,
}

impl Default for Mailbox {
    fn default() -> Self {
        Mailbox::with_capacity(SUBSCRIPTION_CAPACITY)
    }
}

impl Mailbox {
    /// A mailbox that keeps up to `capacity` transitions (at least one).
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Mailbox {
            queue: Mutex::default(),
            capacity: capacity.max(1),
            ready: Condvar::new(),
            notify: Notify::new(),
        }
    }

    pub(crate) fn push(&self, transition: Transition) {
        let mut queue = lock(&self.queue);
        if queue.items.len() >= self.capacity {
            queue.items.pop_front();
            queue.missed += 1;
        }
        queue.items.push_back(transition);
        drop(queue);
        self.ready.notify_all();
        self.notify.notify_one();
    }

    pub(crate) fn close(&self) {
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

/// The subscribers of a whole lease set: every member's publisher pushes
/// each of its transitions here too, so one [`Subscription`] reads every
/// lease's changes in the order they were published.
pub(crate) struct Fanout {
    /// Each subscriber, with the one lease it reads if it reads only one.
    mailboxes: Mutex<Vec<(Option<LeaseName>, Arc<Mailbox>)>>,
    closed: std::sync::atomic::AtomicBool,
    /// Each subscriber's bound: [`SUBSCRIPTION_CAPACITY`] plus two per
    /// lease, so a reader that keeps reading never lags when every lease
    /// changes at once (the first survey of a set publishes all of them).
    capacity: usize,
}

impl Fanout {
    /// The fan-out of a set of `leases` leases.
    pub(crate) fn for_leases(leases: usize) -> Self {
        Fanout {
            mailboxes: Mutex::default(),
            closed: std::sync::atomic::AtomicBool::new(false),
            capacity: SUBSCRIPTION_CAPACITY.saturating_add(leases.saturating_mul(2)),
        }
    }

    /// A new subscriber, from now on (closed at once if the set finished).
    pub(crate) fn subscribe(&self) -> Subscription {
        self.subscribe_to(None)
    }

    /// A new subscriber of `lease`'s transitions only (of every lease's
    /// with `None`), from now on.
    pub(crate) fn subscribe_to(&self, lease: Option<LeaseName>) -> Subscription {
        let mailbox = Arc::new(Mailbox::with_capacity(self.capacity));
        let mut mailboxes = lock(&self.mailboxes);
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            mailbox.close();
        } else {
            mailboxes.push((lease, Arc::clone(&mailbox)));
        }
        Subscription { mailbox }
    }

    /// Hands `transition` to every live subscriber, forgetting dropped ones.
    pub(crate) fn push(&self, transition: &Transition) {
        lock(&self.mailboxes).retain(|(only, mailbox)| {
            let alive = Arc::strong_count(mailbox) > 1;
            if alive && only.as_ref().is_none_or(|lease| *lease == transition.lease) {
                mailbox.push(transition.clone());
            }
            alive
        });
    }

    /// The set has stopped: subscribers read what is left, then `Closed`.
    pub(crate) fn close(&self) {
        let mut mailboxes = lock(&self.mailboxes);
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        for (_, mailbox) in mailboxes.drain(..) {
            mailbox.close();
        }
    }
}

/// Every leadership change of one lease (a lease handle's `subscribe()`)
/// or of every lease of a set (a set handle's), from the moment of
/// subscribing, in order; each [`Transition`] names its lease. Bounded: a subscriber that stops reading holds at most
/// [`SUBSCRIPTION_CAPACITY`] changes, and learns how many it missed.
///
/// Read it from blocking code ([`Subscription::recv_timeout`], the
/// iterator) or async code ([`Subscription::recv`]).
pub struct Subscription {
    pub(crate) mailbox: Arc<Mailbox>,
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
    /// Changes waiting to be read (for tests of the bound).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        lock(&self.mailbox.queue).items.len()
    }

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
