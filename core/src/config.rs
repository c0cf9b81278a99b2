//! Timing configuration and its validation (DESIGN §4).

use std::time::Duration;

use crate::error::ConfigError;
use crate::names::{HolderId, LeaseName};

/// The database clock counts milliseconds: an expiry written as `now + ttl`
/// may land up to this much before the instant the request was sent. The
/// leader's local deadline subtracts it so truncation never makes a lease
/// look longer than it is.
pub const DB_CLOCK_RESOLUTION: Duration = Duration::from_millis(1);

/// How one contender competes for one lease.
///
/// Built with [`Config::new`], which derives every timing from the ttl the
/// way DESIGN §4 prescribes; fields are public so each can be overridden,
/// and [`Config::validate`] (called by `LeaseState::new`) rejects a
/// combination that cannot work, naming the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The lease competed for.
    pub lease: LeaseName,
    /// This contender's id, unique per running instance.
    pub holder: HolderId,
    /// How long an acquisition or renewal holds the lease on the database.
    pub ttl: Duration,
    /// How often a leader renews (from the send of the previous renew) and a
    /// follower polls.
    pub interval: Duration,
    /// How long a statement may take before it is abandoned.
    pub request_timeout: Duration,
    /// Clock-drift allowance ρ·ttl: the leader demotes itself this long
    /// before the database could expire its lease, so a local clock that
    /// runs slow by up to ρ never outlives the lease.
    pub drift: Duration,
    /// A follower polls after `interval − U(0, jitter)`, spreading the
    /// contenders so they do not hit the row in lockstep.
    pub jitter: Duration,
    /// Seed of the jitter's generator: same seed, same schedule.
    pub seed: u64,
}

impl Config {
    /// The default ttl of DESIGN §4.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

    /// A configuration with the default ttl of 10 s and the timings derived
    /// from it: interval = timeout = ttl/4, drift = ttl/100,
    /// jitter = interval/10, seed 0.
    pub fn new(lease: LeaseName, holder: HolderId) -> Self {
        Self::with_ttl(lease, holder, Self::DEFAULT_TTL)
    }

    /// Like [`Config::new`] with another ttl; the other timings follow it.
    pub fn with_ttl(lease: LeaseName, holder: HolderId, ttl: Duration) -> Self {
        let interval = ttl / 4;
        Config {
            lease,
            holder,
            ttl,
            interval,
            request_timeout: interval,
            drift: ttl / 100,
            jitter: interval / 10,
            seed: 0,
        }
    }

    /// Sets the interval, and with it the request timeout and the jitter
    /// (which default to the interval and a tenth of it).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self.request_timeout = interval;
        self.jitter = interval / 10;
        self
    }

    /// Checks that the timings can work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let Config {
            ttl,
            interval,
            request_timeout: timeout,
            drift,
            jitter,
            ..
        } = *self;
        if ttl < Duration::from_millis(10) {
            return Err(ConfigError::TtlTooShort { ttl });
        }
        if ttl > Duration::from_secs(24 * 3600) {
            return Err(ConfigError::TtlTooLong { ttl });
        }
        if interval.is_zero() {
            return Err(ConfigError::ZeroInterval { interval });
        }
        if interval >= ttl / 2 {
            return Err(ConfigError::IntervalTooLong { interval, ttl });
        }
        if timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout { timeout });
        }
        if timeout >= ttl {
            return Err(ConfigError::TimeoutTooLong { timeout, ttl });
        }
        if drift >= ttl / 2 {
            return Err(ConfigError::DriftTooLarge { drift, ttl });
        }
        if jitter > interval / 2 {
            return Err(ConfigError::JitterTooLarge { jitter, interval });
        }
        Ok(())
    }

    /// How long after sending a successful acquire or renew the leader may
    /// still consider itself leader: ttl − drift − the database clock's
    /// resolution.
    pub fn local_validity(&self) -> Duration {
        self.ttl
            .saturating_sub(self.drift)
            .saturating_sub(DB_CLOCK_RESOLUTION)
    }

    /// The ttl in whole milliseconds, as bound into the statements.
    pub fn ttl_millis(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(ttl_ms: u64) -> Config {
        Config::with_ttl(
            LeaseName::new("l").unwrap(),
            HolderId::new("h").unwrap(),
            Duration::from_millis(ttl_ms),
        )
    }

    #[test]
    fn defaults_follow_design_section_4() {
        let c = Config::new(LeaseName::new("l").unwrap(), HolderId::new("h").unwrap());
        assert_eq!(c.ttl, Duration::from_secs(10));
        assert_eq!(c.interval, Duration::from_millis(2500));
        assert_eq!(c.request_timeout, Duration::from_millis(2500));
        assert_eq!(c.drift, Duration::from_millis(100));
        assert_eq!(c.local_validity(), Duration::from_millis(9899));
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn boundaries_that_can_work_are_accepted() {
        let ms = Duration::from_millis;
        assert_eq!(config(10).validate(), Ok(()));
        assert_eq!(config(24 * 3600 * 1000).validate(), Ok(()));
        let mut c = config(24 * 3600 * 1000);
        c.ttl += Duration::from_nanos(1);
        assert!(matches!(c.validate(), Err(ConfigError::TtlTooLong { .. })));
        let mut c = config(1000);
        c.jitter = c.interval / 2;
        assert_eq!(c.validate(), Ok(()));
        let c = config(1000).interval(ms(400));
        assert_eq!(
            (c.interval, c.request_timeout, c.jitter),
            (ms(400), ms(400), ms(40))
        );
        assert_eq!(c.ttl_millis(), 1000);
    }

    #[test]
    fn each_impossible_timing_is_named() {
        let ms = Duration::from_millis;
        assert_eq!(
            config(0).validate(),
            Err(ConfigError::TtlTooShort { ttl: ms(0) })
        );
        let mut c = config(1000);
        c.interval = ms(500);
        assert_eq!(
            c.validate(),
            Err(ConfigError::IntervalTooLong {
                interval: ms(500),
                ttl: ms(1000)
            })
        );
        let mut c = config(1000);
        c.request_timeout = ms(1000);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::TimeoutTooLong { .. })
        ));
        let mut c = config(1000);
        c.interval = Duration::ZERO;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::ZeroInterval { .. })
        ));
        let mut c = config(1000);
        c.drift = ms(500);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::DriftTooLarge { .. })
        ));
        let mut c = config(1000);
        c.jitter = ms(200);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::JitterTooLarge { .. })
        ));
        let err = config(0).validate().unwrap_err().to_string();
        assert!(err.contains("ttl 0ns"), "{err}");
    }
}
