//! What a statement's end records, for a lone lease's statement or a
//! set's batch: the loop's health, the metrics, the renew latencies.

use std::time::Duration;

use picolease_core::engine::{Answer, Ran};
use picolease_core::{BatchReply, Operation, Reply};

use super::Runner;
use crate::metrics::Outcome;
use crate::publish::Health;

impl<G> Runner<G> {
    /// A statement ended after `elapsed`: the loop's health steps, the
    /// metrics count it (a lone lease's own series, or the set's), and a
    /// renewal's time joins the renew latencies of each lease it renewed.
    /// `answer` is `None` for one given up on.
    pub(super) fn record(
        &self,
        ran: Ran,
        elapsed: Duration,
        outcome: Outcome,
        answer: Option<&Answer>,
    ) {
        match ran {
            Ran::Row(operation) => {
                // A lone lease's, or a set's hand-over (known in flight).
                let lease = self.engine.row_lease();
                let Some(member) = lease.and_then(|lease| self.members.get(lease.as_str())) else {
                    return;
                };
                member
                    .publisher
                    .record_statement(operation, elapsed, outcome);
                match (operation, answer) {
                    (Operation::Renew { .. }, Some(Answer::Row(Reply::Accepted))) => {
                        member.publisher.record_renewal(elapsed);
                    }
                    // `picolease_handovers_total`: refused or failed.
                    #[cfg(feature = "metrics")]
                    (Operation::HandOver { .. }, answer) => {
                        if let Some(series) = member.publisher.series() {
                            series.hand_over_answered(answer);
                        }
                    }
                    _ => {}
                }
            }
            Ran::Batch(kind) => {
                Health::step(&self.health, answer.is_some_and(Answer::is_answered));
                #[cfg(feature = "metrics")]
                match answer {
                    Some(Answer::Batch(reply)) => crate::metrics::set::batch(kind, elapsed, reply),
                    _ => crate::metrics::set::batch_timed_out(kind),
                }
                let _ = outcome;
                if let (
                    picolease_core::BatchKind::Renew,
                    Some(Answer::Batch(BatchReply::Matched(renewed))),
                ) = (kind, answer)
                {
                    // Each lease renewed by the batch took the batch's
                    // time, as its lone lease's renew latency would read.
                    for lease in renewed {
                        if let Some(member) = self.members.get(lease.as_str()) {
                            member.publisher.record_renewal(elapsed);
                        }
                    }
                }
            }
        }
    }
}
