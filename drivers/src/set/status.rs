//! What a set's handle reads: the status both drivers keep, and the
//! transitions.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use picolease_core::{Epoch, HolderId, Leadership, LeaseName};

use super::SetTransition;

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

/// Each lease's last published leadership, as a lone lease's
/// `leadership()` reads its own.
pub(crate) type Leaderships = Arc<Mutex<HashMap<LeaseName, Leadership>>>;

/// What a set's handle reads, the same on both drivers: the transitions
/// (taken once) and the status.
///
/// Both set handles ([`crate::sqlite::SqliteLeaseSet`],
/// [`crate::postgres::PgLeaseSet`]) dereference to it, as lease handles
/// do to [`crate::LeaseView`].
#[derive(Debug)]
pub struct SetView {
    pub(super) status: SharedStatus,
    pub(super) wedge: Arc<AtomicBool>,
    pub(super) leaderships: Leaderships,
    pub(super) transitions: Mutex<Option<mpsc::Receiver<SetTransition>>>,
}

impl SetView {
    /// Every lease's transitions, in order, from the start (the first call
    /// takes the receiver; later calls get `None`).
    pub fn transitions(&self) -> Option<mpsc::Receiver<SetTransition>> {
        self.transitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// What this node holds, whom it sees, its share.
    pub fn status(&self) -> SetStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A reader of [`SetView::status`] for other threads.
    pub fn status_view(&self) -> SetStatusView {
        SetStatusView(
            Arc::clone(&self.status),
            Arc::clone(&self.wedge),
            Arc::clone(&self.leaderships),
        )
    }

    /// `lease`'s leadership as last published (leader with its epoch, or
    /// follower with the holder and epoch last seen and why it left;
    /// [`Leadership::unknown`] before anything was), as a lone lease's
    /// `leadership()`; `None` for a lease outside the set.
    pub fn leadership(&self, lease: &LeaseName) -> Option<Leadership> {
        self.leaderships
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(lease)
            .cloned()
    }
}

/// A cheap, cloneable reader of a set's [`SetStatus`], for threads that
/// do not own the handle (an HTTP endpoint, say).
#[derive(Clone, Debug, Default)]
pub struct SetStatusView(pub(crate) SharedStatus, Arc<AtomicBool>, Leaderships);

impl SetStatusView {
    /// The status as of the set's last step.
    pub fn get(&self) -> SetStatus {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `lease`'s leadership as last published ([`SetView::leadership`]).
    pub fn leadership(&self, lease: &LeaseName) -> Option<Leadership> {
        self.2
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(lease)
            .cloned()
    }

    /// Test seam: blocks the set's loop at its next step, for ever, so
    /// that a health check can be seen to fail (as
    /// [`crate::Snapshots::wedge_loop_for_tests`]). Not for production use.
    #[doc(hidden)]
    pub fn wedge_loop_for_tests(&self) {
        self.1.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::set::test_template as template;

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
}
