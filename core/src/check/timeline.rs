//! A replayed trace as the lines `run --json` prints, for `picolease
//! timeline` (`check --timeline`, `simulate --replay … --timeline`): a
//! `leader` line where a node's leadership of a lease begins, `follower`
//! where it ends, crashes, pauses and resumes as marks, and a `leading`
//! line at the end for each node still leading, so that a violation's two
//! leaders are drawn as such. Here, in the core, so that the planted-bug
//! tests (feature `mutants`, which the CLI is never built with) write a
//! real counterexample's lines for the CLI's browser test to draw
//! (`core/tests/check_mutants.rs`, `tools/tests/cli_timeline.rs`).
//!
//! The checker's time is the database's ticks; steps within one tick are
//! spread over it, so the axis reads 1 s per tick: a step's time is its
//! tick × 1000 + its place within the tick, and the ttl and interval are
//! scaled alike.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::replay::Replay;
use crate::sql::push_json_string;

/// One line: `event`, `name`, `node` (`node N`), `unix_ms`, then `keys`
/// (already JSON: `"key":value` pairs, comma-separated).
fn line(event: &str, lease: &str, node: usize, at_ms: u64, keys: &str) -> String {
    let mut out = String::from("{\"event\":");
    push_json_string(&mut out, event);
    out.push_str(",\"name\":");
    push_json_string(&mut out, lease);
    let _ = write!(out, ",\"node\":\"node {node}\",\"unix_ms\":{at_ms}");
    if !keys.is_empty() {
        out.push(',');
        out.push_str(keys);
    }
    out.push('}');
    out
}

/// `"step":"<text>"`, the step as a JSON string.
fn step_key(step: &str) -> String {
    let mut out = String::from("\"step\":");
    push_json_string(&mut out, step);
    out
}

impl Replay {
    /// The replay as `run --json` lines (see the module's comment), with
    /// the bounds' ttl and interval in ticks.
    pub fn timeline_lines(&self, ttl_ticks: u64, interval_ticks: u64) -> Vec<String> {
        let mut out = Vec::new();
        let mut leading: BTreeSet<(usize, String, u64)> = BTreeSet::new();
        let mut down: BTreeSet<usize> = BTreeSet::new();
        let mut paused: BTreeSet<usize> = BTreeSet::new();
        let (mut tick, mut within) = (u64::MAX, 0);
        let mut at = 0;
        for step in &self.steps {
            let standing = &step.standing;
            if standing.db_tick == tick {
                within += 1;
            } else {
                (tick, within) = (standing.db_tick, 0);
            }
            at = tick.saturating_mul(1000).saturating_add(within);
            let now: BTreeSet<(usize, String, u64)> = standing.leaders.iter().cloned().collect();
            let now_down: BTreeSet<usize> = standing.down.iter().copied().collect();
            let now_paused: BTreeSet<usize> = standing.paused.iter().copied().collect();
            let step_key = step_key(&step.step);
            for (node, lease, epoch) in leading.difference(&now) {
                let reason = if now_down.contains(node) {
                    "crashed"
                } else {
                    "left"
                };
                let keys = format!("\"epoch\":{epoch},\"reason\":\"{reason}\",{step_key}");
                out.push(line("follower", lease, *node, at, &keys));
            }
            for node in now_down.difference(&down) {
                out.push(line("crash", "", *node, at, &step_key));
            }
            for node in now_paused.difference(&paused) {
                out.push(line("pause", "", *node, at, &step_key));
            }
            for node in paused.difference(&now_paused) {
                if !now_down.contains(node) {
                    out.push(line("resume", "", *node, at, &step_key));
                }
            }
            for (node, lease, epoch) in now.difference(&leading) {
                let keys = format!(
                    "\"epoch\":{epoch},\"ttl_ms\":{},\"interval_ms\":{},{step_key}",
                    ttl_ticks.saturating_mul(1000),
                    interval_ticks.saturating_mul(1000),
                );
                out.push(line("leader", lease, *node, at, &keys));
            }
            (leading, down, paused) = (now, now_down, now_paused);
        }
        for (node, lease, epoch) in &leading {
            out.push(line(
                "leading",
                lease,
                *node,
                at,
                &format!("\"epoch\":{epoch}"),
            ));
        }
        out
    }
}
