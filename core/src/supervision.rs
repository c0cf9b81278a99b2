//! Supervised work (DESIGN §5 "Work that fails"): what a node does when
//! the work it runs as leader fails. A pure policy, fed the failures'
//! times by the drivers' gates (and `run`'s CMD): restart after a
//! backoff, or, past the restart intensity, escalate, which the node's
//! machine turns into a handover and a cool-down
//! ([`crate::LeaseState::handle_work_escalated`]).
//!
//! The shape is Erlang/OTP's supervisor (a restart intensity: at most
//! `intensity` restarts within `period`, else the supervisor gives up)
//! and systemd's `Restart=on-failure` with `StartLimitBurst` and
//! `StartLimitIntervalSec`; what "giving up" means here is new: the lease
//! moves to a node that may do better.

use std::collections::VecDeque;
use std::time::Duration;

use crate::error::ConfigError;
use crate::Instant;

/// How a node supervises its work: restarts, their backoff, and when it
/// gives up.
///
/// The defaults: at most 3 restarts in 60 s, backed off 1 s, 2 s, 4 s …
/// up to 30 s, then a cool-down of 60 s. Three quick failures are not a
/// blip: the fourth failure within a minute moves the lease, about 3 s
/// (1 + 2 s of backoff) plus the work's own run times after the first.
/// A failure now and then (less than 4 a minute) only restarts. The
/// cool-down equals the period, so a node that gave up does not stand
/// as a candidate again before its failures would have aged out anyway.
/// For comparison (cited, not copied): OTP's supervisor defaults to 1
/// restart in 5 s, systemd to 5 starts in 10 s with 100 ms between; both
/// restart processes that start in milliseconds, where a lease's work
/// usually connects to something first, so picolease backs off longer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RestartPolicy {
    /// At most this many restarts within `period`; one more failure
    /// escalates. Zero escalates at the first failure.
    pub intensity: u32,
    /// The window the restarts are counted in.
    pub period: Duration,
    /// The wait before the first restart; each further restart within
    /// the period waits twice as long as the one before.
    pub backoff: Duration,
    /// The longest wait before a restart.
    pub max_backoff: Duration,
    /// How long a node that escalated stands aside: it counts as
    /// unhealthy ([`crate::LeaseState::is_healthy`]) for this long.
    pub cool_down: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            intensity: 3,
            period: Duration::from_secs(60),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            cool_down: Duration::from_secs(60),
        }
    }
}

impl RestartPolicy {
    /// At most `intensity` restarts within `period`, the other values
    /// the defaults'; refused when the period is zero.
    pub fn limit(intensity: u32, period: Duration) -> Result<Self, ConfigError> {
        let policy = RestartPolicy {
            intensity,
            period,
            ..RestartPolicy::default()
        };
        policy.validate()?;
        Ok(policy)
    }

    /// Refuses a policy that cannot work: a zero period (no failure would
    /// ever count), or a backoff longer than its own cap.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.period.is_zero() {
            return Err(ConfigError::BadRestartPolicy {
                field: "restart period",
                value: format!("{:?}", self.period),
                problem: "must be above zero",
            });
        }
        if self.backoff > self.max_backoff {
            return Err(ConfigError::BadRestartPolicy {
                field: "restart backoff",
                value: format!("{:?}", self.backoff),
                problem: "is longer than the longest backoff",
            });
        }
        Ok(())
    }

    /// The wait before the `n`th restart within the period (1-based).
    pub fn backoff_for(&self, n: u32) -> Duration {
        let doublings = n.saturating_sub(1).min(20);
        self.backoff
            .saturating_mul(1u32 << doublings)
            .min(self.max_backoff)
    }

    /// The longest time from a first failure to the escalation when the
    /// work fails at once on every start: the sum of the backoffs before
    /// the restarts the intensity allows. Add the work's own run times
    /// and, for the lease to move, two intervals (DESIGN §5).
    pub fn escalation_bound(&self) -> Duration {
        (1..=self.intensity).map(|n| self.backoff_for(n)).sum()
    }
}

/// What to do after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Start the work again at this time (if the term still runs).
    Restart {
        /// When.
        at: Instant,
        /// Restarts within the period so far, this one included.
        restarts: u32,
    },
    /// Too many failures: stop restarting and hand the lease over
    /// ([`crate::LeaseState::handle_work_escalated`]).
    Escalate,
}

/// Counts one lease's work failures on one node, across its terms.
#[derive(Clone, Debug, Default)]
pub struct Supervisor {
    policy: RestartPolicy,
    /// When the failures within the period happened, oldest first.
    failures: VecDeque<Instant>,
}

impl Supervisor {
    /// A supervisor with `policy` and no failures yet.
    pub fn new(policy: RestartPolicy) -> Self {
        Supervisor {
            policy,
            failures: VecDeque::new(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &RestartPolicy {
        &self.policy
    }

    /// The work failed at `now`: restart it when the verdict says, or
    /// escalate. After an escalation the count starts again from zero.
    pub fn work_failed(&mut self, now: Instant) -> Verdict {
        while self
            .failures
            .front()
            .is_some_and(|&at| now.saturating_duration_since(at) >= self.policy.period)
        {
            self.failures.pop_front();
        }
        self.failures.push_back(now);
        let restarts = u32::try_from(self.failures.len()).unwrap_or(u32::MAX);
        if restarts > self.policy.intensity {
            self.failures.clear();
            return Verdict::Escalate;
        }
        Verdict::Restart {
            at: now + self.policy.backoff_for(restarts),
            restarts,
        }
    }

    /// Restarts counted within the period (up to `now`).
    pub fn restarts(&self, now: Instant) -> u32 {
        let recent = self
            .failures
            .iter()
            .filter(|&&at| now.saturating_duration_since(at) < self.policy.period)
            .count();
        u32::try_from(recent).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn restarts_back_off_doubling_then_escalate_past_the_intensity() {
        let mut supervisor = Supervisor::new(RestartPolicy::default());
        assert_eq!(
            supervisor.work_failed(at(0)),
            Verdict::Restart {
                at: at(1_000),
                restarts: 1
            }
        );
        assert_eq!(
            supervisor.work_failed(at(1_000)),
            Verdict::Restart {
                at: at(3_000),
                restarts: 2
            }
        );
        assert_eq!(
            supervisor.work_failed(at(3_000)),
            Verdict::Restart {
                at: at(7_000),
                restarts: 3
            }
        );
        assert_eq!(supervisor.work_failed(at(7_000)), Verdict::Escalate);
        // Counting starts again after an escalation.
        assert_eq!(
            supervisor.work_failed(at(8_000)),
            Verdict::Restart {
                at: at(9_000),
                restarts: 1
            }
        );
    }

    #[test]
    fn failures_older_than_the_period_do_not_count() {
        let policy = RestartPolicy::limit(1, Duration::from_secs(10)).unwrap();
        let mut supervisor = Supervisor::new(policy);
        assert!(matches!(
            supervisor.work_failed(at(0)),
            Verdict::Restart { restarts: 1, .. }
        ));
        // 10 s later the first failure has aged out: a restart, not an
        // escalation.
        assert!(matches!(
            supervisor.work_failed(at(10_000)),
            Verdict::Restart { restarts: 1, .. }
        ));
        assert_eq!(supervisor.work_failed(at(10_001)), Verdict::Escalate);
    }

    #[test]
    fn intensity_zero_escalates_at_the_first_failure() {
        let policy = RestartPolicy::limit(0, Duration::from_secs(10)).unwrap();
        assert_eq!(
            Supervisor::new(policy).work_failed(at(5)),
            Verdict::Escalate
        );
    }

    #[test]
    fn the_backoff_is_capped_and_the_bound_sums_it() {
        let policy = RestartPolicy {
            intensity: 7,
            ..RestartPolicy::default()
        };
        assert_eq!(policy.backoff_for(1), Duration::from_secs(1));
        assert_eq!(policy.backoff_for(5), Duration::from_secs(16));
        assert_eq!(policy.backoff_for(6), Duration::from_secs(30));
        assert_eq!(
            RestartPolicy::default().escalation_bound(),
            Duration::from_secs(7)
        );
    }

    #[test]
    fn a_policy_that_cannot_work_is_refused_naming_the_value() {
        let error = RestartPolicy::limit(3, Duration::ZERO).unwrap_err();
        assert!(error.to_string().contains("restart period"), "{error}");
        let error = RestartPolicy {
            backoff: Duration::from_secs(40),
            ..RestartPolicy::default()
        }
        .validate()
        .unwrap_err();
        assert!(error.to_string().contains("40s"), "{error}");
    }
}
