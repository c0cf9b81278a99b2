//! What a run's events say: each lease's terms (who led, at which epoch,
//! from when to when, and how the term ended), the leaderless gaps between
//! them beside the bound DESIGN §4 gives, and every moment two processes
//! claimed one lease.
//!
//! A `run` that leaves a term always says so (`follower`, `handover`), so a
//! term without an end means the process stopped printing: killed, crashed,
//! or still leading when the capture ended. When another process leads the
//! lease later, the first one's term is taken as ended where its stream did
//! (a crash takeover), unless that is impossible: the other's `leader`
//! line came while the first process was still printing, or sooner than
//! 0.9 ttl after its last line (a row cannot lapse sooner than a ttl after
//! it was last written; a tenth of slack for the round trip between that
//! write and the line). Then it is an **overlap**: two leaders of one
//! lease.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::analysis::{Analysis, Gap, Mark, Overlap, Term, TermEnd};
use super::events::Event;

/// Events drawn as marks.
const MARKED: &[&str] = &[
    "child",
    "child_exit",
    "work_failed",
    "unhealthy",
    "healthy",
    "handover",
    "crash",
    "pause",
    "resume",
    "stop",
    "failover",
    "handover_asked",
    "escalated",
];

/// Reads the terms, gaps, overlaps and marks out of merged events
/// (`events::merge`). `default_ttl_ms` stands for a term whose line names
/// no ttl.
pub fn analyse(events: &[Event], default_ttl_ms: i64) -> Analysis {
    let mut analysis = Analysis {
        start_ms: events.first().map_or(0, |e| e.unix_ms),
        end_ms: events.last().map_or(0, |e| e.unix_ms),
        ..Analysis::default()
    };
    let labels = labels(events);
    let label = |process: &str| labels.get(process).cloned().unwrap_or_default();
    // Each process's lines' times (for its last line, and for whether it
    // printed within a stretch), and every term's end line, for a term
    // ending in the very millisecond another's begins.
    let mut times: HashMap<&str, Vec<i64>> = HashMap::new();
    let mut ends_at: HashSet<(&str, &str, i64)> = HashSet::new();
    let mut leases = BTreeSet::new();
    let mut seen = HashSet::new();
    for event in events {
        times.entry(&event.process).or_default().push(event.unix_ms);
        if seen.insert(&event.process) {
            analysis.nodes.push(label(&event.process));
        }
        if event.ends_term() {
            ends_at.insert((&event.name, &event.process, event.unix_ms));
        }
        if !event.name.is_empty() {
            leases.insert(event.name.clone());
        }
    }
    let last_ms = |process: &str| {
        times
            .get(process)
            .and_then(|t| t.last())
            .copied()
            .unwrap_or(0)
    };
    // Open terms by lease, then process.
    let mut open: BTreeMap<String, BTreeMap<String, Term>> = BTreeMap::new();
    let mut closed: Vec<Term> = Vec::new();
    let mut flagged: HashSet<(String, String, i64, String, i64)> = HashSet::new();
    let mut overlaps: Vec<Overlap> = Vec::new();
    let mut flag = |first: &Term, second: &Term, at: i64, overlaps: &mut Vec<Overlap>| {
        let key = (
            first.lease.clone(),
            first.process.clone(),
            first.start_ms,
            second.process.clone(),
            second.start_ms,
        );
        if flagged.insert(key) {
            overlaps.push(Overlap {
                lease: first.lease.clone(),
                first: first.clone(),
                second: second.clone(),
                from_ms: at,
                to_ms: at,
            });
        }
    };
    // Processes paused now (`pause` lines of `simulate` and `check`): a
    // paused leader cannot act, so another's term beginning meanwhile is
    // two leaders only if the paused one still leads once it runs again.
    let mut frozen: BTreeSet<String> = BTreeSet::new();
    let mut paused_since: HashMap<&str, i64> = HashMap::new();
    for event in events {
        if MARKED.contains(&event.event.as_str()) {
            analysis.marks.push(Mark {
                event: event.event.clone(),
                node: label(&event.process),
                lease: event.name.clone(),
                at_ms: event.unix_ms,
                json: event.json.clone(),
            });
        }
        match event.event.as_str() {
            "leader" => {
                let terms = open.entry(event.name.clone()).or_default();
                if let Some(mut again) = terms.remove(&event.process) {
                    // Led again without a line between: the old term ended
                    // where the new one began.
                    again.end_ms = event.unix_ms;
                    again.end = TermEnd::Left("led again".to_string());
                    closed.push(again);
                }
                let ttl_ms = event.ttl_ms.unwrap_or(default_ttl_ms);
                let term = Term {
                    lease: event.name.clone(),
                    node: label(&event.process),
                    process: event.process.clone(),
                    epoch: event.epoch,
                    start_ms: event.unix_ms,
                    end_ms: event.unix_ms,
                    end: TermEnd::Open,
                    ttl_ms,
                    interval_ms: event.interval_ms.unwrap_or(ttl_ms / 4),
                    start_json: event.json.clone(),
                    end_json: None,
                    overlapped_until: event.unix_ms,
                };
                let others: Vec<String> = terms
                    .keys()
                    .filter(|other| !frozen.contains(*other))
                    .filter(|other| {
                        !ends_at.contains(&(event.name.as_str(), other.as_str(), event.unix_ms))
                    })
                    .cloned()
                    .collect();
                for other in others {
                    let Some(first) = terms.get_mut(&other) else {
                        continue;
                    };
                    let other_last = last_ms(&other);
                    // A tenth of the ttl of slack: the holder's line is
                    // printed a round trip after its row's expiry was set.
                    let lapse = first.ttl_ms - first.ttl_ms / 10;
                    if event.unix_ms < other_last.saturating_add(lapse) {
                        // Still printing, or too soon for its row to have
                        // lapsed: both claim the lease.
                        first.overlapped_until = first.overlapped_until.max(event.unix_ms);
                        let first = first.clone();
                        flag(&first, &term, event.unix_ms, &mut overlaps);
                    } else if let Some(mut ended) = terms.remove(&other) {
                        ended.end_ms = other_last.max(ended.overlapped_until);
                        ended.end = TermEnd::StreamEnded;
                        closed.push(ended);
                    }
                }
                terms.insert(event.process.clone(), term);
            }
            "pause" => {
                frozen.insert(event.process.clone());
                paused_since.entry(&event.process).or_insert(event.unix_ms);
            }
            "resume" => {
                frozen.remove(&event.process);
                if let Some(from) = paused_since.remove(event.process.as_str()) {
                    analysis
                        .pauses
                        .push((label(&event.process), from, event.unix_ms));
                }
                // Still leading, running again, beside another leader
                // (unless it leaves in this very millisecond, as a resumed
                // leader past its deadline does).
                for (lease, terms) in &open {
                    let Some(resumed) = terms.get(&event.process) else {
                        continue;
                    };
                    if ends_at.contains(&(lease.as_str(), event.process.as_str(), event.unix_ms)) {
                        continue;
                    }
                    for (process, other) in terms {
                        if *process != event.process && !frozen.contains(process) {
                            flag(resumed, other, event.unix_ms, &mut overlaps);
                        }
                    }
                }
            }
            "follower" | "handover" | "crash" => {
                let crash = event.event == "crash";
                if crash {
                    frozen.remove(&event.process);
                    if let Some(from) = paused_since.remove(event.process.as_str()) {
                        analysis
                            .pauses
                            .push((label(&event.process), from, event.unix_ms));
                    }
                }
                // A crash ends every term of the process; a line of `run`
                // ends its lease's.
                let mut end = |terms: &mut BTreeMap<String, Term>| {
                    if let Some(mut term) = terms.remove(&event.process) {
                        term.end_ms = event.unix_ms;
                        term.end = match event.event.as_str() {
                            "handover" => TermEnd::HandedOver,
                            "crash" => TermEnd::Crashed,
                            _ => TermEnd::Left(
                                event.reason.clone().unwrap_or_else(|| "left".to_string()),
                            ),
                        };
                        term.end_json = Some(event.json.clone());
                        closed.push(term);
                    }
                };
                if crash {
                    open.values_mut().for_each(&mut end);
                } else if let Some(terms) = open.get_mut(&event.name) {
                    end(terms);
                }
            }
            _ => {}
        }
    }
    for (process, from) in paused_since {
        analysis
            .pauses
            .push((label(process), from, analysis.end_ms));
    }
    analysis.pauses.sort();
    for terms in open.into_values() {
        for mut term in terms.into_values() {
            term.end_ms = analysis.end_ms;
            closed.push(term);
        }
    }
    closed.sort_by(|a, b| (&a.lease, a.start_ms, &a.node).cmp(&(&b.lease, b.start_ms, &b.node)));
    // Each overlap lasts until the first of its two terms ended.
    let ended: HashMap<(&str, &str, i64), &Term> = closed
        .iter()
        .map(|t| ((t.lease.as_str(), t.process.as_str(), t.start_ms), t))
        .collect();
    for overlap in &mut overlaps {
        for term in [&mut overlap.first, &mut overlap.second] {
            if let Some(done) =
                ended.get(&(term.lease.as_str(), term.process.as_str(), term.start_ms))
            {
                term.end_ms = done.end_ms;
                term.end = done.end.clone();
                term.end_json = done.end_json.clone();
            }
        }
        overlap.to_ms = overlap
            .first
            .end_ms
            .min(overlap.second.end_ms)
            .max(overlap.from_ms);
    }
    // A term reported ended by its deadline (`expired`, `clock`) with no
    // line of its process between the other's start and that report: a
    // paused or starved process saying late what it already knew.
    let silent = |process: &str, from: i64, to: i64| {
        let t = times.get(process).map_or(&[][..], Vec::as_slice);
        let after = t.partition_point(|&ms| ms <= from);
        let before = t.partition_point(|&ms| ms < to);
        after >= before
    };
    let (late, overlaps): (Vec<_>, Vec<_>) = overlaps.into_iter().partition(|o| {
        matches!(&o.first.end, TermEnd::Left(r) if r == "expired" || r == "clock")
            && silent(&o.first.process, o.from_ms, o.first.end_ms)
    });
    analysis.overlaps = overlaps;
    analysis.late_reports = late;
    analysis.gaps = gaps(&closed);
    analysis.terms = closed;
    analysis.leases = leases.into_iter().collect();
    analysis
}

/// Each process's name as drawn: its node name, or, when processes share
/// a node name, the name and its holder id.
fn labels(events: &[Event]) -> HashMap<String, String> {
    let mut per_node: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for event in events {
        per_node
            .entry(&event.node)
            .or_default()
            .insert(&event.process);
    }
    events
        .iter()
        .map(|e| {
            let shared = per_node.get(e.node.as_str()).is_some_and(|p| p.len() > 1);
            let label = if shared && e.process != e.node {
                format!("{} ({})", e.node, e.process)
            } else {
                e.node.clone()
            };
            (e.process.clone(), label)
        })
        .collect()
}

/// The leaderless stretches between one lease's consecutive terms.
fn gaps(terms: &[Term]) -> Vec<Gap> {
    let mut gaps = Vec::new();
    let mut led_until: Option<(&Term, i64)> = None;
    for term in terms {
        match led_until {
            Some((before, until)) if before.lease == term.lease => {
                if term.start_ms > until {
                    // A follower's poll, then the statement that takes
                    // the row: a tenth of an interval is allowed for it
                    // (a set on SQLite took 252 ms at interval 250 ms).
                    let within_interval =
                        before.interval_ms.saturating_add(before.interval_ms / 10);
                    let after_a_lapse = before.ttl_ms.saturating_add(before.interval_ms);
                    let (after, bound_ms) = match &before.end {
                        // Handed on: the holder's release or planned
                        // handover, taken within a follower's poll.
                        TermEnd::Left(reason)
                            if ["released", "handover", "unhealthy", "escalated"]
                                .contains(&reason.as_str()) =>
                        {
                            (reason.clone(), within_interval)
                        }
                        TermEnd::HandedOver => ("handover".to_string(), within_interval),
                        TermEnd::Left(reason) => (reason.clone(), after_a_lapse),
                        TermEnd::Crashed => ("crash".to_string(), after_a_lapse),
                        TermEnd::StreamEnded => (
                            "its stream ended (crash or kill)".to_string(),
                            after_a_lapse,
                        ),
                        TermEnd::Open => ("open".to_string(), after_a_lapse),
                    };
                    gaps.push(Gap {
                        lease: term.lease.clone(),
                        from_ms: until,
                        to_ms: term.start_ms,
                        bound_ms,
                        after,
                        unknown_start: before.end == TermEnd::StreamEnded,
                    });
                }
                if term.end_ms > until {
                    led_until = Some((term, term.end_ms));
                }
            }
            _ => led_until = Some((term, term.end_ms)),
        }
    }
    gaps
}

#[cfg(test)]
#[path = "terms_tests.rs"]
mod tests;
