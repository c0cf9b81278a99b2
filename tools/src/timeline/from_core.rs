//! The runs picolease makes itself, as the lines `run --json` prints, for
//! `picolease timeline`: a simulation's trace (`simulate --timeline`) and
//! a replayed model-check trace (`check --timeline`, `simulate --replay
//! … --timeline`). Faults become marks (`crash`, `pause`, `resume`,
//! `stop`, `failover`, …).

use std::time::Duration;

use picolease_core::check::Replay;
use serde_json::{json, Value};

/// One line: the four keys, then `keys`.
fn line(event: &str, lease: &str, node: usize, at_ms: u64, keys: Value) -> String {
    let mut object = json!({
        "event": event,
        "name": lease,
        "node": format!("node {node}"),
        "unix_ms": at_ms,
    });
    if let (Some(object), Value::Object(keys)) = (object.as_object_mut(), keys) {
        object.extend(keys);
    }
    object.to_string()
}

/// A simulated run as the lines `run --json` prints (`unix_ms` counts
/// from the run's start), plus its faults as marks (`crash`, `pause`,
/// `resume`, `stop`, `failover`, …), for `picolease timeline`.
pub fn trace_lines(
    trace: &picolease_core::sim::Trace,
    lease: &str,
    ttl: Duration,
    interval: Duration,
) -> Vec<String> {
    use picolease_core::sim::Happening;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    trace
        .entries
        .iter()
        .filter_map(|entry| {
            let (event, keys) = match &entry.what {
                Happening::Leader { epoch } => (
                    "leader",
                    json!({ "epoch": epoch.get(), "ttl_ms": ms(ttl), "interval_ms": ms(interval) }),
                ),
                Happening::Follower { epoch, reason } => (
                    "follower",
                    json!({ "epoch": epoch.get(), "reason": reason.as_str() }),
                ),
                Happening::Crashed => ("crash", json!({})),
                Happening::Paused => ("pause", json!({})),
                Happening::Resumed => ("resume", json!({})),
                Happening::ShutdownBegun => ("stop", json!({})),
                Happening::ServerReplaced { lost } => {
                    ("failover", json!({ "lost_ms": lost / 1_000_000 }))
                }
                Happening::Health { healthy: true } => ("healthy", json!({})),
                Happening::Health { healthy: false } => ("unhealthy", json!({})),
                Happening::HandOverBegun { to } => ("handover_asked", json!({ "to": to })),
                _ => return None,
            };
            Some(line(event, lease, entry.node, entry.at / 1_000_000, keys))
        })
        .collect()
}

/// A replayed model-check trace as `run --json` lines: the core's
/// [`Replay::timeline_lines`] (there, so that the planted-bug tests can
/// write a real counterexample's lines too).
pub fn replay_lines(replay: &Replay, ttl_ticks: u64, interval_ticks: u64) -> Vec<String> {
    replay.timeline_lines(ttl_ticks, interval_ticks)
}

#[cfg(test)]
mod tests {
    use picolease_core::check::{ReplayStep, Standing};

    use super::super::{events, terms};
    use super::*;

    fn step(tick: u64, leaders: &[(usize, u64)], paused: &[usize]) -> ReplayStep {
        ReplayStep {
            step: format!("tick {tick}"),
            effects: Vec::new(),
            state: String::new(),
            standing: Standing {
                db_tick: tick,
                leaders: leaders
                    .iter()
                    .map(|&(node, epoch)| (node, "check".to_string(), epoch))
                    .collect(),
                down: Vec::new(),
                paused: paused.to_vec(),
            },
        }
    }

    fn analysed(steps: Vec<ReplayStep>) -> super::super::analysis::Analysis {
        let replay = Replay {
            steps,
            violation: None,
        };
        let lines = replay_lines(&replay, 10, 3);
        let events = events::parse_stream("replay", &lines.join("\n"), 0).expect("lines parse");
        terms::analyse(
            &events::merge(events),
            super::super::analysis::DEFAULT_TTL_MS,
        )
    }

    #[test]
    fn a_counterexamples_two_leaders_are_an_overlap() {
        let analysis = analysed(vec![
            step(0, &[(0, 1)], &[]),
            step(1, &[(0, 1)], &[0]),
            step(12, &[(0, 1), (1, 2)], &[0]),
            // n0 runs again, still believing it leads: the violation.
            step(12, &[(0, 1), (1, 2)], &[]),
        ]);
        assert_eq!(analysis.overlaps.len(), 1, "{analysis:?}");
        assert_eq!(analysis.overlaps[0].first.node, "node 0");
        assert_eq!(analysis.overlaps[0].second.node, "node 1");
    }

    #[test]
    fn a_paused_leader_that_demotes_as_it_resumes_is_no_overlap() {
        let analysis = analysed(vec![
            step(0, &[(0, 1)], &[]),
            step(1, &[(0, 1)], &[0]),
            step(12, &[(0, 1), (1, 2)], &[0]),
            step(12, &[(1, 2)], &[]),
        ]);
        assert!(analysis.overlaps.is_empty(), "{analysis:?}");
        assert_eq!(analysis.terms.len(), 2);
        // Ticks are drawn as seconds, the ttl scaled alike.
        assert_eq!(analysis.terms[0].ttl_ms, 10_000);
        assert_eq!(analysis.terms[1].start_ms, 12_000);
    }
}
