//! What a set's handle reads, the same on both drivers and, lease by
//! lease, the same as a lone lease's handle: each lease's leadership, a
//! watch of the held leases, subscriptions, the set's snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picolease_core::{Epoch, HolderId, Leadership, LeaseName, SetConfig};
use tokio::sync::watch;

use crate::publish::{Publisher, SharedHealth};
use crate::subscription::{Fanout, Subscription};
use crate::view::LeaseView;

/// What a set knows at one moment: the data behind a set's `/leader` and
/// `/healthz` (the set's counterpart of a lone lease's
/// [`crate::Snapshot`], with the same wedged and finished meaning).
#[derive(Clone, Debug, Default)]
pub struct SetSnapshot {
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
    /// `Runner::carry_out`, which both drivers call on every pass of
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

impl SetSnapshot {
    /// How long since the set's loop last stepped ([`SetSnapshot::last_step`]);
    /// zero for a status no driver wrote.
    pub fn since_progress(&self) -> Duration {
        self.since_progress_at(std::time::Instant::now())
    }

    /// True when the loop has not stepped for longer than
    /// [`SetSnapshot::stall_after`] and the set has not finished (never
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

/// The shared state behind a set's snapshot.
pub(crate) type SharedSnapshot = Arc<Mutex<SetSnapshot>>;

/// What a set's handle reads, the same on both drivers.
///
/// Both set handles ([`crate::sqlite::SqliteLeaseSet`],
/// [`crate::postgres::PgLeaseSet`]) dereference to it, as lease handles
/// do to [`crate::LeaseView`]; per lease it answers what a lone lease's
/// handle answers.
pub struct SetView {
    pub(super) template: SetConfig,
    pub(super) snapshot: SharedSnapshot,
    /// The set loop's health: the snapshot's `last_step` is read from it.
    pub(super) health: SharedHealth,
    pub(super) wedge: Arc<AtomicBool>,
    /// Each lease's publisher, as a lone lease's handle reads its own.
    pub(super) publishers: Arc<HashMap<LeaseName, Arc<Publisher>>>,
    pub(super) fanout: Arc<Fanout>,
    pub(super) held: watch::Receiver<BTreeMap<LeaseName, Epoch>>,
}

impl std::fmt::Debug for SetView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetView")
            .field("holder", &self.template.holder)
            .field("leases", &self.publishers.len())
            .field("held", &self.held.borrow().len())
            .finish_non_exhaustive()
    }
}

impl SetView {
    /// The timings and holder id every lease of the set is contended with.
    pub fn config(&self) -> &SetConfig {
        &self.template
    }

    /// This node's holder id, as stored in the rows (use it in fences).
    pub fn holder(&self) -> &HolderId {
        &self.template.holder
    }

    /// True once the set's loop has published its end: it finishes every
    /// lease's publisher at once, so the first one answers for all.
    pub(crate) fn is_loop_finished(&self) -> bool {
        self.publishers
            .values()
            .next()
            .is_some_and(|p| p.is_finished())
    }

    /// The leases of the set, in no particular order.
    pub fn leases(&self) -> impl Iterator<Item = &LeaseName> {
        self.publishers.keys()
    }

    /// `lease`'s leadership as last published (leader with its epoch, or
    /// follower with the holder and epoch last seen and why it left;
    /// [`Leadership::unknown`] before anything was), checked against the
    /// lease's deadline when read as a lone lease's
    /// [`LeaseView::leadership`] is; `None` for a lease outside the set.
    pub fn leadership(&self, lease: &LeaseName) -> Option<Leadership> {
        self.publishers.get(lease).map(|p| p.leadership())
    }

    /// `lease` as a lone lease's handle shows it: a [`LeaseView`] with its
    /// leadership, `watch()`, `subscribe()` (this lease's transitions
    /// only), `time_left()`, `renew_latencies()` (each renewal batch's time)
    /// and `snapshot()`, whose progress and last answer are the set loop's
    /// (it renews every lease). `None` for a lease outside the set.
    pub fn lease_view(&self, lease: &LeaseName) -> Option<LeaseView> {
        let publisher = self.publishers.get(lease)?;
        let config = self.template.for_lease(lease.clone());
        Some(LeaseView::new(config, Arc::clone(publisher)))
    }

    /// Blocks the calling thread until `lease`'s leadership satisfies `done`
    /// (checked now and on every change), the set finishes, or `timeout`
    /// passes, as a lone lease's [`LeaseView::wait_for`]; `None` also for
    /// a lease outside the set.
    pub fn wait_for(
        &self,
        lease: &LeaseName,
        timeout: Duration,
        done: impl FnMut(&Leadership) -> bool,
    ) -> Option<Leadership> {
        self.publishers.get(lease)?.wait_for(timeout, done)
    }

    /// Blocks the calling thread until `lease`'s leadership changes, the
    /// set finishes, or `timeout` passes, as a lone lease's
    /// [`LeaseView::wait_change`]; the new state if it changed.
    pub fn wait_change(&self, lease: &LeaseName, timeout: Duration) -> Option<Leadership> {
        self.publishers.get(lease)?.wait_change(timeout)
    }

    /// While this node leads `lease`, the time left before it demotes
    /// itself unless a renewal succeeds first (a lone lease's
    /// `time_left()`); `None` otherwise.
    pub fn time_left(&self, lease: &LeaseName) -> Option<Duration> {
        self.publishers.get(lease).and_then(|p| p.time_left())
    }

    /// A watch of the leases this node leads, with their epochs, updated
    /// at every change (usable with or without a tokio runtime); empty
    /// once the set has finished. As a lone lease's [`LeaseView::watch`],
    /// it is the loop's last word: a lease can stay in it past its
    /// deadline while the loop is late. Gate work on
    /// [`SetView::leadership`], [`SetView::wait_for`] or a lease's
    /// [`LeaseView::leader_until`], which the deadline ends by itself.
    pub fn watch(&self) -> watch::Receiver<BTreeMap<LeaseName, Epoch>> {
        self.held.clone()
    }

    /// Every lease's leadership changes from now on, in order, each
    /// [`crate::Transition`] naming its lease; bounded as a lone lease's
    /// (see [`Subscription`]), at [`crate::SUBSCRIPTION_CAPACITY`] plus
    /// two per lease. Any number may be taken; a builder's `subscribe()`
    /// sees them from the start.
    pub fn subscribe(&self) -> Subscription {
        self.fanout.subscribe()
    }

    /// What this node holds, whom it sees, its share, its loop's health.
    pub fn snapshot(&self) -> SetSnapshot {
        self.snapshots().snapshot()
    }

    /// A cheap, cloneable reader of [`SetView::snapshot`] and of each
    /// lease's leadership, for other threads (an HTTP server's, say); it
    /// outlives the handle.
    pub fn snapshots(&self) -> SetSnapshots {
        crate::Snapshots::new(crate::snapshots::SetReader {
            snapshot: Arc::clone(&self.snapshot),
            health: Arc::clone(&self.health),
            wedge: Arc::clone(&self.wedge),
            publishers: Arc::clone(&self.publishers),
        })
    }
}

/// A set's [`crate::Snapshots`]: the reader of a [`SetSnapshot`].
pub type SetSnapshots = crate::Snapshots<SetView>;

#[cfg(test)]
mod tests {
    use super::*;

    use crate::runner::test_template as template;

    #[test]
    fn a_set_is_wedged_once_its_loop_has_not_stepped_for_the_bound() {
        let stall_after = crate::publish::stall_after(&template());
        // interval 250 ms + 2 × 250 ms + max(250 ms, 100 ms): the single
        // lease's bound for the same timings.
        assert_eq!(stall_after, Duration::from_millis(1_000));
        let t0 = std::time::Instant::now();
        let status = SetSnapshot {
            last_step: Some(t0),
            stall_after,
            ..SetSnapshot::default()
        };
        let healthy = t0 + stall_after;
        assert_eq!(status.since_progress_at(healthy), stall_after);
        assert!(!status.is_wedged_at(t0));
        assert!(!status.is_wedged_at(healthy), "at the bound, still healthy");
        let wedged = healthy + Duration::from_millis(1);
        assert!(status.is_wedged_at(wedged));
        // A step brings it back.
        let stepped = SetSnapshot {
            last_step: Some(wedged),
            ..status.clone()
        };
        assert!(!stepped.is_wedged_at(wedged + Duration::from_millis(1)));
        // A finished set is stopped, not wedged; a status no driver wrote
        // is neither.
        let finished = SetSnapshot {
            finished: true,
            ..status.clone()
        };
        assert!(!finished.is_wedged_at(wedged));
        assert_eq!(SetSnapshot::default().since_progress(), Duration::ZERO);
        assert!(!SetSnapshot::default().is_wedged());
    }
}
