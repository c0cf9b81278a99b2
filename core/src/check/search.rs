//! The breadth-first search: level by level, so the first violation of
//! each property is reached by a shortest path.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant as WallClock;

use super::canon::Fingerprinter;
use super::set::{SetFingerprinter, SetWorld};
use super::step::Step;
use super::world::{Log, Setup, World};
use super::{Budget, Progress, Report, Stopped, Violation, MEMORY_CHECK_EVERY};

/// A model the search explores and a replay plays: the lone-lease
/// [`World`] or the lease-set [`SetWorld`], on the same steps.
pub(super) trait Model: Clone {
    /// Reused buffers for fingerprints.
    type Fingerprinter: Default;
    /// Every step enabled here, in a fixed order.
    fn steps(&self, setup: &Setup, out: &mut Vec<Step>);
    /// Applies an enabled step; `Some` on the first property violated.
    fn apply(&mut self, setup: &Setup, step: Step, log: &mut Log) -> Option<Violation>;
    /// The state's fingerprint, up to the model's symmetries.
    fn fingerprint(&self, fp: &mut Self::Fingerprinter, setup: &Setup) -> u128;
    /// One line on the state, for replays.
    fn describe(&self, setup: &Setup) -> String;
    /// Who leads what, for pictures of replays.
    fn standing(&self, setup: &Setup) -> super::replay::Standing;
    /// Whether the step is enabled here.
    fn enabled(&self, setup: &Setup, step: Step) -> bool {
        let mut steps = Vec::new();
        self.steps(setup, &mut steps);
        steps.contains(&step)
    }
}

impl Model for World {
    type Fingerprinter = Fingerprinter;
    fn steps(&self, setup: &Setup, out: &mut Vec<Step>) {
        World::steps(self, setup, out);
    }
    fn apply(&mut self, setup: &Setup, step: Step, log: &mut Log) -> Option<Violation> {
        World::apply(self, setup, step, log)
    }
    fn fingerprint(&self, fp: &mut Fingerprinter, setup: &Setup) -> u128 {
        fp.fingerprint(self, setup.bounds.ttl_ticks, setup.bounds.interval_ticks)
    }
    fn describe(&self, _: &Setup) -> String {
        <World>::describe(self)
    }
    fn standing(&self, setup: &Setup) -> super::replay::Standing {
        World::standing(self, setup)
    }
}

impl Model for SetWorld {
    type Fingerprinter = SetFingerprinter;
    fn steps(&self, setup: &Setup, out: &mut Vec<Step>) {
        SetWorld::steps(self, setup, out);
    }
    fn apply(&mut self, setup: &Setup, step: Step, log: &mut Log) -> Option<Violation> {
        SetWorld::apply(self, setup, step, log)
    }
    fn fingerprint(&self, fp: &mut SetFingerprinter, setup: &Setup) -> u128 {
        fp.fingerprint(self, setup)
    }
    fn describe(&self, setup: &Setup) -> String {
        SetWorld::describe(self, setup)
    }
    fn standing(&self, setup: &Setup) -> super::replay::Standing {
        SetWorld::standing(self, setup)
    }
}

/// Fingerprints are already uniform hashes: use their low bits directly.
#[derive(Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

type Seen = HashSet<u128, BuildHasherDefault<FingerprintHasher>>;

/// How each stored state was first reached: its parent's index and the
/// step taken. Index 0 is the initial state.
struct Tree {
    parents: Vec<(u32, Step)>,
}

impl Tree {
    /// The states from the initial state's first successor to state `at`
    /// on its first path, into `out` (cleared first).
    fn path_to(&self, mut at: u32, out: &mut Vec<u32>) {
        out.clear();
        while at != 0 {
            out.push(at);
            at = self.parents[at as usize].0;
        }
        out.reverse();
    }

    /// The trace from the initial state to state `at`, then `last`.
    fn trace(&self, mut at: u32, last: Step) -> (String, usize) {
        let mut steps = vec![last];
        while at != 0 {
            let (parent, step) = self.parents[at as usize];
            steps.push(step);
            at = parent;
        }
        steps.reverse();
        let text: Vec<String> = steps.iter().map(Step::to_string).collect();
        (text.join(";"), steps.len())
    }
}

/// The state being expanded, rebuilt from the tree rather than kept: the
/// frontier is a list of tree indices (4 bytes a state, where a whole
/// world took about 8 to 14 KB, issue 48), and each state is rebuilt by
/// replaying its first path from the initial state. A level's states come
/// in the order of their paths (breadth first, each level in its parents'
/// order), so consecutive states share most of their path: the worlds
/// along the last path are kept (at most one per level), and only the
/// steps past the shared prefix are replayed. Over a level that replays
/// each ancestor of the level once: in a space whose levels grow by a
/// factor r, about 1/(r − 1) of the states found so far (2.1 for the
/// 2 × 2 set check's r ≈ 1.47), each a clone and an apply without a
/// fingerprint. The model is deterministic, so a replayed world is the
/// one first found, bit for bit (`replay` relies on the same).
struct PathCursor<M> {
    /// (tree index, world) from the initial state down the last path.
    stack: Vec<(u32, M)>,
    path: Vec<u32>,
}

impl<M: Model> PathCursor<M> {
    fn new(initial: M) -> Self {
        PathCursor {
            stack: vec![(0, initial)],
            path: Vec::new(),
        }
    }

    /// The world of tree state `at`, replaying only the steps past the
    /// path shared with the last one.
    fn world(&mut self, setup: &Setup, tree: &Tree, at: u32, log: &mut Log) -> &M {
        tree.path_to(at, &mut self.path);
        let shared = self.stack[1..]
            .iter()
            .zip(&self.path)
            .take_while(|((kept, _), wanted)| kept == *wanted)
            .count();
        self.stack.truncate(shared + 1);
        for &index in &self.path[shared..] {
            let (_, parent) = self.stack.last().expect("the initial state stays");
            let mut world = parent.clone();
            let replayed = world.apply(setup, tree.parents[index as usize].1, log);
            debug_assert!(replayed.is_none(), "a stored state's step violated nothing");
            self.stack.push((index, world));
        }
        &self.stack.last().expect("the initial state stays").1
    }
}

pub(super) fn run<M: Model>(
    setup: &Setup,
    initial: M,
    budget: Budget,
    mut progress: impl FnMut(&Progress),
) -> Report {
    let started = WallClock::now();
    let bounds = &setup.bounds;
    let mut fingerprints = M::Fingerprinter::default();
    let fp = |f: &mut M::Fingerprinter, w: &M| w.fingerprint(f, setup);
    let mut seen = Seen::default();
    // Millions of states are the rule: skip the first rounds of growth.
    seen.reserve(1 << 20);
    seen.insert(fp(&mut fingerprints, &initial));
    let mut tree = Tree {
        parents: vec![(0, Step::TickDb)],
    };
    let mut report = Report {
        nodes: bounds.nodes,
        leases: bounds.leases,
        states: 1,
        transitions: 0,
        depth: 0,
        complete: false,
        stopped: None,
        completed_depth: 0,
        frontier_left: 0,
        violations: Vec::new(),
        elapsed: Default::default(),
    };
    let used = || budget.memory.and_then(|m| (m.used_bytes)());
    let mut cursor = PathCursor::new(initial);
    let mut frontier = vec![0u32];
    let mut steps = Vec::new();
    let mut log = Log::off();
    let mut expanded = 0usize;
    'levels: for depth in 0..bounds.depth {
        let mut next = Vec::new();
        for at in std::mem::take(&mut frontier) {
            let world = cursor.world(setup, &tree, at, &mut log);
            world.steps(setup, &mut steps);
            for &step in &steps {
                let mut successor = world.clone();
                report.transitions += 1;
                if let Some(found) = successor.apply(setup, step, &mut log) {
                    record(&mut report, &tree, at, step, found);
                    if budget.stop_at_first_violation {
                        report.stopped = Some(Stopped::AtViolation);
                        break 'levels;
                    }
                    continue;
                }
                if seen.insert(fp(&mut fingerprints, &successor)) {
                    let index = u32::try_from(tree.parents.len()).unwrap_or(u32::MAX);
                    tree.parents.push((at, step));
                    next.push(index);
                }
            }
            if let Some(why) = out_of_budget(&budget, seen.len(), started) {
                report.stopped = Some(why);
                break 'levels;
            }
            expanded += 1;
            if expanded % MEMORY_CHECK_EVERY == 0 {
                if let (Some(memory), Some(now)) = (budget.memory, used()) {
                    if now >= memory.limit_bytes {
                        report.stopped = Some(Stopped::Memory(now));
                        break 'levels;
                    }
                }
            }
        }
        report.states = seen.len();
        // Every path of `depth + 1` steps was taken and checked.
        report.completed_depth = depth + 1;
        if !next.is_empty() {
            report.depth = depth + 1;
        }
        report.elapsed = started.elapsed();
        progress(&Progress {
            depth: depth + 1,
            states: seen.len(),
            transitions: report.transitions,
            frontier: next.len(),
            elapsed: report.elapsed,
            used_bytes: used(),
        });
        frontier = next;
        if frontier.is_empty() {
            break;
        }
    }
    report.states = seen.len();
    report.complete = report.stopped.is_none();
    if report.complete {
        // Every path within the depth bound was checked (the space may
        // have run out sooner).
        report.completed_depth = bounds.depth;
    }
    report.frontier_left = if report.complete { frontier.len() } else { 0 };
    report.elapsed = started.elapsed();
    report
}

fn out_of_budget(budget: &Budget, states: usize, started: WallClock) -> Option<Stopped> {
    if budget.max_states.is_some_and(|max| states >= max) || states >= u32::MAX as usize - 1 {
        Some(Stopped::States)
    } else if budget.max_time.is_some_and(|max| started.elapsed() >= max) {
        Some(Stopped::Time)
    } else {
        None
    }
}

/// Keeps the first (hence shortest) violation of each property.
fn record(report: &mut Report, tree: &Tree, at: u32, step: Step, mut found: Violation) {
    if report
        .violations
        .iter()
        .any(|v: &Violation| v.property == found.property)
    {
        return;
    }
    let (trace, depth) = tree.trace(at, step);
    found.trace = trace;
    found.depth = depth;
    report.violations.push(found);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Bounds;

    /// The plain breadth-first search the rebuilt frontier replaces: each
    /// state to explore kept whole. Per level: (states, transitions,
    /// states at the next level).
    fn kept_whole<M: Model>(setup: &Setup, initial: M) -> Vec<(usize, u64, usize)> {
        let mut fingerprints = M::Fingerprinter::default();
        let mut seen = Seen::default();
        seen.insert(initial.fingerprint(&mut fingerprints, setup));
        let (mut frontier, mut steps, mut log) = (vec![initial], Vec::new(), Log::off());
        let (mut transitions, mut levels) = (0u64, Vec::new());
        for _ in 0..setup.bounds.depth {
            let mut next = Vec::new();
            for world in std::mem::take(&mut frontier) {
                world.steps(setup, &mut steps);
                for &step in &steps {
                    let mut successor = world.clone();
                    transitions += 1;
                    if successor.apply(setup, step, &mut log).is_none()
                        && seen.insert(successor.fingerprint(&mut fingerprints, setup))
                    {
                        next.push(successor);
                    }
                }
            }
            levels.push((seen.len(), transitions, next.len()));
            frontier = next;
            if frontier.is_empty() {
                break;
            }
        }
        levels
    }

    fn rebuilt<M: Model>(setup: &Setup, initial: M) -> Vec<(usize, u64, usize)> {
        let mut levels = Vec::new();
        run(setup, initial, Budget::default(), |p| {
            levels.push((p.states, p.transitions, p.frontier));
        });
        levels
    }

    /// The search that rebuilds each state from its path explores exactly
    /// what the search that kept every state whole explored, level by
    /// level: the same states, transitions and frontier, for a lone lease
    /// with a fault and for a lease set with a fault and a handover.
    #[test]
    fn rebuilding_states_from_their_paths_explores_the_same_space() {
        let mut lone = Bounds::default_for(2);
        lone.depth = 14;
        let setup = Setup::new(lone);
        let initial = <World>::new(&setup).expect("valid bounds");
        let expected = kept_whole(&setup, initial.clone());
        assert_eq!(rebuilt(&setup, initial), expected);
        assert!(expected.last().expect("levels").0 > 10_000, "{expected:?}");

        let mut set = Bounds::for_set(2, 2);
        set.depth = 12;
        set.faults = 1;
        set.handover = true;
        let setup = Setup::new(set);
        let initial = SetWorld::new(&setup).expect("valid bounds");
        let expected = kept_whole(&setup, initial.clone());
        assert_eq!(rebuilt(&setup, initial), expected);
        assert!(expected.last().expect("levels").0 > 10_000, "{expected:?}");
    }
}
