//! The input of `picolease timeline`: `run --json` lines (one object per
//! line, each with `event`, `name`, `node` and `unix_ms`), from any number
//! of streams, merged into one order.

use serde_json::Value;

use crate::failure::CliError;

/// One event of a run, as `run --json` printed it.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// `leader`, `follower`, `handover`, `observed`, `child`, …
    pub event: String,
    /// The lease.
    pub name: String,
    /// The process (`--node`, or its holder id).
    pub node: String,
    /// When, in milliseconds since the Unix epoch (or since a simulated
    /// run's start).
    pub unix_ms: i64,
    /// The term the event belongs to, when it names one.
    pub epoch: Option<u64>,
    /// `follower`'s reason.
    pub reason: Option<String>,
    /// The lease's ttl in milliseconds, when the line says it (`leader`
    /// lines of `run` do): the bound of a crash takeover.
    pub ttl_ms: Option<i64>,
    /// The poll and renewal interval in milliseconds, when the line says it.
    pub interval_ms: Option<i64>,
    /// The line as it was read: shown when the pointer rests on its mark.
    pub json: String,
    /// Its place in the input (stream, then line): ties in time keep it.
    pub seq: usize,
}

impl Event {
    /// Whether the event ends its node's term of its lease.
    pub fn ends_term(&self) -> bool {
        matches!(self.event.as_str(), "follower" | "handover")
    }
}

/// Reads one stream: each line that is a JSON object with the four keys
/// is an event; blank lines are skipped; anything else is an error naming
/// the stream and the line (a log with a stray line is not silently read
/// as a shorter run).
pub fn parse_stream(source: &str, text: &str, first_seq: usize) -> Result<Vec<Event>, CliError> {
    let mut events = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{source}:{}", number + 1);
        let value: Value = serde_json::from_str(line).map_err(|e| {
            CliError::usage(format!(
                "{}: not a JSON line of `run --json` ({e}): {}",
                at(),
                shorten(line)
            ))
        })?;
        let text_key = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        let (Some(event), Some(name), Some(node), Some(unix_ms)) = (
            text_key("event"),
            text_key("name"),
            text_key("node"),
            value.get("unix_ms").and_then(Value::as_i64),
        ) else {
            return Err(CliError::usage(format!(
                "{}: an event needs \"event\", \"name\", \"node\" (strings) and \"unix_ms\" (an integer): {}",
                at(),
                shorten(line)
            )));
        };
        events.push(Event {
            event,
            name,
            node,
            unix_ms,
            epoch: value.get("epoch").and_then(Value::as_u64),
            reason: text_key("reason"),
            ttl_ms: value.get("ttl_ms").and_then(Value::as_i64),
            interval_ms: value.get("interval_ms").and_then(Value::as_i64),
            json: line.to_string(),
            seq: first_seq + events.len(),
        });
    }
    Ok(events)
}

/// Merges streams into one order: by time; at the same millisecond a term's
/// end before a term's start (a lease left and taken within a millisecond
/// was not led twice), then in input order.
pub fn merge(mut events: Vec<Event>) -> Vec<Event> {
    events.sort_by_key(|e| (e.unix_ms, !e.ends_term(), e.seq));
    events
}

fn shorten(line: &str) -> String {
    const MAX: usize = 120;
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stray_line_is_an_error_naming_its_place() {
        let text = "{\"event\":\"leader\",\"name\":\"a\",\"node\":\"n1\",\"unix_ms\":5}\nhello\n";
        let error = parse_stream("run1.jsonl", text, 0).unwrap_err().to_string();
        assert!(error.contains("run1.jsonl:2"), "{error}");
        assert!(error.contains("hello"), "{error}");
    }

    #[test]
    fn a_missing_key_is_named() {
        let error = parse_stream(
            "x",
            "{\"event\":\"leader\",\"name\":\"a\",\"unix_ms\":5}",
            0,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("\"node\""), "{error}");
    }

    #[test]
    fn streams_merge_by_time_with_an_end_before_a_start_at_the_same_millisecond() {
        let a = parse_stream(
            "a",
            "{\"event\":\"leader\",\"name\":\"l\",\"node\":\"b\",\"unix_ms\":10,\"epoch\":2}",
            0,
        )
        .unwrap();
        let b = parse_stream(
            "b",
            "{\"event\":\"leader\",\"name\":\"l\",\"node\":\"a\",\"unix_ms\":1,\"epoch\":1}\n\
             {\"event\":\"follower\",\"name\":\"l\",\"node\":\"a\",\"unix_ms\":10,\"epoch\":1,\"reason\":\"released\"}",
            1,
        )
        .unwrap();
        let merged = merge([a, b].concat());
        let order: Vec<_> = merged
            .iter()
            .map(|e| (e.node.as_str(), e.event.as_str()))
            .collect();
        assert_eq!(order, [("a", "leader"), ("a", "follower"), ("b", "leader")]);
        assert_eq!(merged[1].reason.as_deref(), Some("released"));
    }
}
