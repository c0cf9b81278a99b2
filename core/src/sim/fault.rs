//! Scheduled faults, and their textual form for `picolease simulate`.

use std::fmt;
use std::time::Duration;

/// Which node a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Whichever node leads when the fault fires (skipped if none does);
    /// for `restart`, the node that went down most recently.
    Leader,
    /// Node number `n` (from 0).
    Node(usize),
}

/// What happens to the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The process dies: no release, in-flight replies lost.
    Crash,
    /// A crashed or shut-down node starts again (with a new holder id).
    Restart,
    /// Clean shutdown: stop work, release, finish.
    Shutdown,
    /// The process is frozen (SIGSTOP) for the duration; its clock runs on.
    Pause(Duration),
    /// Every message between the node and the database is lost for the
    /// duration.
    Partition(Duration),
    /// The database server is replaced (an asynchronous standby promoted,
    /// or a crash with `synchronous_commit = off`) by one that lacks the
    /// writes of the last `Duration`, under a new incarnation (DESIGN §3
    /// "Failover"). It hits no node; `failover@20s+2s`.
    Failover(Duration),
    /// A planned handover (DESIGN §3 "Planned handover"): the node, if it
    /// leads, hands the lease to the next node (by index, wrapping) and
    /// goes on as a follower; `handover@12s`.
    HandOver,
    /// The node's health probe fails for the duration (DESIGN §5 "Work
    /// that fails"); `unhealthy:0@10s+20s`.
    Unhealthy(Duration),
    /// The node's work fails past its restart policy: it escalates and
    /// stands aside for [`crate::sim::SimConfig::cool_down`];
    /// `escalate@12s`.
    Escalate,
}

/// One fault at a real (virtual) time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    /// Real time since the start of the simulation.
    pub at: Duration,
    /// The node hit.
    pub target: Target,
    /// What happens.
    pub kind: FaultKind,
}

/// A fault list that does not parse; names the offending item.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("fault {item:?}: {problem} (expected KIND[:NODE]@TIME[+DURATION], e.g. crash@3s, pause:1@10s+12s, partition@20s+5s, shutdown@30s, restart@40s, failover@50s+2s, handover@60s, unhealthy:0@10s+20s, escalate@12s)")]
pub struct FaultParseError {
    /// The item that failed.
    pub item: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Parses `500ms`, `2s`, `1.5s`, `1m`, `250us`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    let secs = match unit {
        "us" | "µs" => value / 1e6,
        "ms" => value / 1e3,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

impl Fault {
    /// Parses a comma-separated list such as `crash@3s,shutdown@20s`.
    pub fn parse_list(list: &str) -> Result<Vec<Fault>, FaultParseError> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(Fault::parse)
            .collect()
    }

    /// Parses one item: `KIND[:NODE]@TIME[+DURATION]`.
    pub fn parse(item: &str) -> Result<Fault, FaultParseError> {
        let fail = |problem: &str| FaultParseError {
            item: item.to_string(),
            problem: problem.to_string(),
        };
        let (head, when) = item.split_once('@').ok_or_else(|| fail("missing @TIME"))?;
        let (kind, target) = match head.split_once(':') {
            Some((kind, node)) => (
                kind,
                Target::Node(node.parse().map_err(|_| fail("NODE must be a number"))?),
            ),
            None => (head, Target::Leader),
        };
        let (at, duration) = match when.split_once('+') {
            Some((at, d)) => (
                at,
                Some(parse_duration(d).ok_or_else(|| fail("bad DURATION"))?),
            ),
            None => (when, None),
        };
        let at = parse_duration(at).ok_or_else(|| fail("bad TIME"))?;
        let needs = |d: Option<Duration>| d.ok_or_else(|| fail("this fault needs +DURATION"));
        let kind =
            match kind {
                "crash" => FaultKind::Crash,
                "restart" => FaultKind::Restart,
                "shutdown" => FaultKind::Shutdown,
                "pause" => FaultKind::Pause(needs(duration)?),
                "partition" => FaultKind::Partition(needs(duration)?),
                "failover" => FaultKind::Failover(needs(duration)?),
                "handover" => FaultKind::HandOver,
                "unhealthy" => FaultKind::Unhealthy(needs(duration)?),
                "escalate" => FaultKind::Escalate,
                _ => return Err(fail(
                    "unknown KIND (crash, restart, shutdown, pause, partition, failover, handover, unhealthy, escalate)",
                )),
            };
        Ok(Fault { at, target, kind })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, duration) = match self.kind {
            FaultKind::Crash => ("crash", None),
            FaultKind::Restart => ("restart", None),
            FaultKind::Shutdown => ("shutdown", None),
            FaultKind::Pause(d) => ("pause", Some(d)),
            FaultKind::Partition(d) => ("partition", Some(d)),
            FaultKind::Failover(d) => ("failover", Some(d)),
            FaultKind::HandOver => ("handover", None),
            FaultKind::Unhealthy(d) => ("unhealthy", Some(d)),
            FaultKind::Escalate => ("escalate", None),
        };
        f.write_str(kind)?;
        if let Target::Node(n) = self.target {
            write!(f, ":{n}")?;
        }
        write!(f, "@{}ms", self.at.as_millis())?;
        if let Some(d) = duration {
            write!(f, "+{}ms", d.as_millis())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_lists_round_trip() {
        let faults = Fault::parse_list(
            "crash@3s, pause:1@10s+12s,partition@20.5s+500ms,shutdown@30s,restart:0@40s,failover@50s+2s,handover:1@60s",
        )
        .unwrap();
        assert_eq!(faults.len(), 7);
        assert_eq!(faults[5].kind, FaultKind::Failover(Duration::from_secs(2)));
        assert_eq!(faults[6].kind, FaultKind::HandOver);
        assert_eq!(
            faults[1],
            Fault {
                at: Duration::from_secs(10),
                target: Target::Node(1),
                kind: FaultKind::Pause(Duration::from_secs(12))
            }
        );
        let text: Vec<String> = faults.iter().map(Fault::to_string).collect();
        assert_eq!(Fault::parse_list(&text.join(",")).unwrap(), faults);
    }

    #[test]
    fn bad_faults_name_the_item() {
        let err = Fault::parse_list("crash@3s,explode@4s").unwrap_err();
        assert_eq!(err.item, "explode@4s");
        assert!(Fault::parse("pause@3s").is_err());
        assert!(Fault::parse("crash").is_err());
        assert!(Fault::parse("crash:x@1s").is_err());
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration("5"), None);
    }
}
