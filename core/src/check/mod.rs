//! Exhaustive model checking of the real [`LeaseState`](crate::LeaseState),
//! and of the real [`LeaseSet`](crate::LeaseSet) (see [Lease
//! sets](#lease-sets)) (feature `sim`).
//!
//! [`check`] explores, breadth first, every interleaving of 2 or 3
//! contenders, the model database ([`ModelDb`](crate::sim::ModelDb), the
//! same statements the simulator and the model-vs-real tests use) and the
//! connections between them, up to the [`Bounds`]: every clock tick, timer,
//! delivery and fault in every order. It checks DESIGN §6 on every step
//! and returns, for each property violated, a shortest trace as one line of
//! text that [`replay`] turns back into the story of the run.
//!
//! # The model
//!
//! - **Clocks** advance one tick (1 ms) at a time, each on its own step:
//!   the database clock (real time) and each node's local clock. A node's
//!   timer is urgent: its clock does not advance past its `poll_timeout`
//!   before the timer step runs (a driver wakes at its timeout; waking late
//!   is a pause).
//! - **Drift.** Let `skew` = local ticks − database ticks since the node
//!   started, and `D` = `drift_ticks` = ρ·ttl (`Config::drift` is set to
//!   `D` ms). Every step keeps, for every live node, `|skew| ≤ D` and
//!   `|skew − skew(send)| ≤ D` for the sends that can still matter: the
//!   request in flight and the request whose success set the current
//!   deadline. That is, over every window from such a send to now, the two
//!   clocks' elapsed times differ by at most ρ·ttl, the relation the
//!   deadline `send + ttl − ρ·ttl − resolution` relies on: when the leader's
//!   clock reaches it, at most `ttl − 1` database ticks have passed since
//!   the send, so the row (expiring `ttl` after it ran, no earlier than the
//!   send) is still its own. Rate-bounded clocks satisfy it on every window
//!   up to a ttl long, which is all the deadline covers.
//! - **Connections** are in order per node and per direction (TCP). The
//!   head message is delivered within `delivery_ticks` database ticks
//!   unless a fault makes it late (then without limit). A request the node
//!   abandoned is dropped at the database (cancelled), unless it strayed:
//!   `stray` models the cancel losing the race on PostgreSQL, the statement
//!   then running whenever, out of order (ARCHITECTURE's known residual
//!   risk).
//! - **Processes** pause (the clock keeps running, inputs queue), resume
//!   (timer first, as in the simulator), crash (the row stays), restart
//!   with a new holder id, and shut down. Each fault counts against
//!   `Bounds::faults`.
//! - **Twins** (`Bounds::twins`, on by default): nodes 0 and 1 are two
//!   processes given the same node name, their holder ids
//!   [`HolderId::incarnation`](crate::HolderId::incarnation) of it with
//!   different nonces.
//! - **Failover** (`Bounds::failovers`, 0 by default;
//!   [`Bounds::with_failover`], [`Bounds::with_failovers`]): standbys copy
//!   the database at `db:replicate` steps, and once the next one has the
//!   row, `db:failover` (a fault) promotes it: the writes since its last
//!   copy are lost and the server incarnation changes (DESIGN §3
//!   "Failover"). With two, the second standby may lack what the first
//!   wrote after its promotion. Terms the lost history granted are exempt
//!   from validity (their rows are gone), not from mutual exclusion or
//!   fencing; and no server may write an epoch an earlier one issued.
//! - **Orphan row** (`Bounds::orphan`, on by default for 2 nodes): a path
//!   may begin (`db:orphan`) with the row held by a process that died just
//!   before, lapsing one interval later, so the contenders race for a
//!   lapsed row each on its own schedule. Not a fault: it is how a cluster
//!   finds the lease after its leader died. It is what lets a single fault
//!   (a stray acquire of the race's winner) expose a database that renews
//!   without the epoch condition.
//! - **Stop lead** (`Bounds::stop_lead_ticks`, see
//!   [`Bounds::with_stop_lead`]): every machine runs with
//!   `Config::stop_lead` = g.
//! - **Ranks** ([`Bounds::ranked`], see [`Bounds::with_ranks`]): node `n`
//!   has priority `n + 1` (DESIGN §3 "Preferred holders"): followers announce
//!   themselves to the model database's preferred-candidate row and a
//!   leader yields to a better live candidate; nodes are then not
//!   interchangeable, and the fingerprint does not rename them.
//!
//! # The properties
//!
//! - **Mutual exclusion**: no state has two nodes that believe they lead
//!   (published leader) and can act (not paused), twins included. Real time is the
//!   database clock; a paused leader's interval is cut at the pause, as in
//!   the simulator's trace.
//! - **Fencing**: each leadership's epoch exceeds the previous one's.
//! - **Validity**: a node that leads at epoch e has the row (itself, e)
//!   unexpired at the database clock. After a stray acquire of its own
//!   bumped the row (the residual risk, covered by fencing), only (itself,
//!   any epoch) unexpired is asked, until its next acquire runs or renew is
//!   accepted: the correct machine's next renew is then rejected and it
//!   demotes, while a database that renews without the epoch condition
//!   accepts it and the violation shows.
//! - **Gating**: work starts only on a leader publication at its epoch,
//!   stops before any follower publication, never overlaps, and is stopped
//!   before a machine finishes.
//! - **Stop lead**: a running node's work is stopped no later than its
//!   local `deadline − g` (at that tick only while its timer, due then, has
//!   yet to run), and while it runs the row is the node's with more than
//!   `g` database ticks left. A paused process's work is frozen with it.
//!   With `g = 0` this is the deadline itself (and validity).
//! - **Progress**: a timer never asks to be woken again at once.
//! - **Preference** (with ranks): every handover a machine sends names a
//!   node of strictly higher rank than its own, so yields only go up and
//!   never loop.
//! - **Liveness** (bounded): with a node able to lead (running, not
//!   shutting down, its connection not late), no leaderless stretch longer
//!   than `liveness_ticks` database ticks since the last fault.
//!
//! # Lease sets
//!
//! With [`Bounds::leases`] > 0 (start from [`Bounds::for_set`]) each node
//! is the real [`LeaseSet`](crate::LeaseSet) over the same leases (`s0`,
//! `s1`, …) instead of a lone `LeaseState`: its batches travel on the same
//! connections, run on the model database through the batch statements
//! and the real decoders (the set simulator's glue), and the same steps,
//! faults, search and replay apply. The driver modelled carries every
//! command out at once; a work asked to stop stops on the spot and is
//! confirmed (`handle_work_stopped`) right after; a release's notifications
//! reach each other live node as one message. On every step it checks, per
//! lease, mutual exclusion, fencing, validity, gating and the stop lead
//! (work runs only while the node holds the lease's row at the work's
//! epoch with more than `g` left: DESIGN §9's "no lease is worked by two
//! nodes"), the set's progress (its timer never asks to be woken again at
//! once), and **no stealing** ([`Property::Stealing`]): an acquire the
//! database runs never takes a row another holder holds unexpired
//! (DESIGN §9: the share moves only through releases and expiries).
//! **Liveness** is the lone lease's, per lease (`liveness_ticks`, for a
//! set ttl + 2·interval): with a node able to lead, no lease goes without
//! a leader for longer than the bound since the start or the last fault.
//! The breadth-first search reaches only 6 or 7 database ticks by depth
//! 30, short of that bound, so for a set the property is shown on long
//! prompt schedules replayed (`tests/check_mutants.rs`: the real set leads
//! within it, a share rounded down for every member never does).
//!
//! The fingerprint keeps holder ids whole and does not rename nodes: a
//! set ranks members and prefers leases by holder id, so nodes are not
//! interchangeable (see `set/canon.rs`). That, and a set's larger state,
//! make the space far larger than a lone lease's: 2 nodes × 2 leases
//! without faults grow by about 1.4× per level past depth 25 (the search
//! keeps about 80 bytes a state: the states to explore are rebuilt from
//! their paths, `search.rs`), so the check is bounded by depth, not
//! exhausted. Depth 30 (both nodes survey twice, plan and acquire; a node
//! that took both leases before it saw the other starts giving one up:
//! 2,640,968 states, 5,778,240 transitions, about a minute) runs in
//! `cargo test -p picolease-core --features sim --test check_set`; depth
//! 31 and 1 fault to depth 24 are `#[ignore]`d there (their figures in
//! `check_set.rs` predate per-lease liveness and were not re-measured), and
//! `LEASES=2 cargo run --release -p picolease-core --features sim --example check -- 2 0 32`
//! runs any bounds. Three bugs planted behind feature `mutants` are found
//! (`tests/check_mutants.rs`): a batch acquire that takes held rows (no
//! stealing, 24 steps), a set that yields a lease for the share without
//! stopping its work (gating, 32 steps) and a share rounded down for every
//! member (liveness, 111 steps of a prompt schedule over 1 lease).
//!
//! # Trace text
//!
//! Steps joined by `;`, e.g. `n0:timer;db:n0;n0:recv;tick:db`: see
//! [`Step`] for every form.

mod bounds;
mod canon;
mod channel;
mod contender;
mod invariants;
mod lone;
mod relation;
mod replay;
mod search;
mod set;
mod step;
mod timeline;
mod world;

#[cfg(feature = "mutants")]
#[doc(hidden)]
pub use bounds::SetupMutation;
pub use bounds::{Bounds, BoundsError, MAX_DEPTH, TICK};
pub use replay::{
    replay, Replay, ReplayStep, Standing, TraceParseError, TraceProblem, RANKED_SET_YIELD,
};
pub use step::{Step, UnknownStep};

use std::fmt;
use std::time::Duration;

use set::SetWorld;
use world::{Setup, World};

/// An invariant of DESIGN §6 (or the model itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Property {
    /// Two nodes lead at once.
    MutualExclusion,
    /// A leadership's epoch does not exceed the previous one's.
    Fencing,
    /// A leader's row is not (itself, its epoch) unexpired.
    Validity,
    /// Gated work out of step with leadership.
    Gating,
    /// A timer asks to be woken again at once.
    Progress,
    /// No leader for longer than the bound.
    Liveness,
    /// Work still running at or past `deadline − stop_lead`, or with less
    /// than the stop lead left on its row.
    StopLead,
    /// A lease set's acquire took a row another holder held unexpired
    /// (DESIGN §9: balancing never steals).
    Stealing,
    /// With ranked nodes, a leader handed its lease to a node that does
    /// not outrank it (DESIGN §3 "Preferred holders": yields only go up,
    /// so they never loop).
    Preference,
    /// With health probes, a leader whose probe fails still leads although
    /// its last renewal read a live candidate on another node (DESIGN §5
    /// "Work that fails": an unhealthy leader yields to any live
    /// candidate, and announcements come only from healthy nodes).
    Health,
    /// The model could not be set up (a holder id or configuration the
    /// core refused); never expected.
    Setup,
}

impl Property {
    /// The property's name as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Property::MutualExclusion => "mutual exclusion",
            Property::Fencing => "fencing",
            Property::Validity => "validity",
            Property::Gating => "gating",
            Property::Progress => "progress",
            Property::Liveness => "liveness",
            Property::StopLead => "stop lead",
            Property::Stealing => "no stealing",
            Property::Preference => "yields only upward",
            Property::Health => "an unhealthy leader yields",
            Property::Setup => "setup",
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A property violated, with a shortest trace that reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which property.
    pub property: Property,
    /// What was seen, at the last step.
    pub detail: String,
    /// The steps from the start, as trace text ([`replay`] reads it).
    pub trace: String,
    /// The number of steps.
    pub depth: usize,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} violated after {} steps: {}\ntrace: {}",
            self.property, self.depth, self.detail, self.trace
        )
    }
}

/// When to stop short of the bounds. A search stopped by its budget is not
/// `complete`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    /// Stop once this many distinct states were seen.
    pub max_states: Option<usize>,
    /// Stop after this much wall time.
    pub max_time: Option<Duration>,
    /// Stop at the first violation (its trace is still a shortest one).
    pub stop_at_first_violation: bool,
    /// Stop before the process's memory passes a limit.
    pub memory: Option<MemoryBudget>,
}

/// A limit on the memory of the process running a check, and how to read
/// what it uses. The core does no I/O: the caller supplies the reading
/// (the CLI reads the resident set from `/proc/self/status`). The search
/// reads it every [`MEMORY_CHECK_EVERY`] states it expands and stops,
/// reporting the depth it completed, once the reading reaches the limit:
/// a search that would outgrow the machine ends as incomplete instead of
/// being killed (issue 48).
#[derive(Clone, Copy, Debug)]
pub struct MemoryBudget {
    /// The most the process may use, in bytes.
    pub limit_bytes: u64,
    /// What the process uses now, in bytes; `None` when it cannot be read
    /// (the search then goes on).
    pub used_bytes: fn() -> Option<u64>,
}

impl PartialEq for MemoryBudget {
    /// Budgets are equal by their limits (a reading function has no
    /// meaningful identity).
    fn eq(&self, other: &Self) -> bool {
        self.limit_bytes == other.limit_bytes
    }
}

impl Eq for MemoryBudget {}

/// How many states the search expands between two readings of the memory
/// in use: a reading costs microseconds, and the successors of 256 states
/// of a two-lease set add a few hundred states (about 80 bytes each: the
/// states to explore are rebuilt from their paths, not kept).
pub const MEMORY_CHECK_EVERY: usize = 256;

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stopped::AtViolation => write!(f, "at the first violation"),
            Stopped::States => write!(f, "the state budget"),
            Stopped::Time => write!(f, "the time budget"),
            Stopped::Memory(used) => {
                write!(f, "the memory budget: {} MiB in use", used / (1024 * 1024))
            }
        }
    }
}

/// Why a search stopped short of its bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// At the first violation, as asked.
    AtViolation,
    /// [`Budget::max_states`] distinct states (or the index's limit).
    States,
    /// [`Budget::max_time`] passed.
    Time,
    /// The memory in use reached [`MemoryBudget::limit_bytes`]: this
    /// reading, in bytes.
    Memory(u64),
}

/// Reported after each breadth-first level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The level just finished.
    pub depth: usize,
    /// Distinct states so far.
    pub states: usize,
    /// Steps taken so far.
    pub transitions: u64,
    /// States at the next level.
    pub frontier: usize,
    /// Wall time so far.
    pub elapsed: Duration,
    /// The memory in use after the level, in bytes, when the budget has a
    /// way to read it.
    pub used_bytes: Option<u64>,
}

/// The outcome of a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Contenders.
    pub nodes: usize,
    /// Leases of each node's set; 0 for the lone-lease check.
    pub leases: usize,
    /// Distinct states (up to the symmetries of the fingerprint).
    pub states: usize,
    /// Steps taken.
    pub transitions: u64,
    /// The deepest level that held a new state.
    pub depth: usize,
    /// True when the search explored everything within the bounds; false
    /// when the budget stopped it.
    pub complete: bool,
    /// Why it stopped short, when it did.
    pub stopped: Option<Stopped>,
    /// The deepest level whose every state was expanded: every path of
    /// that many steps was checked.
    pub completed_depth: usize,
    /// States at the depth bound whose successors were not explored: 0
    /// when the whole reachable space within the fault bound was covered.
    pub frontier_left: usize,
    /// The first violation of each property, by shortest trace.
    pub violations: Vec<Violation>,
    /// Wall time.
    pub elapsed: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.leases > 0 {
            write!(f, "{} nodes × {} leases: ", self.nodes, self.leases)?;
        } else {
            write!(f, "{} nodes: ", self.nodes)?;
        }
        write!(
            f,
            "{} states, {} transitions, depth {}, {}{} in {:.1?}",
            self.states,
            self.transitions,
            self.depth,
            match self.stopped {
                None => "complete".to_string(),
                Some(why) => format!(
                    "stopped early ({why}) with every path of {} steps checked",
                    self.completed_depth
                ),
            },
            if self.frontier_left > 0 {
                format!(" ({} states left at the depth bound)", self.frontier_left)
            } else {
                String::new()
            },
            self.elapsed
        )?;
        if self.violations.is_empty() {
            write!(f, ", no violation")
        } else {
            for v in &self.violations {
                write!(f, "\n{v}")?;
            }
            Ok(())
        }
    }
}

/// Why a check could not start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The bounds are out of range.
    #[error(transparent)]
    Bounds(#[from] BoundsError),
    /// The core refused the configuration derived from the bounds.
    #[error("the lease configuration derived from the bounds: {0}")]
    Config(#[from] crate::ConfigError),
}

/// Explores every path within `bounds`, breadth first, checking every
/// property on every step. `progress` is called after each level. With
/// `bounds.leases` > 0 the contenders are lease sets (see [Lease
/// sets](self#lease-sets)).
pub fn check(
    bounds: &Bounds,
    budget: Budget,
    progress: impl FnMut(&Progress),
) -> Result<Report, CheckError> {
    bounds.validate()?;
    let setup = Setup::new(bounds.clone());
    if bounds.leases > 0 {
        let initial = SetWorld::new(&setup)?;
        return Ok(search::run(&setup, initial, budget, progress));
    }
    let initial = <World>::new(&setup)?;
    Ok(search::run(&setup, initial, budget, progress))
}
