//! `picolease simulate`: the core's deterministic simulator (virtual time,
//! a model database, faults); prints the timeline, the handovers next to
//! the bounds of DESIGN §4, and the invariants of DESIGN §6.

use std::process::ExitCode;
use std::time::Duration;

use picolease::Config;
use picolease_core::sim::{Fault, FaultKind, SimConfig, Simulation};

use crate::duration::show;
use crate::failure::CliError;
use crate::output::line;

/// The longest run `simulate` accepts (a run costs time per renewal).
const MAX_VIRTUAL_TIME: Duration = Duration::from_secs(24 * 3600);

/// The most polls and renewals (nodes × virtual time / interval) `simulate`
/// accepts. Each leaves a few trace entries in memory: measured about 410
/// bytes per event (16 nodes, ttl 10ms, 60s: 384,000 events, 157 MB,
/// 0.75 s), so 2 million is under 1 GB and a few seconds.
const MAX_EVENTS: u128 = 2_000_000;

/// Replays a trace of `picolease check` step by step (the check's default
/// bounds for `nodes`, and for sets of `leases` leases when not 0); exit 1
/// if it reaches a violation.
pub fn replay(
    trace: &str,
    nodes: Option<usize>,
    leases: usize,
    ranked: bool,
    timeline: Option<&std::path::Path>,
) -> Result<ExitCode, CliError> {
    // Without --nodes, the trace says how many nodes it needs.
    let nodes = nodes.unwrap_or_else(|| nodes_in(trace).max(2));
    // A trace of `check --failover` names its database steps.
    let world = super::check::World {
        leases,
        failovers: trace
            .matches("db:failover")
            .count()
            .max(usize::from(trace.contains("db:replicate")))
            .min(2) as u8,
        // A trace of `check --handover` names its handovers.
        handover: trace.contains(":handover"),
        ranked,
        // A trace of `check --health` names its failing probes.
        health: trace.contains(":unhealthy"),
    };
    let bounds = super::check::bounds(nodes, world, None, None)?;
    let replayed = picolease_core::check::replay(trace, &bounds).map_err(CliError::usage)?;
    let sets = match leases {
        0 => String::new(),
        n => format!(", each a lease set of {n}"),
    };
    line(&format!(
        "replaying {} steps on {nodes} nodes{sets} (ttl {} ticks, interval {} ticks, drift {} ticks; 1 tick = 1 ms)",
        trace.split(';').filter(|s| !s.trim().is_empty()).count(),
        bounds.ttl_ticks,
        bounds.interval_ticks,
        bounds.drift_ticks
    ));
    for text in replayed.to_string().lines() {
        line(text);
    }
    if let Some(path) = timeline {
        super::check::draw_replay(&replayed, &bounds, path)?;
    }
    Ok(if replayed.violation.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The highest node a trace names (`n2:…`), plus one.
fn nodes_in(trace: &str) -> usize {
    trace
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|word| word.strip_prefix('n')?.parse::<usize>().ok())
        .map(|n| n + 1)
        .max()
        .unwrap_or(2)
}

/// Runs one simulation; exit 1 if an invariant was violated.
pub fn run(
    nodes: usize,
    seed: u64,
    ttl: Duration,
    faults: &str,
    timeline: Option<&std::path::Path>,
) -> Result<ExitCode, CliError> {
    let mut config = SimConfig::new(nodes, seed);
    config.ttl = ttl;
    // Both drivers tell followers of a release (PostgreSQL NOTIFY, the
    // SQLite file watch): so does the simulation.
    config.notify = true;
    let default_schedule = faults.trim().is_empty();
    config.faults = match faults.trim() {
        "" => Fault::parse_list(&format!(
            "crash@{}ms,restart@{}ms,shutdown@{}ms",
            (ttl * 2).as_millis(),
            (ttl * 4).as_millis(),
            (ttl * 5).as_millis()
        )),
        "none" => Ok(Vec::new()),
        list => Fault::parse_list(list),
    }
    .map_err(CliError::usage)?;
    config.faults.sort_by_key(|f| f.at);
    let last = config
        .faults
        .iter()
        .map(|f| {
            f.at.saturating_add(match f.kind {
                FaultKind::Pause(d) | FaultKind::Partition(d) => d,
                _ => Duration::ZERO,
            })
        })
        .max()
        .unwrap_or_default();
    config.duration = ttl
        .saturating_mul(6)
        .max(last.saturating_add(ttl.saturating_mul(4)));
    if config.duration > MAX_VIRTUAL_TIME {
        return Err(CliError::usage(format!(
            "--faults {faults:?} with --ttl {} would simulate {} of virtual time: at most 24h",
            show(ttl),
            show(config.duration)
        )));
    }
    // Every node polls or renews about once per interval (ttl/4), and the
    // trace keeps every statement: refuse a run that would not fit in
    // memory or time before starting it.
    let interval_nanos = (ttl / 4).as_nanos().max(1);
    let events = (nodes as u128).saturating_mul(config.duration.as_nanos()) / interval_nanos;
    if events > MAX_EVENTS {
        return Err(CliError::usage(format!(
            "--nodes {nodes} --ttl {} --faults {faults:?} would simulate about {events} events (nodes × {} of virtual time / interval {:?}): at most {MAX_EVENTS}; use fewer --nodes, a longer --ttl or earlier --faults",
            show(ttl),
            show(config.duration),
            ttl / 4
        )));
    }
    let simulation = Simulation::new(config.clone()).map_err(CliError::usage)?;
    let probe = Config::with_ttl(
        picolease::LeaseName::new("sim").map_err(CliError::usage)?,
        picolease::HolderId::new("probe").map_err(CliError::usage)?,
        ttl,
    );
    let interval = probe.interval;

    let faults_text: Vec<String> = config.faults.iter().map(ToString::to_string).collect();
    line(&format!(
        "simulating {nodes} nodes, seed {seed}, ttl {}, interval {}, one-way delay {}-{}, {} of virtual time",
        show(ttl),
        show(interval),
        show(config.delay_min),
        show(config.delay_max),
        show(config.duration)
    ));
    line(&format!(
        "faults: {}{}",
        if faults_text.is_empty() {
            "none".to_string()
        } else {
            faults_text.join(", ")
        },
        if default_schedule {
            " (the default schedule; choose with --faults, e.g. crash@3s,pause:1@10s+12s, or none)"
        } else {
            ""
        }
    ));
    line("");
    let trace = simulation.run();
    for entry in trace.timeline(false).lines() {
        line(entry);
    }
    line("");
    line("handovers (RTT here <= 2 x the longest one-way delay)");
    for handover in trace.handovers() {
        let bound = match handover.cause {
            "crashed" => format!(
                "ttl + RTT = {} + RTT (seed bound ttl + interval = {})",
                show(ttl),
                show(ttl + interval)
            ),
            "released" => format!(
                "RTT after the release notice (without notices: interval = {})",
                show(interval)
            ),
            "expired" | "lost" => format!("within ttl = {} of the last renewal", show(ttl)),
            _ => "-".to_string(),
        };
        match handover.next {
            Some((node, epoch, gap)) => line(&format!(
                "  node {} {:<9} -> node {node} leads at epoch {epoch} after {:>8}   bound: {bound}",
                handover.from_node,
                handover.cause,
                show(gap)
            )),
            None => line(&format!(
                "  node {} {:<9} -> no leader before the end",
                handover.from_node, handover.cause
            )),
        }
    }
    if let Some(first) = trace.first_leader_at() {
        line(&format!(
            "  first election after {} (bound: RTT)",
            show(Duration::from_nanos(first))
        ));
    }
    line("");
    if let Some(path) = timeline {
        let lines = crate::timeline::from_core::trace_lines(&trace, "sim", ttl, interval);
        let title = format!(
            "picolease simulate: {nodes} nodes, seed {seed}, ttl {}, faults {}",
            show(ttl),
            if faults_text.is_empty() {
                "none".to_string()
            } else {
                faults_text.join(", ")
            }
        );
        // Two leaders in the picture are a violation below as well.
        crate::timeline::write_lines(&lines, &title, path, false)?;
    }
    match trace.check_safety() {
        Ok(()) => {
            line("invariants (DESIGN §6): mutual exclusion, fencing, validity, gating: all hold");
            Ok(ExitCode::SUCCESS)
        }
        Err(violation) => Err(CliError::runtime(violation)),
    }
}
