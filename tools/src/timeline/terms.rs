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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::events::Event;

/// The ttl assumed for a term whose `leader` line does not say its own
/// (`run`'s default).
pub const DEFAULT_TTL_MS: i64 = 10_000;

/// How a term ended.
#[derive(Clone, Debug, PartialEq)]
pub enum TermEnd {
    /// The process said it left (`follower`, with its reason).
    Left(String),
    /// The process handed the lease over (`handover`).
    HandedOver,
    /// The process was crashed at this moment (a `crash` line of `demo` or
    /// `simulate`).
    Crashed,
    /// The process's stream ended while it led, at `end_ms` (its last
    /// line), and another process led the lease later: a crash or a kill,
    /// whose real end lies between its last line and the next term.
    StreamEnded,
    /// Still leading when the capture ended.
    Open,
}

/// One term: a process leading a lease.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// The lease.
    pub lease: String,
    /// The process.
    pub node: String,
    /// The epoch its `leader` line named.
    pub epoch: Option<u64>,
    /// Its `leader` line's time.
    pub start_ms: i64,
    /// Its end (for [`TermEnd::StreamEnded`], the process's last line).
    pub end_ms: i64,
    /// How it ended.
    pub end: TermEnd,
    /// The ttl and interval its leader line named, or the defaults.
    pub ttl_ms: i64,
    /// The interval (a quarter of the ttl unless the line says).
    pub interval_ms: i64,
    /// The `leader` line.
    pub start_json: String,
    /// The line that ended it, if any.
    pub end_json: Option<String>,
}

/// A stretch with no leader of a lease between two terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Gap {
    /// The lease.
    pub lease: String,
    /// The end of the term before.
    pub from_ms: i64,
    /// The start of the term after.
    pub to_ms: i64,
    /// What DESIGN §4 bounds this kind of gap by: an interval after a
    /// release or handover (a follower's poll; notifications make it
    /// milliseconds), ttl + interval after a crash or a lost term.
    pub bound_ms: i64,
    /// Why the term before ended, in words (`released`, `crash`, …).
    pub after: String,
}

impl Gap {
    /// The gap's length.
    pub fn len_ms(&self) -> i64 {
        self.to_ms - self.from_ms
    }
}

/// Two processes leading one lease at once.
#[derive(Clone, Debug, PartialEq)]
pub struct Overlap {
    /// The lease.
    pub lease: String,
    /// The term that was already running, and the one that began inside it.
    pub first: Term,
    /// The second term.
    pub second: Term,
    /// The stretch both claimed.
    pub from_ms: i64,
    /// Its end.
    pub to_ms: i64,
}

/// An event drawn as a mark: a CMD's start or exit, a failure, a health
/// verdict, a handover, a crash, a pause.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    /// The event's name.
    pub event: String,
    /// The process.
    pub node: String,
    /// The lease.
    pub lease: String,
    /// When.
    pub at_ms: i64,
    /// The line.
    pub json: String,
}

/// Everything the picture shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Analysis {
    /// Every term, by lease, then start.
    pub terms: Vec<Term>,
    /// Every leaderless gap between two terms.
    pub gaps: Vec<Gap>,
    /// Every double leadership.
    pub overlaps: Vec<Overlap>,
    /// Terms that another process led into while their holder had not
    /// said it left, but which it then reported ended by their deadline
    /// (`follower` `expired` or `clock`): a process paused or starved past
    /// its deadline says so when it runs again (DESIGN §4b), and the row
    /// lapses only after that deadline, so the lease was not led twice.
    /// Drawn, not counted as overlaps.
    pub late_reports: Vec<Overlap>,
    /// Marks.
    pub marks: Vec<Mark>,
    /// Stretches a process was paused (`pause` to `resume` lines of
    /// `simulate`): (process, from, to).
    pub pauses: Vec<(String, i64, i64)>,
    /// The processes, in order of first appearance.
    pub nodes: Vec<String>,
    /// The leases, sorted.
    pub leases: Vec<String>,
    /// The first and last event's time.
    pub start_ms: i64,
    /// The end of the capture.
    pub end_ms: i64,
}

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
    // Each process's last line, and its crashes, for the ends of terms it
    // did not announce.
    let mut last_ms: HashMap<&str, i64> = HashMap::new();
    let mut seen_nodes = BTreeSet::new();
    let mut leases = BTreeSet::new();
    for event in events {
        last_ms.insert(&event.node, event.unix_ms);
        if seen_nodes.insert(event.node.clone()) {
            analysis.nodes.push(event.node.clone());
        }
        if !event.name.is_empty() {
            leases.insert(event.name.clone());
        }
    }
    // Open terms by lease, then process.
    let mut open: BTreeMap<String, BTreeMap<String, Term>> = BTreeMap::new();
    let mut closed: Vec<Term> = Vec::new();
    // Processes paused now (`pause` lines of `simulate` and `check`): a
    // paused leader cannot act, so another's term beginning meanwhile is
    // two leaders only if the paused one still leads once it runs again.
    let mut frozen: BTreeSet<String> = BTreeSet::new();
    for event in events {
        if MARKED.contains(&event.event.as_str()) {
            analysis.marks.push(Mark {
                event: event.event.clone(),
                node: event.node.clone(),
                lease: event.name.clone(),
                at_ms: event.unix_ms,
                json: event.json.clone(),
            });
        }
        match event.event.as_str() {
            "leader" => {
                let terms = open.entry(event.name.clone()).or_default();
                if let Some(mut again) = terms.remove(&event.node) {
                    // Led again without a line between: the old term ended
                    // where the new one began.
                    again.end_ms = event.unix_ms;
                    again.end = TermEnd::Left("led again".to_string());
                    closed.push(again);
                }
                let ttl_ms = event.ttl_ms.unwrap_or(default_ttl_ms);
                let term = Term {
                    lease: event.name.clone(),
                    node: event.node.clone(),
                    epoch: event.epoch,
                    start_ms: event.unix_ms,
                    end_ms: event.unix_ms,
                    end: TermEnd::Open,
                    ttl_ms,
                    interval_ms: event.interval_ms.unwrap_or(ttl_ms / 4),
                    start_json: event.json.clone(),
                    end_json: None,
                };
                let others: Vec<String> = terms.keys().cloned().collect();
                for other in others.into_iter().filter(|o| !frozen.contains(o)) {
                    let first = &terms[&other];
                    let other_last = last_ms.get(other.as_str()).copied().unwrap_or(0);
                    // A tenth of the ttl of slack: the holder's line is
                    // printed a round trip after its row's expiry was set.
                    if event.unix_ms < other_last + first.ttl_ms - first.ttl_ms / 10 {
                        // Still printing, or too soon for its row to have
                        // lapsed: both claim the lease.
                        analysis.overlaps.push(Overlap {
                            lease: event.name.clone(),
                            first: first.clone(),
                            second: term.clone(),
                            from_ms: event.unix_ms,
                            to_ms: event.unix_ms,
                        });
                    } else if let Some(mut ended) = terms.remove(&other) {
                        ended.end_ms = other_last.max(ended.start_ms);
                        ended.end = TermEnd::StreamEnded;
                        closed.push(ended);
                    }
                }
                terms.insert(event.node.clone(), term);
            }
            "pause" => {
                frozen.insert(event.node.clone());
            }
            "resume" => {
                frozen.remove(&event.node);
                // Still leading, running again, beside another leader.
                for terms in open.values() {
                    let Some(resumed) = terms.get(&event.node) else {
                        continue;
                    };
                    for (node, other) in terms {
                        if *node != event.node && !frozen.contains(node) {
                            analysis.overlaps.push(Overlap {
                                lease: resumed.lease.clone(),
                                first: resumed.clone(),
                                second: other.clone(),
                                from_ms: event.unix_ms,
                                to_ms: event.unix_ms,
                            });
                        }
                    }
                }
            }
            "follower" | "handover" | "crash" => {
                if event.event == "crash" {
                    frozen.remove(&event.node);
                }
                // A crash ends every term of the process; a line of `run`
                // ends its lease's.
                let crash = event.event == "crash";
                for (lease, terms) in open.iter_mut() {
                    if !crash && *lease != event.name {
                        continue;
                    }
                    if let Some(mut term) = terms.remove(&event.node) {
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
                }
            }
            _ => {}
        }
    }
    let mut paused: HashMap<&str, i64> = HashMap::new();
    for event in events {
        match event.event.as_str() {
            "pause" => {
                paused.entry(&event.node).or_insert(event.unix_ms);
            }
            "resume" | "crash" => {
                if let Some(from) = paused.remove(event.node.as_str()) {
                    analysis
                        .pauses
                        .push((event.node.clone(), from, event.unix_ms));
                }
            }
            _ => {}
        }
    }
    for (node, from) in paused {
        analysis
            .pauses
            .push((node.to_string(), from, analysis.end_ms));
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
    for overlap in &mut analysis.overlaps {
        let end_of = |wanted: &Term| {
            closed
                .iter()
                .find(|t| {
                    t.lease == wanted.lease
                        && t.node == wanted.node
                        && t.start_ms == wanted.start_ms
                })
                .map_or(wanted.end_ms, |t| t.end_ms)
        };
        overlap.to_ms = end_of(&overlap.first).min(end_of(&overlap.second));
        overlap.first.end_ms = end_of(&overlap.first);
        overlap.second.end_ms = end_of(&overlap.second);
        if let Some(ended) = closed.iter().find(|t| {
            t.lease == overlap.first.lease
                && t.node == overlap.first.node
                && t.start_ms == overlap.first.start_ms
        }) {
            overlap.first.end = ended.end.clone();
        }
    }
    let (late, overlaps): (Vec<_>, Vec<_>) = std::mem::take(&mut analysis.overlaps)
        .into_iter()
        .partition(|o| matches!(&o.first.end, TermEnd::Left(r) if r == "expired" || r == "clock"));
    analysis.overlaps = overlaps;
    analysis.late_reports = late;
    analysis.gaps = gaps(&closed);
    analysis.terms = closed;
    analysis.leases = leases.into_iter().collect();
    analysis
}

/// The leaderless stretches between one lease's consecutive terms.
fn gaps(terms: &[Term]) -> Vec<Gap> {
    let mut gaps = Vec::new();
    let mut led_until: Option<(&Term, i64)> = None;
    for term in terms {
        match led_until {
            Some((before, until)) if before.lease == term.lease => {
                if term.start_ms > until {
                    let (after, bound_ms) = match &before.end {
                        TermEnd::Left(reason) if reason == "released" => {
                            ("released".to_string(), before.interval_ms)
                        }
                        TermEnd::HandedOver => ("handover".to_string(), before.interval_ms),
                        TermEnd::Left(reason) if reason == "handover" => {
                            ("handover".to_string(), before.interval_ms)
                        }
                        TermEnd::Left(reason) => {
                            (reason.clone(), before.ttl_ms + before.interval_ms)
                        }
                        TermEnd::Crashed => {
                            ("crash".to_string(), before.ttl_ms + before.interval_ms)
                        }
                        TermEnd::StreamEnded => (
                            "its stream ended (crash or kill)".to_string(),
                            before.ttl_ms + before.interval_ms,
                        ),
                        TermEnd::Open => ("open".to_string(), before.ttl_ms + before.interval_ms),
                    };
                    gaps.push(Gap {
                        lease: term.lease.clone(),
                        from_ms: until,
                        to_ms: term.start_ms,
                        bound_ms,
                        after,
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
