//! Metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`, on by default): install any exporter's recorder
//! before starting a lease and its series appear there. Every sample
//! carries the label `lease` (the lease name).
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `picolease_leader` | gauge | | 1 while this contender leads, else 0 |
//! | `picolease_epoch` | gauge | | the epoch last held or observed |
//! | `picolease_transitions_total` | counter | `to` = `leader`\|`follower`, `reason` | terms begun (`reason="acquired"`) and ended (`lost`, `expired`, `released`, `error`, `clock`, `handover`, `unhealthy`, `escalated`) |
//! | `picolease_statement_duration_seconds` | histogram | `statement` = `acquire`\|`renew`\|`release`\|`hand_over`\|`announce` | from issuing a statement to its outcome (timeouts excluded) |
//! | `picolease_statement_failures_total` | counter | `statement`, `kind` = `transient`\|`fatal`\|`timeout` | failed statements |
//! | `picolease_lease_remaining_seconds` | gauge | | the leader's time to its deadline, as of the driver's last step; 0 on a follower |
//! | `picolease_handovers_total` | counter | `result` = `reserved`\|`refused`\|`failed` | planned hand-over statements (DESIGN §3 "Planned handover"): the row reserved for the successor; refused (the term had ended); failed or timed out |
//! | `picolease_work_failures_total` | counter | | gated work that failed (a panic or an `Err`; `run`'s CMD under `--restart on-failure`), DESIGN §5 "Work that fails" (`supervise.rs`) |
//! | `picolease_healthy` | gauge | | the health probe's verdict, 1 or 0 (set by `health_probe`'s probe, and by `run --health-cmd`) |
//! | `picolease_server_changes_total` | counter | `table` (no `lease`: one per connection, a lone lease's or a set's) | PostgreSQL: a reconnection reached another server incarnation than the last connection (a restart or a failover; DESIGN §3 "Failover"), counted by `postgres::server_change` |
//!
//! Every series is registered at zero when the lease starts (when its
//! handle is built), so a dashboard sees it before the first event. The
//! handles are taken from the recorder installed at that moment: install
//! the recorder first.
//!
//! Without the feature the drivers still call the same hooks, which then
//! only feed the [`crate::Snapshot`].

#[cfg(feature = "metrics")]
use std::time::Duration;

use picolease_core::Operation;

/// The three statements of the protocol, as the `statement` label names
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatementKind {
    Acquire,
    Renew,
    Release,
    HandOver,
    Announce,
}

impl StatementKind {
    #[cfg(feature = "metrics")]
    pub(crate) const ALL: [StatementKind; 5] = [
        StatementKind::Acquire,
        StatementKind::Renew,
        StatementKind::Release,
        StatementKind::HandOver,
        StatementKind::Announce,
    ];

    pub(crate) fn of(operation: Operation) -> Self {
        match operation {
            Operation::Acquire => StatementKind::Acquire,
            Operation::Renew { .. } => StatementKind::Renew,
            Operation::Release { .. } => StatementKind::Release,
            Operation::HandOver { .. } => StatementKind::HandOver,
            Operation::Announce => StatementKind::Announce,
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StatementKind::Acquire => "acquire",
            StatementKind::Renew => "renew",
            StatementKind::Release => "release",
            StatementKind::HandOver => "hand_over",
            StatementKind::Announce => "announce",
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn index(self) -> usize {
        self as usize
    }
}

/// How a statement ended, as a driver reports it to
/// `Publisher::record_statement`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The database answered (whatever the answer: taken, held, rejected).
    Answered,
    /// A failure worth retrying (lost connection, busy database).
    Transient,
    /// A failure that stops the driver.
    Fatal,
    /// Abandoned (or interrupted) at the request timeout.
    Timeout,
}

#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
impl Outcome {
    const FAILURES: [Outcome; 3] = [Outcome::Transient, Outcome::Fatal, Outcome::Timeout];

    fn failure_index(self) -> Option<usize> {
        match self {
            Outcome::Answered => None,
            Outcome::Transient => Some(0),
            Outcome::Fatal => Some(1),
            Outcome::Timeout => Some(2),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "ok",
            Outcome::Transient => "transient",
            Outcome::Fatal => "fatal",
            Outcome::Timeout => "timeout",
        }
    }
}

/// The demotion reasons, as `reason` labels of `to="follower"`.
#[cfg(feature = "metrics")]
const DEMOTIONS: [picolease_core::Demotion; 8] = [
    picolease_core::Demotion::Lost,
    picolease_core::Demotion::Expired,
    picolease_core::Demotion::Released,
    picolease_core::Demotion::Error,
    picolease_core::Demotion::Clock,
    picolease_core::Demotion::HandedOver,
    picolease_core::Demotion::Unhealthy,
    picolease_core::Demotion::Escalated,
];

/// One lease's metric handles, taken once from the recorder when a lone
/// lease's handle is built, every series registered at zero.
#[cfg(feature = "metrics")]
pub(crate) struct Metrics {
    leader: metrics::Gauge,
    epoch: metrics::Gauge,
    remaining: metrics::Gauge,
    to_leader: metrics::Counter,
    to_follower: [metrics::Counter; DEMOTIONS.len()],
    durations: [metrics::Histogram; 5],
    failures: [[metrics::Counter; 3]; 5],
    /// Planned handovers (DESIGN §3): `reserved` (the row went to the
    /// successor), `refused` (the database answered that the term was no
    /// longer ours: it had ended meanwhile) and `failed` (the statement
    /// failed or timed out; the row lapses by its ttl).
    handovers: [metrics::Counter; 3],
}

/// The `result` labels of `picolease_handovers_total`, in the order of
/// [`Metrics::handovers`].
#[cfg(feature = "metrics")]
const HAND_OVER_RESULTS: [&str; 3] = ["reserved", "refused", "failed"];

#[cfg(feature = "metrics")]
impl Metrics {
    /// Takes the handles and registers every series at zero.
    pub(crate) fn register(lease: &str) -> Self {
        use metrics::{counter, gauge, histogram};
        let lease = lease.to_string();
        let metrics = Metrics {
            leader: gauge!("picolease_leader", "lease" => lease.clone()),
            epoch: gauge!("picolease_epoch", "lease" => lease.clone()),
            remaining: gauge!("picolease_lease_remaining_seconds", "lease" => lease.clone()),
            to_leader: counter!(
                "picolease_transitions_total",
                "lease" => lease.clone(), "to" => "leader", "reason" => "acquired"
            ),
            to_follower: DEMOTIONS.map(|reason| {
                counter!(
                    "picolease_transitions_total",
                    "lease" => lease.clone(), "to" => "follower", "reason" => reason.as_str()
                )
            }),
            durations: StatementKind::ALL.map(|statement| {
                histogram!(
                    "picolease_statement_duration_seconds",
                    "lease" => lease.clone(), "statement" => statement.as_str()
                )
            }),
            failures: StatementKind::ALL.map(|statement| {
                Outcome::FAILURES.map(|kind| {
                    counter!(
                        "picolease_statement_failures_total",
                        "lease" => lease.clone(), "statement" => statement.as_str(), "kind" => kind.as_str()
                    )
                })
            }),
            handovers: HAND_OVER_RESULTS.map(|result| {
                counter!(
                    "picolease_handovers_total",
                    "lease" => lease.clone(), "result" => result
                )
            }),
        };
        metrics.leader.set(0.0);
        metrics.epoch.set(0.0);
        metrics.remaining.set(0.0);
        metrics.to_leader.increment(0);
        for counter in metrics
            .to_follower
            .iter()
            .chain(metrics.failures.iter().flatten())
            .chain(metrics.handovers.iter())
        {
            counter.increment(0);
        }
        metrics
    }

    /// One statement's outcome (a lone lease's; a set counts batches).
    pub(crate) fn statement(&self, statement: StatementKind, elapsed: Duration, outcome: Outcome) {
        if outcome != Outcome::Timeout {
            self.durations[statement.index()].record(elapsed.as_secs_f64());
        }
        if let Some(i) = outcome.failure_index() {
            self.failures[statement.index()][i].increment(1);
        }
    }
}

/// One lease's series, however they are held: a lone lease's handles,
/// registered at zero ([`Metrics`]), or a set member's, looked up at each
/// change (a set may have 100,000 leases, so its per-lease series appear
/// with a lease's first change and it keeps no handles). What a
/// leadership, a refresh or a hand-over counts is decided once, here, for
/// both.
#[cfg(feature = "metrics")]
pub(crate) enum LeaseSeries<'a> {
    /// A lone lease's.
    Registered(&'a Metrics),
    /// A set member's, by its lease name.
    OnChange(&'a picolease_core::LeaseName),
}

#[cfg(feature = "metrics")]
impl LeaseSeries<'_> {
    fn leader(&self) -> metrics::Gauge {
        match self {
            LeaseSeries::Registered(m) => m.leader.clone(),
            LeaseSeries::OnChange(lease) => {
                metrics::gauge!("picolease_leader", "lease" => lease.as_str().to_string())
            }
        }
    }

    fn epoch(&self) -> metrics::Gauge {
        match self {
            LeaseSeries::Registered(m) => m.epoch.clone(),
            LeaseSeries::OnChange(lease) => {
                metrics::gauge!("picolease_epoch", "lease" => lease.as_str().to_string())
            }
        }
    }

    fn to_leader(&self) -> metrics::Counter {
        match self {
            LeaseSeries::Registered(m) => m.to_leader.clone(),
            LeaseSeries::OnChange(lease) => metrics::counter!(
                "picolease_transitions_total",
                "lease" => lease.as_str().to_string(), "to" => "leader", "reason" => "acquired"
            ),
        }
    }

    fn to_follower(&self, reason: picolease_core::Demotion) -> metrics::Counter {
        match self {
            LeaseSeries::Registered(m) => {
                let i = DEMOTIONS.iter().position(|&r| r == reason).unwrap_or(0);
                m.to_follower[i].clone()
            }
            LeaseSeries::OnChange(lease) => metrics::counter!(
                "picolease_transitions_total",
                "lease" => lease.as_str().to_string(), "to" => "follower", "reason" => reason.as_str()
            ),
        }
    }

    fn handovers(&self, result: HandOverResult) -> metrics::Counter {
        match self {
            LeaseSeries::Registered(m) => m.handovers[result as usize].clone(),
            LeaseSeries::OnChange(lease) => metrics::counter!(
                "picolease_handovers_total",
                "lease" => lease.as_str().to_string(), "result" => HAND_OVER_RESULTS[result as usize]
            ),
        }
    }

    /// A published state: the gauges, and a transition if it is one
    /// (`became_leader`: a new term, not a repeated publication of one).
    pub(crate) fn leadership(&self, leadership: &picolease_core::Leadership, became_leader: bool) {
        self.leads(leadership.is_leader());
        if let Some(epoch) = leadership.epoch {
            // Epochs stay far below 2^53 in practice; the gauge is an f64.
            self.epoch().set(epoch.get() as f64);
        }
        if became_leader {
            self.to_leader().increment(1);
        }
        match (leadership.reason, &leadership.holder) {
            // The second publication of a handover: the row went to the
            // reservation it names (the transition was counted before).
            (Some(picolease_core::Demotion::HandedOver), Some(_)) => {
                self.handovers(HandOverResult::Reserved).increment(1);
            }
            (Some(reason), _) => self.to_follower(reason).increment(1),
            (None, _) => {}
        }
        if !leadership.is_leader() {
            self.time_left(None);
        }
    }

    /// Whether this node leads as of now (the leader gauge alone).
    pub(crate) fn leads(&self, leads: bool) {
        self.leader().set(if leads { 1.0 } else { 0.0 });
    }

    /// The leader's time left (zero on a follower): a lone lease's
    /// `picolease_lease_remaining_seconds`; a set has no such series.
    pub(crate) fn time_left(&self, left: Option<Duration>) {
        if let LeaseSeries::Registered(m) = self {
            m.remaining.set(left.map_or(0.0, |left| left.as_secs_f64()));
        }
    }

    /// A hand-over statement ended with `answer` (`None`: given up past
    /// the request timeout): refused (the term had ended) or failed (no
    /// answer, or a failure); `reserved` is counted when the handover is
    /// published.
    pub(crate) fn hand_over_answered(&self, answer: Option<&picolease_core::engine::Answer>) {
        use picolease_core::{engine::Answer, Reply};
        match answer {
            Some(Answer::Row(Reply::Rejected)) => {
                self.handovers(HandOverResult::Refused).increment(1)
            }
            Some(Answer::Row(Reply::Failed(_))) | None => {
                self.handovers(HandOverResult::Failed).increment(1)
            }
            Some(_) => {}
        }
    }
}

/// How a planned handover ended, as `picolease_handovers_total`'s
/// `result` label names it ([`HAND_OVER_RESULTS`]).
#[cfg(feature = "metrics")]
#[derive(Clone, Copy)]
pub(crate) enum HandOverResult {
    Reserved = 0,
    Refused = 1,
    Failed = 2,
}

/// The set's own series: see the module.
#[cfg(feature = "metrics")]
pub(crate) mod set;
