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
    /// The process's node name (`--node`, or its holder id).
    pub node: String,
    /// The process itself: its holder id where the line names it
    /// (`leader`, `follower`, `handover`), else the last one its stream
    /// named for that node, else the node name. Two processes may share a
    /// `--node`; their holder ids tell them apart.
    pub process: String,
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
    let mut holders: std::collections::HashMap<String, String> = Default::default();
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
        // Times a person's run can have: from the epoch (or a simulated
        // run's start) to 2^53 ms, ttl and interval up to a year; beyond,
        // sums of them could overflow.
        const MAX_MS: i64 = 1 << 53;
        const MAX_SPAN_MS: i64 = 365 * 24 * 3600 * 1000;
        let span = |key: &str| -> Result<Option<i64>, CliError> {
            match value.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => match v.as_i64().filter(|ms| (0..=MAX_SPAN_MS).contains(ms)) {
                    Some(ms) => Ok(Some(ms)),
                    None => Err(CliError::usage(format!(
                        "{}: \"{key}\" must be milliseconds from 0 to a year, not {v}",
                        at()
                    ))),
                },
            }
        };
        if !(0..=MAX_MS).contains(&unix_ms) {
            return Err(CliError::usage(format!(
                "{}: \"unix_ms\" must be from 0 to 2^53, not {unix_ms}",
                at()
            )));
        }
        let (ttl_ms, interval_ms) = (span("ttl_ms")?, span("interval_ms")?);
        let own = match event.as_str() {
            "leader" | "follower" => text_key("holder"),
            "handover" => text_key("from"),
            _ => None,
        };
        if let Some(holder) = &own {
            holders.insert(node.clone(), holder.clone());
        }
        let process = own
            .or_else(|| holders.get(&node).cloned())
            .unwrap_or_else(|| node.clone());
        events.push(Event {
            event,
            name,
            node,
            process,
            unix_ms,
            epoch: value.get("epoch").and_then(Value::as_u64),
            reason: text_key("reason"),
            ttl_ms,
            interval_ms,
            json: line.to_string(),
            seq: first_seq + events.len(),
        });
    }
    Ok(events)
}

/// Merges streams into one order: by time, then in input order (a
/// stream's own lines stay in its order; a term that ends in the same
/// millisecond as another process's begins is not two leaders:
/// `terms::analyse` looks ahead for it).
pub fn merge(mut events: Vec<Event>) -> Vec<Event> {
    events.sort_by_key(|e| (e.unix_ms, e.seq));
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
    fn times_out_of_range_are_refused_naming_the_key() {
        for (line, key) in [
            (
                r#"{"event":"leader","name":"a","node":"n","unix_ms":-5}"#,
                "unix_ms",
            ),
            (
                r#"{"event":"leader","name":"a","node":"n","unix_ms":5,"ttl_ms":9223372036854775807}"#,
                "ttl_ms",
            ),
            (
                r#"{"event":"leader","name":"a","node":"n","unix_ms":5,"interval_ms":-1}"#,
                "interval_ms",
            ),
        ] {
            let error = parse_stream("x", line, 0).unwrap_err().to_string();
            assert!(error.contains(key), "{error}");
        }
    }

    #[test]
    fn a_process_is_its_holder_id_on_every_line_after_it_names_one() {
        let text = [
            r#"{"event":"observed","name":"l","node":"web","unix_ms":1,"holder":"other#1","epoch":1}"#,
            r#"{"event":"leader","name":"l","node":"web","unix_ms":2,"holder":"web#a","epoch":2}"#,
            r#"{"event":"child","name":"l","node":"web","unix_ms":3,"pid":5,"epoch":2}"#,
        ]
        .join("\n");
        let events = parse_stream("x", &text, 0).unwrap();
        let processes: Vec<_> = events.iter().map(|e| e.process.as_str()).collect();
        assert_eq!(processes, ["web", "web#a", "web#a"]);
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
    fn streams_merge_by_time_then_input_order() {
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
        // The same millisecond keeps input order (`terms::analyse` looks
        // ahead for a term ending in it).
        assert_eq!(order, [("a", "leader"), ("b", "leader"), ("a", "follower")]);
        assert_eq!(merged[2].reason.as_deref(), Some("released"));
    }
}
