//! What both drivers' handles show of their lease, written once.
//!
//! `SqliteLease` and `PgLease` dereference to a [`LeaseView`], so reading
//! the configuration, the leadership, the subscriptions and the renew
//! latencies is the same code, with the same names, for both drivers.
//! Gated work's contexts dereference to a [`Term`] the same way.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use picolease_core::{Config, Epoch, HolderId, Leadership, LeaseName, Role};
use tokio::sync::watch;

use crate::publish::Publisher;
use crate::subscription::Subscription;

/// The read side of a running contender: its configuration and everything
/// its driver publishes. Reached through `SqliteLease` or `PgLease`.
pub struct LeaseView {
    config: Config,
    publisher: Arc<Publisher>,
}

impl std::fmt::Debug for LeaseView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseView")
            .field("lease", &self.config.lease)
            .field("holder", &self.config.holder)
            .field("leadership", &self.publisher.leadership())
            .finish_non_exhaustive()
    }
}

impl LeaseView {
    pub(crate) fn new(config: Config, publisher: Arc<Publisher>) -> Self {
        publisher.attach(&config);
        LeaseView { config, publisher }
    }

    pub(crate) fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// This contender's configuration (its lease name, holder id, timings).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The lease name.
    pub fn lease(&self) -> &LeaseName {
        &self.config.lease
    }

    /// This contender's holder id, as stored in the row (use it in fences).
    pub fn holder(&self) -> &HolderId {
        &self.config.holder
    }

    /// The current leadership state: role, epoch, holder in view and, on
    /// demotion, the reason. Checked against the term's deadline when read:
    /// once the deadline has passed this says follower (reason `expired`)
    /// even if the driver's loop has not run since (a resumed process, a
    /// starved thread, a statement blocked in I/O), so gating on
    /// `leadership().is_leader()` never acts past the deadline.
    pub fn leadership(&self) -> Leadership {
        self.publisher.leadership()
    }

    /// A watch receiver of the leadership state, updated on every change
    /// the driver's loop publishes (usable with or without a tokio
    /// runtime).
    ///
    /// What it promises: every publication, in the loop's order, and the
    /// latest one at any moment. What it cannot: a value read from it is
    /// the loop's last word, so a leader's value can outlive the term's
    /// deadline for as long as the loop is late to publish the end (it
    /// publishes `follower` by the deadline plus its own wake-up, but a
    /// paused or starved process wakes late). To act only while leading,
    /// read [`LeaseView::leadership`] (checked against the deadline when
    /// read), wait with [`LeaseView::wait_for`] (which wakes at the
    /// deadline too), or wait for the change *or* [`LeaseView::leader_until`],
    /// whichever comes first (async: [`LeaseView::until_not_leader`]).
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.publisher.watch()
    }

    /// While this node leads, the latest moment its term can last: the
    /// deadline as a [`std::time::Instant`] to sleep until (a renewal
    /// moves it; read it again after each change). `None` while following
    /// or once the deadline has passed. (The deadline is kept on the
    /// suspend-aware clock; the `Instant` is that moment as of now, so
    /// after a suspend, read it again.)
    pub fn leader_until(&self) -> Option<std::time::Instant> {
        let left = self.time_left().filter(|left| !left.is_zero())?;
        self.leadership()
            .is_leader()
            .then(|| std::time::Instant::now() + left)
    }

    /// Resolves once this node does not lead: at once on a follower, else
    /// at the published end of the term or at its deadline, whichever
    /// comes first (the deadline needs no step of the driver's loop).
    /// Needs a tokio runtime with its timer.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub async fn until_not_leader(&self) {
        let mut watch = self.watch();
        loop {
            let Some(until) = self.leader_until() else {
                return;
            };
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(until.into()) => {}
                changed = watch.changed() => {
                    if changed.is_err() {
                        // The driver has finished: it leads no more.
                        return;
                    }
                }
            }
        }
    }

    /// Every leadership change from now on, in order (bounded; see
    /// [`Subscription`]).
    pub fn subscribe(&self) -> Subscription {
        self.publisher.subscribe()
    }

    /// While leading, the time left before this node demotes itself unless
    /// a renewal succeeds first (on the drivers' suspend-aware clock);
    /// `None` while following, zero once the deadline has passed.
    pub fn time_left(&self) -> Option<Duration> {
        self.publisher.time_left()
    }

    /// The latencies of the most recent accepted renewals (up to
    /// [`crate::RENEW_SAMPLES`]), oldest first: from the driver issuing the
    /// statement to the core having handled its reply.
    pub fn renew_latencies(&self) -> Vec<Duration> {
        self.publisher.renew_latencies()
    }

    /// Blocks the calling thread until the leadership state satisfies
    /// `done` (checked now and on every change), the driver finishes, or
    /// `timeout` passes; returns the state that satisfied it. For threads
    /// (async code awaits [`LeaseView::watch`]'s `changed()` instead).
    pub fn wait_for(
        &self,
        timeout: Duration,
        done: impl FnMut(&Leadership) -> bool,
    ) -> Option<Leadership> {
        self.publisher.wait_for(timeout, done)
    }

    /// Blocks the calling thread until the leadership state changes, the
    /// driver finishes, or `timeout` passes; returns the new state if it
    /// changed.
    pub fn wait_change(&self, timeout: Duration) -> Option<Leadership> {
        self.publisher.wait_change(timeout)
    }

    /// Everything a health check or a "who leads" endpoint needs, read at
    /// once: see [`Snapshot`].
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    pub fn snapshot(&self) -> Snapshot {
        self.snapshots().snapshot()
    }

    /// A cheap, cloneable reader of [`LeaseView::snapshot`] to hand to
    /// another thread (an HTTP server's, say); it outlives the handle.
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    pub fn snapshots(&self) -> crate::Snapshots {
        crate::Snapshots::new(crate::snapshots::LoneReader(Arc::clone(&self.publisher)))
    }

    /// What [`Snapshots::snapshot`] reads for a lone lease: the publisher's
    /// state, checked against the term's deadline now.
    pub(crate) fn read(publisher: &Publisher) -> Snapshot {
        let leadership = publisher.leadership();
        let health = publisher.health();
        let (lease, me, stall_after) = match publisher.attached() {
            Some(a) => (a.lease.clone(), a.holder.clone(), a.stall_after),
            // Only between a builder's `subscribe` and its `start`.
            None => (
                LeaseName::new("unknown").unwrap_or_else(|_| unreachable!()),
                HolderId::new("unknown").unwrap_or_else(|_| unreachable!()),
                Duration::MAX,
            ),
        };
        Snapshot {
            lease,
            me,
            role: leadership.role,
            epoch: leadership.epoch,
            holder: leadership.holder,
            last_success: health.last_success.map(|(_, at)| at),
            since_success: health.last_success.map(|(at, _)| at.elapsed()),
            since_progress: health.last_step.elapsed(),
            stall_after,
            time_left: publisher.time_left(),
            finished: publisher.is_finished(),
        }
    }
}

/// What a contender knows of its lease at one moment: the data behind a
/// `/leader` and a `/healthz` endpoint. Plain data; read it with
/// [`LeaseView::snapshot`] or [`crate::Snapshots::snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The lease.
    pub lease: LeaseName,
    /// This contender's holder id.
    pub me: HolderId,
    /// Leader or follower.
    pub role: Role,
    /// The epoch held (leader) or last observed (follower); `None` before
    /// the first answer.
    pub epoch: Option<Epoch>,
    /// The holder as this contender last saw it (itself while leading;
    /// `None` when free or not yet known).
    pub holder: Option<HolderId>,
    /// Wall-clock time of the last statement the database answered.
    pub last_success: Option<SystemTime>,
    /// How long ago that was.
    pub since_success: Option<Duration>,
    /// How long since the driver's loop last advanced (a step of the
    /// election or a statement's outcome).
    pub since_progress: Duration,
    /// Past this without progress the loop counts as wedged: interval +
    /// 2 × request timeout + the reconnect backoff's cap (the interval, at
    /// least 100 ms).
    pub stall_after: Duration,
    /// While leading, the time to the deadline; `None` on a follower.
    pub time_left: Option<Duration>,
    /// The driver has stopped.
    pub finished: bool,
}

impl Snapshot {
    /// True while this contender leads.
    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }

    /// True when the loop has not advanced for longer than
    /// [`Snapshot::stall_after`] (never merely because this contender
    /// follows or the database is unreachable: failed statements are
    /// progress too).
    pub fn is_wedged(&self) -> bool {
        !self.finished && self.since_progress > self.stall_after
    }
}

/// One term of leadership: the lease, this node's holder id and the epoch,
/// the fencing token of everything done in the term. Gated work's
/// `LeaderContext` (of either driver) dereferences to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    lease: LeaseName,
    holder: HolderId,
    epoch: Epoch,
}

impl Term {
    pub(crate) fn new(lease: LeaseName, holder: HolderId, epoch: Epoch) -> Self {
        Term {
            lease,
            holder,
            epoch,
        }
    }

    /// The lease.
    pub fn lease(&self) -> &LeaseName {
        &self.lease
    }

    /// This node's holder id.
    pub fn holder(&self) -> &HolderId {
        &self.holder
    }

    /// The term's epoch: the fencing token for the work's writes.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }
}
