//! The metrics of lease sets (feature `metrics`), beside the single-lease
//! ones of `crate::metrics`:
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `picolease_leader` | gauge | `lease` | 1 while this node leads that lease |
//! | `picolease_epoch` | gauge | `lease` | the epoch last held or observed |
//! | `picolease_transitions_total` | counter | `lease`, `to`, `reason` | terms begun and ended, per lease |
//! | `picolease_handovers_total` | counter | `lease`, `result` | a lease's planned handovers, as a lone lease counts them |
//! | `picolease_batch_duration_seconds` | histogram | `statement` = `acquire`\|`renew`\|`release`\|`survey` | one batch, from handing it out to its result |
//! | `picolease_batch_failures_total` | counter | `statement`, `kind` = `transient`\|`fatal`\|`timeout` | failed batches (`timeout`: given up past the request timeout) |
//! | `picolease_set_held`, `picolease_set_target`, `picolease_set_members` | gauges | | leases held, the fair share, live members |
//!
//! Per-lease series appear with the lease's first change (not at zero:
//! a set may have 100,000 leases), through `super::LeaseSeries`, as a
//! lone lease's; this module holds the set's own: batches and the share.

use std::time::Duration;

use picolease_core::{BatchKind, BatchReply, Failure};

pub(crate) fn share(held: usize, target: Option<usize>, members: usize) {
    metrics::gauge!("picolease_set_held").set(held as f64);
    metrics::gauge!("picolease_set_target").set(target.map_or(0.0, |t| t as f64));
    metrics::gauge!("picolease_set_members").set(members as f64);
}

/// A batch the set gave up on past its request timeout.
pub(crate) fn batch_timed_out(kind: BatchKind) {
    metrics::counter!("picolease_batch_failures_total", "statement" => statement(kind), "kind" => "timeout")
        .increment(1);
}

fn statement(kind: BatchKind) -> &'static str {
    match kind {
        BatchKind::Acquire => "acquire",
        BatchKind::Renew => "renew",
        BatchKind::Release => "release",
        BatchKind::Survey => "survey",
        BatchKind::HandOver => "hand_over",
    }
}

pub(crate) fn batch(kind: BatchKind, elapsed: Duration, reply: &BatchReply) {
    let statement = statement(kind);
    match reply {
        BatchReply::Failed(failure) => {
            let kind = match failure {
                Failure::Transient => "transient",
                Failure::Fatal => "fatal",
            };
            metrics::counter!("picolease_batch_failures_total", "statement" => statement, "kind" => kind)
                .increment(1);
        }
        _ => metrics::histogram!("picolease_batch_duration_seconds", "statement" => statement)
            .record(elapsed.as_secs_f64()),
    }
}
