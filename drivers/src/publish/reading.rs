//! What a reader of a [`Publisher`] gets: leadership as of now, not as
//! of the loop's last step (DESIGN §4b). The loop publishes; a reader may
//! come while the loop is late (a resumed process, a starved thread, a
//! statement blocked in I/O), so every reading a user takes checks the
//! published deadline against the clock itself: the leadership, the time
//! left, the blocking waits (which wake at the deadline) and the gauges a
//! scrape refreshes. The watch channel alone carries the loop's word as
//! it was published.

use std::time::Duration;

use picolease_core::Leadership;

use super::{Progress, Publisher};
use crate::lock::lock;

impl Publisher {
    /// Time left before the leader's deadline: `None` when not leading,
    /// zero once it has passed.
    pub(crate) fn time_left(&self) -> Option<Duration> {
        self.deadline()
            .map(|deadline| deadline.saturating_sub(self.now()))
    }

    /// The leadership a reader may act on now: the last publication,
    /// except that a leader whose deadline has passed (or is not known)
    /// reads as the follower it is by then, reason `expired`, whether or
    /// not the driver's loop has run since (DESIGN §4b: a resumed process,
    /// a starved thread or a blocked statement delays the loop, never this
    /// reading).
    pub(crate) fn leadership(&self) -> Leadership {
        let published = self.published();
        if !published.is_leader() || self.term_runs() {
            return published;
        }
        Leadership {
            role: picolease_core::Role::Follower,
            reason: Some(picolease_core::Demotion::Expired),
            ..published
        }
    }

    /// The loop's last publication, as the watch channel carries it.
    pub(crate) fn published(&self) -> Leadership {
        self.leadership.borrow().clone()
    }

    /// True while a deadline is recorded and has not passed on the
    /// driver's clock.
    fn term_runs(&self) -> bool {
        self.deadline()
            .is_some_and(|deadline| self.now() < deadline)
    }

    /// Brings the leader and time-left gauges to this moment rather than
    /// the loop's last step: a scrape handler calls it before rendering
    /// (through [`crate::Snapshots::refresh_metrics`]).
    #[cfg(feature = "metrics")]
    pub(crate) fn refresh_metrics(&self) {
        let leads = self.leadership().is_leader();
        // A set member's series exist once it has changed: a lease it
        // does not lead by its last publication has nothing to refresh.
        let Some(series) = self.series() else {
            return;
        };
        if matches!(series, crate::metrics::LeaseSeries::OnChange(_))
            && !self.published().is_leader()
        {
            return;
        }
        series.leads(leads);
        series.time_left(self.time_left().filter(|_| leads));
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

    /// Blocks until `ready` holds (checked now, after every change and at
    /// the leader's deadline, when the reading of [`Publisher::leadership`]
    /// changes without a publication), the driver finishes, or `timeout`
    /// passes; true unless it timed out.
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
            // Wake at the term's end too (a millisecond past it, so that
            // the reading has turned), capped as the loops' waits are.
            let term_end = self
                .time_left()
                .filter(|_| self.published().is_leader())
                .map_or(left, |end| {
                    (end + Duration::from_millis(1)).min(crate::clock::LONGEST_WAIT)
                });
            progress = self
                .changed
                .wait_timeout(progress, left.min(term_end))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}
