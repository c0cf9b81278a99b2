//! Replaying a trace: the steps of a violation, one by one, with what each
//! did.

use std::fmt;

use super::bounds::{Bounds, BoundsError};
use super::search::Model;
use super::set::SetWorld;
use super::step::{Step, UnknownStep};
use super::world::{Log, Setup, World};
use super::Violation;

/// One replayed step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayStep {
    /// The step's text.
    pub step: String,
    /// What it did: statements sent and run, replies, commands.
    pub effects: Vec<String>,
    /// The nodes and the row after it.
    pub state: String,
    /// Who leads what after it, for a picture of the replay
    /// (`picolease check --timeline`).
    pub standing: Standing,
}

/// The leaders and the nodes out of the game after a step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    /// The database clock, in ticks.
    pub db_tick: u64,
    /// Every node that believes it leads a lease: (node, lease, epoch).
    pub leaders: Vec<(usize, String, u64)>,
    /// Crashed or finished nodes.
    pub down: Vec<usize>,
    /// Paused nodes.
    pub paused: Vec<usize>,
}

/// A trace replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    /// Every step up to the violation (or the end of the trace).
    pub steps: Vec<ReplayStep>,
    /// The violation the trace reaches, if any; its `trace` is the steps
    /// replayed.
    pub violation: Option<Violation>,
}

impl fmt::Display for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.steps.iter().enumerate() {
            writeln!(f, "{:>4}  {:<14} {}", i + 1, s.step, s.state)?;
            for e in &s.effects {
                writeln!(f, "{:>20}{e}", "")?;
            }
        }
        match &self.violation {
            Some(v) => write!(f, "{} VIOLATED: {}", v.property, v.detail),
            None => write!(f, "no violation"),
        }
    }
}

/// What is wrong with one step of a trace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceProblem {
    /// Not a step at all.
    #[error(transparent)]
    Unknown(#[from] UnknownStep),
    /// A node the bounds do not have.
    #[error("there is no such node with {nodes} nodes")]
    NoSuchNode {
        /// Nodes in the bounds.
        nodes: usize,
    },
    /// A step that cannot happen in the state reached.
    #[error("not possible here ({state})")]
    NotEnabled {
        /// The state the step was tried in.
        state: String,
    },
}

/// A trace that cannot be replayed, naming the bad step (1-based).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceParseError {
    /// The bounds are out of range.
    #[error(transparent)]
    Bounds(#[from] BoundsError),
    /// The trace has no step.
    #[error("the trace is empty")]
    Empty,
    /// One step is wrong.
    #[error("step {index} {text:?}: {problem}")]
    Step {
        /// 1-based position in the trace.
        index: usize,
        /// The step's text.
        text: String,
        /// What is wrong with it.
        problem: TraceProblem,
    },
    /// The core refused the configuration derived from the bounds.
    #[error("the lease configuration derived from the bounds: {0}")]
    Config(#[from] crate::ConfigError),
}

/// Parses `trace` and runs it step by step under `bounds` (the bounds it
/// was found with; `depth` and `faults` are not enforced), stopping at the
/// first violation.
pub fn replay(trace: &str, bounds: &Bounds) -> Result<Replay, TraceParseError> {
    bounds.validate()?;
    let parts: Vec<&str> = trace
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if parts.is_empty() {
        return Err(TraceParseError::Empty);
    }
    let bad = |index: usize, text: &str, problem: TraceProblem| TraceParseError::Step {
        index: index + 1,
        text: text.chars().take(40).collect(),
        problem,
    };
    let mut steps = Vec::with_capacity(parts.len());
    for (i, text) in parts.iter().enumerate() {
        let step: Step = text
            .parse()
            .map_err(|e| bad(i, text, TraceProblem::Unknown(e)))?;
        if step.node().is_some_and(|n| n >= bounds.nodes) {
            return Err(bad(
                i,
                text,
                TraceProblem::NoSuchNode {
                    nodes: bounds.nodes,
                },
            ));
        }
        steps.push(step);
    }
    // The fault bound is the search's, not the trace's: replay whatever
    // faults the trace holds.
    let mut unbounded = bounds.clone();
    unbounded.faults = usize::MAX;
    let setup = Setup::new(unbounded);
    if setup.bounds.leases > 0 {
        play(&setup, SetWorld::new(&setup)?, &steps, &parts)
    } else {
        play(&setup, <World>::new(&setup)?, &steps, &parts)
    }
}

/// Plays `steps` (whose texts are `parts`) from `world`.
fn play<M: Model>(
    setup: &Setup,
    mut world: M,
    steps: &[Step],
    parts: &[&str],
) -> Result<Replay, TraceParseError> {
    let bad = |index: usize, text: &str, problem: TraceProblem| TraceParseError::Step {
        index: index + 1,
        text: text.chars().take(40).collect(),
        problem,
    };
    let mut out = Replay {
        steps: Vec::with_capacity(steps.len()),
        violation: None,
    };
    for (i, &step) in steps.iter().enumerate() {
        if !world.enabled(setup, step) {
            return Err(bad(
                i,
                parts[i],
                TraceProblem::NotEnabled {
                    state: world.describe(setup),
                },
            ));
        }
        let mut log = Log {
            enabled: true,
            lines: Vec::new(),
        };
        let found = world.apply(setup, step, &mut log);
        out.steps.push(ReplayStep {
            step: step.to_string(),
            effects: log.lines,
            state: world.describe(setup),
            standing: world.standing(setup),
        });
        if let Some(mut v) = found {
            let text: Vec<String> = steps[..=i].iter().map(Step::to_string).collect();
            v.trace = text.join(";");
            v.depth = i + 1;
            out.violation = Some(v);
            break;
        }
    }
    Ok(out)
}

/// A path of a lease set's yield to a better member, as steps of the
/// checker over `Bounds::for_set(2, 1)` with `ranked` and one fault: n0
/// leads `s0` before it sees n1 (n1's first survey still in flight), n1's
/// membership row (priority 2) is written, n0's next survey reads it and
/// n0, outranked, stops its work and hands `s0` to n1, which takes it at
/// the next epoch. It is deeper (44 steps) than an exhaustive search of
/// that space reaches, so the tests replay it, with and without a planted
/// bug (`core/tests/check_set.rs`, `check_mutants.rs`).
pub const RANKED_SET_YIELD: &str = "tick:db;n0:timer;tick:n0;tick:n0;db:n0;n1:timer;tick:n1;\
    tick:db;tick:n0;n0:recv;db:n0;n0:recv;db:n0;n0:recv;db:n0;n0:recv;db:n1;n1:recv;db:n1;\
    n1:recv;tick:n1;tick:n1;tick:db;tick:n0;tick:db;tick:n0;n1:timer;tick:n1;tick:db;tick:n0;\
    n0:timer;db:n0;n0:recv;db:n0;n0:recv;db:n0;n0:recv;db:n1;n1:recv;n1:recv;db:n1;n1:recv;\
    db:n1;n1:recv";
