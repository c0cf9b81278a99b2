//! What gated work of a set is handed when one of its leases' terms
//! starts, and how it reads its deadline without the set's loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picolease_core::{Epoch, HolderId, LeaseName};

use crate::cancellation::Cancellation;
use crate::view::Term;

/// Each held lease's deadline on the boot-time clock ([`crate::boottime`]),
/// shared with its work.
pub(crate) type Deadlines = Arc<Mutex<HashMap<LeaseName, (Epoch, Duration)>>>;

/// What gated work of a set is handed when one of its leases' terms
/// starts: the lease, the holder, the epoch (the fencing token: check it
/// in your own writes), the term's deadline and the signal to stop.
#[derive(Clone, Debug)]
pub struct SetLeaderContext {
    /// The lease this work is for.
    pub lease: LeaseName,
    /// This node's holder id.
    pub holder: HolderId,
    /// The term's epoch.
    pub epoch: Epoch,
    /// Set when the term ends (lost, expired, given up, shut down).
    pub cancellation: Cancellation,
    pub(super) term: Term,
    pub(super) deadlines: Deadlines,
}

impl SetLeaderContext {
    /// The term (lease, holder, epoch), as single-lease work sees it.
    pub fn term(&self) -> &Term {
        &self.term
    }

    /// The term's current deadline on the boot-time clock
    /// ([`crate::boottime`]), moved forward by each renewal; `None` once
    /// the term is over.
    pub fn deadline(&self) -> Option<Duration> {
        let deadlines = self.deadlines.lock().unwrap_or_else(|p| p.into_inner());
        deadlines
            .get(&self.lease)
            .filter(|(epoch, _)| *epoch == self.epoch)
            .map(|&(_, at)| at)
    }

    /// Time left before the term's deadline (zero once it has passed or
    /// the term is over), on the suspend-aware clock; renewals push it
    /// back.
    pub fn time_left(&self) -> Duration {
        self.deadline().map_or(Duration::ZERO, |at| {
            at.saturating_sub(crate::clock::boottime())
        })
    }

    /// True once the work must stop: the driver stopped it (lost, given
    /// up, shut down), or its deadline has passed, which this reads
    /// itself, as the single lease's `LeaderContext::is_cancelled` does:
    /// the set's thread may be blocked in a batch, and work that polls
    /// this in a loop must still stop by the deadline.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled() || self.time_left().is_zero()
    }

    /// Sleeps up to `timeout`, waking at once when the term ends or its
    /// deadline passes; true if the work must stop.
    pub fn sleep(&self, timeout: Duration) -> bool {
        let until = std::time::Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            let to_deadline = self.time_left();
            if to_deadline.is_zero() {
                return true;
            }
            let step = left.min(to_deadline);
            if self.cancellation.wait_timeout(step) {
                return true;
            }
            if step == left {
                return self.is_cancelled();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guarantee that does not rest on the set's loop (which may be
    /// blocked in a batch): the work reads its deadline itself, so a work
    /// that sleeps and a work that polls in a busy loop both stop at the
    /// deadline although nobody cancels them.
    #[test]
    fn set_work_stops_at_its_deadline_with_nobody_cancelling_it() {
        let lease = LeaseName::new("a").unwrap();
        let holder = HolderId::new("me").unwrap();
        let epoch = Epoch::new(3);
        let context = |deadlines: &Deadlines| SetLeaderContext {
            term: Term::new(lease.clone(), holder.clone(), epoch),
            lease: lease.clone(),
            holder: holder.clone(),
            epoch,
            cancellation: Cancellation::default(),
            deadlines: Arc::clone(deadlines),
        };
        let deadlines = Deadlines::default();
        let set_deadline = |after: Duration| {
            let at = crate::clock::boottime() + after;
            deadlines.lock().unwrap().insert(lease.clone(), (epoch, at));
            at
        };

        let at = set_deadline(Duration::from_millis(40));
        let sleeper = context(&deadlines);
        assert!(!sleeper.is_cancelled());
        assert!(sleeper.time_left() > Duration::ZERO);
        assert!(sleeper.time_left() <= Duration::from_millis(40));
        assert!(sleeper.sleep(Duration::from_secs(3600)), "woken as ended");
        assert!(crate::clock::boottime() >= at, "not before the deadline");
        assert!(sleeper.is_cancelled());
        assert_eq!(sleeper.time_left(), Duration::ZERO);
        assert!(!sleeper.cancellation.is_cancelled(), "nobody cancelled it");

        let at = set_deadline(Duration::from_millis(40));
        let poller = context(&deadlines);
        let mut spins = 0u64;
        while !poller.is_cancelled() {
            spins += 1;
        }
        assert!(crate::clock::boottime() >= at);
        assert!(spins > 0, "it polled before the deadline");

        // Another term's deadline, or none, is no time left for this one.
        deadlines.lock().unwrap().insert(
            lease.clone(),
            (
                Epoch::new(4),
                crate::clock::boottime() + Duration::from_secs(60),
            ),
        );
        assert!(context(&deadlines).is_cancelled());
        deadlines.lock().unwrap().clear();
        let over = context(&deadlines);
        assert!(over.is_cancelled());
        assert!(over.sleep(Duration::from_secs(3600)));
    }
}
