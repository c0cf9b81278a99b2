//! The options a lone lease and a lease set take alike on SQLite: one
//! struct, set by the builder's five methods (`handle.rs`:
//! `while_leader`, `when_term_ends`, `clock`, `notifications`,
//! `change_check`), as `server/options.rs` is for the server databases
//! (which have no `when_term_ends`: there a task that awaits the term's
//! end holds no thread).

use std::sync::Arc;

use super::changes::Notices;
use super::gate::{TermEnd, Work};
use crate::clock::SharedClock;
use crate::supervise::{BlockingProbe, RestartPolicy};

/// The gated work, the clock and the release notices of a builder.
pub(crate) struct SqliteOptions {
    pub(crate) works: Vec<Work>,
    pub(crate) term_ends: Vec<TermEnd>,
    pub(crate) clock: SharedClock,
    pub(crate) notices: Notices,
    /// How failing work is restarted and when it escalates.
    pub(crate) restart: RestartPolicy,
    /// The health probe, if any.
    pub(crate) probe: Option<BlockingProbe>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            works: Vec::new(),
            term_ends: Vec::new(),
            clock: crate::clock::system(),
            notices: Notices::Watch,
            restart: RestartPolicy::default(),
            probe: None,
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
