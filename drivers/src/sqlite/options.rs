//! The options a lone lease and a lease set take alike on SQLite: one
//! struct, and one macro that gives both builders the same five methods
//! (`while_leader`, `when_term_ends`, `clock`, `notifications`,
//! `change_check`) with the same meaning, as `postgres/options.rs` does
//! for PostgreSQL (which has no `when_term_ends`: there a task that
//! awaits the term's end holds no thread).

use std::sync::Arc;

use super::changes::Notices;
use super::gate::{TermEnd, Work};
use crate::clock::SharedClock;

/// The gated work, the clock and the release notices of a builder.
pub(crate) struct SqliteOptions {
    pub(crate) works: Vec<Work>,
    pub(crate) term_ends: Vec<TermEnd>,
    pub(crate) clock: SharedClock,
    pub(crate) notices: Notices,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            works: Vec::new(),
            term_ends: Vec::new(),
            clock: crate::clock::system(),
            notices: Notices::Watch,
        }
    }
}

impl SqliteOptions {
    /// `works` and `term_ends` added to a gate, for a lease's (or one
    /// lease of a set's) terms.
    pub(crate) fn add_works_to(&self, gate: &mut super::gate::Gate) {
        for work in &self.works {
            gate.add(Arc::clone(work));
        }
        for end in &self.term_ends {
            gate.add_term_end(Arc::clone(end));
        }
    }
}

/// The builder methods of [`SqliteOptions`], for a builder with a field
/// `options: SqliteOptions`.
macro_rules! sqlite_option_methods {
    () => {
        /// Registers work to run while this node leads (in a set: while it
        /// leads each of its leases): `work` is started on its own thread
        /// at the start of every term with the term's [`LeaderContext`]
        /// (the lease, epoch, fence and deadline), and must return soon
        /// after the term ends ([`LeaderContext::sleep`] wakes at once
        /// then). The lease is released only after it has returned, and
        /// the lease's next term starts only after. Several may be
        /// registered.
        pub fn while_leader(
            mut self,
            work: impl Fn(LeaderContext) + Send + Sync + 'static,
        ) -> Self {
            self.options.works.push(std::sync::Arc::new(work));
            self
        }

        /// Registers a closure to run when each term ends (in a set: each
        /// term of each of its leases), with the term that ended, on a
        /// thread of its own started then; the lease is released only
        /// after it returns. For what must come before the release without
        /// a thread for the whole term, as [`while_leader`](Self::while_leader)
        /// work has (a set may hold thousands of leases): `picolease run`
        /// with several names and no CMD waits here for a term's
        /// `follower` line to be printed. Keep it short: the release, and
        /// so the successor, waits for it.
        pub fn when_term_ends(mut self, end: impl Fn(crate::Term) + Send + Sync + 'static) -> Self {
            self.options.term_ends.push(std::sync::Arc::new(end));
            self
        }

        /// Times deadlines on `clock` instead of the system's suspend-aware
        /// clock: a test seam (a clock that jumps, as a suspend would).
        pub fn clock(mut self, clock: impl crate::clock::Clock) -> Self {
            self.options.clock = std::sync::Arc::new(clock);
            self
        }

        /// Release notifications (on by default): while the node waits for
        /// a lease (a lone lease's follower; a set under its share), it
        /// watches the database file (inotify on its directory) and, when
        /// another connection commits, checks `PRAGMA data_version` and
        /// looks at once (a lone lease reads its row and tries if the row
        /// is free or lapsed; a set surveys). A clean handover then takes
        /// milliseconds instead of up to one interval. Without inotify
        /// (macOS and the BSDs, which have none, or a watch that cannot be
        /// set up) it polls `PRAGMA data_version` every
        /// [`DEFAULT_CHANGE_CHECK`](super::DEFAULT_CHANGE_CHECK) instead.
        /// The trade: on a busy file the node also wakes for unrelated
        /// writes, each costing one read (never an acquire unless a lease
        /// is free). Off: a release is found at the next poll or survey,
        /// within an interval.
        pub fn notifications(mut self, on: bool) -> Self {
            self.options.notices = if on {
                super::changes::Notices::Watch
            } else {
                super::changes::Notices::Off
            };
            self
        }

        /// Release notifications by polling `PRAGMA data_version` every
        /// `every` (at least 1 ms) instead of watching the file: for
        /// filesystems whose change notifications miss other writers.
        pub fn change_check(mut self, every: std::time::Duration) -> Self {
            self.options.notices =
                super::changes::Notices::Poll(every.max(std::time::Duration::from_millis(1)));
            self
        }
    };
}

pub(crate) use sqlite_option_methods;
