//! `picolease check`: the exhaustive model check of the core (every
//! schedule of a bounded world; see `picolease_core::check`).
//!
//! Progress goes to stderr, one line per breadth-first level; the result to
//! stdout (one JSON object with `--json`). Exit 0: the whole bounded space
//! was explored with no violation; 1: a violation, or a search that did not
//! complete; 2: bad bounds.

use std::process::ExitCode;
use std::time::Duration;

use picolease_core::check::{check, Bounds, Budget, MemoryBudget, Progress, Report, Stopped};

use crate::memory::show_size;

use crate::duration::show;
use crate::failure::CliError;
use crate::output::line;

/// What the command line asks of the world checked.
#[derive(Clone, Copy, Debug, Default)]
pub struct World {
    /// Leases per node (0: a lone lease).
    pub leases: usize,
    /// How many times the database may fail over (`--failover`: 1,
    /// `--failovers N`).
    pub failovers: u8,
    /// A leader may hand its lease over (`--handover`).
    pub handover: bool,
    /// The nodes are ranked (`--ranked`).
    pub ranked: bool,
    /// Every node probes its health (`--health`).
    pub health: bool,
}

/// The bounds from the command line: the defaults for `nodes` (and, with
/// `leases` > 0, for a set of that many leases on each; with `failovers`,
/// [`Bounds::with_failovers`]), with the depth and fault count overridden
/// when given.
pub fn bounds(
    nodes: usize,
    world: World,
    depth: Option<usize>,
    faults: Option<usize>,
) -> Result<Bounds, CliError> {
    let mut bounds = match world {
        World {
            leases: 0,
            failovers: failovers @ 1..,
            ..
        } => Bounds::with_failovers(nodes, failovers),
        World {
            leases: 0,
            ranked: true,
            handover: false,
            ..
        } => Bounds {
            depth: 30,
            ..Bounds::with_ranks(nodes)
        },
        World {
            leases: 0,
            handover: true,
            ..
        } => Bounds::with_handover(nodes),
        World {
            leases: 0,
            health: true,
            ..
        } => Bounds::with_health(nodes),
        World { leases: 0, .. } => Bounds::default_for(nodes),
        World {
            leases,
            failovers,
            handover,
            ranked,
            health,
        } => Bounds {
            health,
            failovers,
            handover,
            ranked,
            ..Bounds::for_set(nodes, leases)
        },
    };
    bounds.nodes = nodes;
    if let Some(depth) = depth {
        bounds.depth = depth;
    }
    if let Some(faults) = faults {
        bounds.faults = faults;
    }
    bounds.validate().map_err(CliError::usage)?;
    Ok(bounds)
}

/// Runs the check and prints the result.
pub fn run(
    nodes: usize,
    world: World,
    depth: Option<usize>,
    faults: Option<usize>,
    json: bool,
    timeline: Option<&std::path::Path>,
    memory: Option<u64>,
) -> Result<ExitCode, CliError> {
    let bounds = bounds(nodes, world, depth, faults)?;
    let memory = memory_budget(memory);
    let mut what = match bounds.leases {
        0 => String::new(),
        n => format!(", each a lease set of {n} leases"),
    };
    if bounds.handover {
        what.push_str(match bounds.leases {
            0 => "; a leader may hand its lease over to the next node",
            _ => "; a leader of s0 may hand it over to the next node",
        });
    }
    eprintln!(
        "checking {} nodes{what}: ttl {} ticks, interval {} ticks, drift {} ticks, depth {}, {} faults per path (1 tick = 1 ms)",
        bounds.nodes,
        bounds.ttl_ticks,
        bounds.interval_ticks,
        bounds.drift_ticks,
        bounds.depth,
        bounds.faults
    );
    match memory {
        Some(budget) => eprintln!(
            "memory budget {} (--memory to change); in use now {}",
            show_size(budget.limit_bytes),
            crate::memory::resident_bytes().map_or("unknown".to_string(), show_size)
        ),
        None => eprintln!("no memory budget: this system's memory cannot be read"),
    }
    let budget = Budget {
        max_time: Some(TIME_BUDGET),
        memory,
        ..Budget::default()
    };
    let report = check(&bounds, budget, print_progress).map_err(CliError::usage)?;
    if json {
        line(&to_json(&report).to_string());
    } else {
        print_report(&report, &bounds);
    }
    if let Some(peak) = crate::memory::peak_bytes() {
        eprintln!(
            "peak memory {}{}",
            show_size(peak),
            memory.map_or(String::new(), |m| format!(
                " (budget {})",
                show_size(m.limit_bytes)
            ))
        );
    }
    if let Some(path) = timeline {
        match report.violations.first() {
            Some(violation) => {
                let replayed = picolease_core::check::replay(&violation.trace, &bounds)
                    .map_err(CliError::runtime)?;
                draw_replay(&replayed, &bounds, path)?;
            }
            None => eprintln!("no counterexample to draw: {} not written", path.display()),
        }
    }
    Ok(if report.complete && report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The memory budget: `--memory`, else three quarters of the memory the
/// machine has available as the check starts; none where memory cannot be
/// read (the search is then bounded by depth and time alone).
fn memory_budget(asked: Option<u64>) -> Option<MemoryBudget> {
    let used_bytes = crate::memory::resident_bytes;
    used_bytes()?;
    let limit_bytes = match asked {
        Some(limit) => limit,
        None => {
            let available = crate::memory::available_bytes()?;
            (available as f64 * crate::memory::DEFAULT_SHARE) as u64
        }
    };
    Some(MemoryBudget {
        limit_bytes,
        used_bytes,
    })
}

fn print_progress(progress: &Progress) {
    eprintln!(
        "  depth {:>4}: {:>10} states, {:>12} transitions, {:>9} to explore, {:>9} in use ({})",
        progress.depth,
        progress.states,
        progress.transitions,
        progress.frontier,
        progress.used_bytes.map_or("?".to_string(), show_size),
        show(progress.elapsed)
    );
}

/// The contract of `check --json`: exactly these keys, and `leases` for a
/// set check.
fn to_json(report: &Report) -> serde_json::Value {
    let mut json = serde_json::json!({
        "nodes": report.nodes,
        "states": report.states,
        "transitions": report.transitions,
        "depth": report.depth,
        "complete": report.complete,
        "violations": report.violations.iter().map(|v| v.trace.clone()).collect::<Vec<_>>(),
    });
    if report.leases > 0 {
        json["leases"] = serde_json::json!(report.leases);
    }
    json
}

fn print_report(report: &Report, bounds: &Bounds) {
    line(&format!(
        "{} nodes: {} states, {} transitions, depth {} reached, {} in {}",
        report.nodes,
        report.states,
        report.transitions,
        report.depth,
        if report.complete {
            "complete"
        } else {
            "NOT complete"
        },
        show(report.elapsed)
    ));
    match report.stopped {
        Some(Stopped::Memory(used)) => line(&format!(
            "stopped at the memory budget ({} in use): every path of {} steps was checked, not those up to {}; raise --memory or lower --depth",
            show_size(used),
            report.completed_depth,
            bounds.depth
        )),
        Some(Stopped::Time) => line(&format!(
            "stopped after {}: every path of {} steps was checked, not those up to {}",
            show(TIME_BUDGET),
            report.completed_depth,
            bounds.depth
        )),
        Some(Stopped::States | Stopped::AtViolation) | None => {}
    }
    line(&format!(
        "bounds: ttl {} ticks, interval {} ticks, drift {} ticks, delivery within {} ticks, depth {}, {} faults per path{}",
        bounds.ttl_ticks,
        bounds.interval_ticks,
        bounds.drift_ticks,
        bounds.delivery_ticks,
        bounds.depth,
        bounds.faults,
        match bounds.liveness_ticks {
            Some(ticks) => format!(", liveness within {ticks} ticks"),
            None => ", safety only".to_string(),
        }
    ));
    let mut worlds = Vec::new();
    if bounds.twins {
        worlds.push("nodes 0 and 1 are twins (one node name, two incarnations)".to_string());
    }
    if bounds.orphan {
        worlds.push("a path may start from a row left by a dead holder".to_string());
    }
    match bounds.failovers {
        0 => {}
        1 => worlds.push(
            "the database may fail over to a standby that lost the writes since its last copy"
                .to_string(),
        ),
        n => worlds.push(format!(
            "the database may fail over {n} times in a row, each to a standby that lost the writes since its last copy"
        )),
    }
    if bounds.handover {
        worlds.push("a leader may hand its lease over to the next node".to_string());
    }
    if bounds.health {
        worlds.push(
            "every node probes its health, and a probe may start failing: an unhealthy leader yields to a live candidate"
                .to_string(),
        );
    }
    if bounds.ranked {
        worlds.push(match bounds.leases {
            0 => "node N has priority N+1: followers announce, a leader yields to a better candidate",
            _ => "node N has priority N+1, carried by its membership row: an outranked member hands its leases to a better one",
        }.to_string());
    }
    if bounds.notify {
        worlds.push("release notices".to_string());
    }
    if bounds.stop_lead_ticks > 0 {
        worlds.push(format!("stop lead {} ticks", bounds.stop_lead_ticks));
    }
    if !worlds.is_empty() {
        line(&format!("worlds: {}", worlds.join("; ")));
    }
    if report.frontier_left > 0 {
        line(&format!(
            "{} states at the depth bound were not expanded: deeper paths are not covered",
            report.frontier_left
        ));
    }
    if report.violations.is_empty() {
        line(&format!(
            "no violation of mutual exclusion, fencing, validity, gating, stop lead, progress{}{} or liveness",
            if bounds.ranked { ", preference" } else { "" },
            if bounds.health { ", an unhealthy leader yields" } else { "" }
        ));
        return;
    }
    for violation in &report.violations {
        line(&format!(
            "VIOLATED {} after {} steps: {}",
            violation.property, violation.depth, violation.detail
        ));
        line(&format!(
            "  replay: picolease simulate --nodes {} --replay '{}'{}{}",
            report.nodes,
            violation.trace,
            match report.leases {
                0 => String::new(),
                n => format!(" --leases {n}"),
            },
            if bounds.ranked { " --ranked" } else { "" }
        ));
    }
}

/// Longest a check may run before it is reported as not complete; the
/// defaults finish far sooner (2 nodes in seconds, 3 in minutes).
pub const TIME_BUDGET: Duration = Duration::from_secs(30 * 60);

/// Draws a replayed trace (`check --timeline`, `simulate --replay …
/// --timeline`): the page's exit status is the command's own, which the
/// replay decides, so two leaders drawn in red do not change it here.
pub fn draw_replay(
    replayed: &picolease_core::check::Replay,
    bounds: &Bounds,
    path: &std::path::Path,
) -> Result<(), CliError> {
    let lines = crate::timeline::from_core::replay_lines(
        replayed,
        u64::from(bounds.ttl_ticks),
        u64::from(bounds.interval_ticks),
    );
    let title = format!(
        "picolease check: {} steps on {} nodes{} (1 s on the axis = 1 database tick){}",
        replayed.steps.len(),
        bounds.nodes,
        match bounds.leases {
            0 => String::new(),
            n => format!(", each a lease set of {n}"),
        },
        match &replayed.violation {
            Some(v) => format!(": {} violated", v.property),
            None => String::new(),
        }
    );
    crate::timeline::write_lines(&lines, &title, path, true)?;
    Ok(())
}
