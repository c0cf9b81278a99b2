//! Timing configuration and its validation (DESIGN §4).

use std::time::Duration;

use crate::error::ConfigError;
use crate::names::{HolderId, LeaseName};
use crate::rank::{Candidate, Rank};

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
    /// Stop lead `g` (DESIGN §4b): work that needs time to stop is stopped
    /// this long before the leader's deadline when renewals keep failing
    /// (`StopWork` at `deadline − g`); the node still leads, and publishes
    /// follower, only at the deadline itself, and a renewal that succeeds
    /// before then starts the work again (`StartWork` for the same epoch).
    /// Must be below [`Config::stop_lead_bound`] so that steady renewals
    /// never reach `deadline − g`. Zero (the default) stops the work at the
    /// deadline.
    pub stop_lead: Duration,
    /// This contender's rank among candidates (DESIGN §3 "Preferred
    /// holders"): a priority and a version tag. A follower with a rank
    /// above the lowest announces itself, and a leader hands its lease to
    /// a live candidate that outranks it ([`crate::rank::yields_to`]).
    /// The default, the lowest rank, announces nothing and costs nothing.
    pub rank: Rank,
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
        SetConfig::with_ttl(holder, ttl).for_lease(lease)
    }

    /// The holder id and timings of this configuration without its lease:
    /// the configuration of a lease set contended the same way.
    pub fn without_lease(&self) -> SetConfig {
        SetConfig {
            holder: self.holder.clone(),
            ttl: self.ttl,
            interval: self.interval,
            request_timeout: self.request_timeout,
            drift: self.drift,
            jitter: self.jitter,
            seed: self.seed,
            stop_lead: self.stop_lead,
            rank: self.rank.clone(),
            by_liveness: true,
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
        self.timings().validate()?;
        if !self.rank.is_lowest() && self.candidate().announcement().is_none() {
            return Err(ConfigError::BadName {
                kind: "holder id",
                value: self.holder.as_str().chars().take(80).collect(),
                problem: "with the version tag is too long to announce as a candidate (the rank key, id and tag must fit 255 bytes)",
            });
        }
        Ok(())
    }

    /// This contender as a candidate: its holder id and rank.
    pub fn candidate(&self) -> Candidate {
        Candidate {
            holder: self.holder.clone(),
            rank: self.rank.clone(),
        }
    }

    /// The stop lead must be strictly below this: the local validity
    /// (ttl·(1 − ρ) − the database clock's resolution) minus the interval
    /// minus the request timeout. A renewal sent on time and answered
    /// within its timeout then always lands before `deadline − g`, so in
    /// steady state the work is never stopped early. Zero when the timings
    /// leave no room (then only `stop_lead = 0` is valid).
    pub fn stop_lead_bound(&self) -> Duration {
        self.timings().stop_lead_bound()
    }

    /// How long after sending a successful acquire or renew the leader may
    /// still consider itself leader: ttl − drift − the database clock's
    /// resolution.
    pub fn local_validity(&self) -> Duration {
        self.timings().local_validity()
    }

    /// The ttl in whole milliseconds, as bound into the statements.
    pub fn ttl_millis(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// How long a planned handover reserves the row for its successor
    /// (DESIGN §3 "Planned handover"): two intervals (a successor that
    /// missed the notice polls within one), never more than the ttl. A
    /// successor that went away costs at most this, then anyone may
    /// take the row.
    pub fn reservation(&self) -> Duration {
        self.timings().reservation()
    }

    /// [`Config::reservation`] in whole milliseconds, as bound into the
    /// hand-over statement.
    pub fn reservation_millis(&self) -> i64 {
        i64::try_from(self.reservation().as_millis()).unwrap_or(i64::MAX)
    }

    fn timings(&self) -> Timings {
        Timings {
            ttl: self.ttl,
            interval: self.interval,
            request_timeout: self.request_timeout,
            drift: self.drift,
            jitter: self.jitter,
            stop_lead: self.stop_lead,
        }
    }
}

/// How one node contends for every lease of a lease set: a [`Config`]
/// without its lease, since the set names its leases itself.
///
/// Built like a [`Config`] ([`SetConfig::new`], [`SetConfig::with_ttl`],
/// [`SetConfig::interval`]; [`Config::without_lease`] from a lone lease's),
/// with the same public fields, checked by the same rules
/// ([`SetConfig::validate`], called by `LeaseSet::new`). Each lease of the
/// set runs with [`SetConfig::for_lease`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetConfig {
    /// This contender's id, unique per running instance.
    pub holder: HolderId,
    /// As [`Config::ttl`].
    pub ttl: Duration,
    /// As [`Config::interval`]; a set also surveys its table this often.
    pub interval: Duration,
    /// As [`Config::request_timeout`]: also the bound of every batch.
    pub request_timeout: Duration,
    /// As [`Config::drift`].
    pub drift: Duration,
    /// As [`Config::jitter`].
    pub jitter: Duration,
    /// As [`Config::seed`]; each lease's machine derives its own from it.
    pub seed: u64,
    /// As [`Config::stop_lead`].
    pub stop_lead: Duration,
    /// This node's rank among the set's members (DESIGN §9 "Preferred
    /// members"): the share is split among the live members of the best
    /// rank, and a node that a live member outranks hands its leases to
    /// those members. Carried by the membership row's name. The default,
    /// the lowest rank, is what every member has unless told otherwise.
    pub rank: Rank,
    /// The set renews by liveness (DESIGN §9 "Renewal by liveness"; on by
    /// default): each interval it writes its membership row only, and a
    /// lease row only when the lease changes hands; a taken row is linked
    /// to the membership row, whose expiry is the lease's. Off, it renews
    /// every held row each interval, as sets did before (the shape a fleet
    /// mid-upgrade shares safely with this one, and the one MySQL proper
    /// needs: its driver refuses this shape there, error 1093). The
    /// machine's side: its membership row is released last at shutdown,
    /// kept whatever its health, and a lease left untaken by a crashed
    /// linked holder is taken as an orphan.
    pub by_liveness: bool,
}

impl SetConfig {
    /// The default ttl of 10 s and the timings derived from it, as
    /// [`Config::new`].
    pub fn new(holder: HolderId) -> Self {
        Self::with_ttl(holder, Config::DEFAULT_TTL)
    }

    /// Like [`SetConfig::new`] with another ttl; the other timings follow
    /// it (interval = timeout = ttl/4, drift = ttl/100, jitter =
    /// interval/10, seed 0), renewing by liveness.
    pub fn with_ttl(holder: HolderId, ttl: Duration) -> Self {
        let interval = ttl / 4;
        SetConfig {
            holder,
            ttl,
            interval,
            request_timeout: interval,
            drift: ttl / 100,
            jitter: interval / 10,
            seed: 0,
            stop_lead: Duration::ZERO,
            rank: Rank::default(),
            by_liveness: true,
        }
    }

    /// Sets the interval, and with it the request timeout and the jitter,
    /// as [`Config::interval`].
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self.request_timeout = interval;
        self.jitter = interval / 10;
        self
    }

    /// Checks that the timings can work together, by the rules of
    /// [`Config::validate`], and that the membership row's name, which
    /// carries the rank, fits a name, with the health mark too.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.timings().validate()?;
        crate::set::unhealthy_row_name(&self.holder, &self.rank).map(drop)
    }

    /// The ttl in whole milliseconds, as bound into the batches.
    pub fn ttl_millis(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// How long a planned handover reserves a row ([`Config::reservation`]).
    pub fn reservation(&self) -> Duration {
        self.timings().reservation()
    }

    /// [`SetConfig::reservation`] in whole milliseconds.
    pub fn reservation_millis(&self) -> i64 {
        i64::try_from(self.reservation().as_millis()).unwrap_or(i64::MAX)
    }

    /// The configuration `lease` runs with in the set. Its rank is the
    /// lowest: a set's leases do not announce themselves one by one, the
    /// membership row carries the node's rank for all of them.
    pub fn for_lease(&self, lease: LeaseName) -> Config {
        Config {
            lease,
            holder: self.holder.clone(),
            ttl: self.ttl,
            interval: self.interval,
            request_timeout: self.request_timeout,
            drift: self.drift,
            jitter: self.jitter,
            seed: self.seed,
            stop_lead: self.stop_lead,
            rank: Rank::default(),
        }
    }

    fn timings(&self) -> Timings {
        Timings {
            ttl: self.ttl,
            interval: self.interval,
            request_timeout: self.request_timeout,
            drift: self.drift,
            jitter: self.jitter,
            stop_lead: self.stop_lead,
        }
    }
}

/// The durations both configurations validate the same way.
#[derive(Clone, Copy)]
struct Timings {
    ttl: Duration,
    interval: Duration,
    request_timeout: Duration,
    drift: Duration,
    jitter: Duration,
    stop_lead: Duration,
}

impl Timings {
    /// Two intervals, at most the ttl (see [`Config::reservation`]).
    fn reservation(&self) -> Duration {
        (self.interval * 2).min(self.ttl)
    }

    /// Checks that the timings can work together.
    fn validate(&self) -> Result<(), ConfigError> {
        let Timings {
            ttl,
            interval,
            request_timeout: timeout,
            drift,
            jitter,
            stop_lead,
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
        if !stop_lead.is_zero() {
            let bound = self.stop_lead_bound();
            if stop_lead >= bound {
                return Err(ConfigError::StopLeadTooLong { stop_lead, bound });
            }
        }
        Ok(())
    }

    fn stop_lead_bound(&self) -> Duration {
        self.local_validity()
            .saturating_sub(self.interval)
            .saturating_sub(self.request_timeout)
    }

    fn local_validity(&self) -> Duration {
        self.ttl
            .saturating_sub(self.drift)
            .saturating_sub(DB_CLOCK_RESOLUTION)
    }
}

/// Whether `lease` is in a namespace of picolease's own rows
/// ([`crate::sql::MEMBER_PREFIX`], [`crate::sql::HANDOVER_PREFIX`],
/// [`crate::sql::PREFERRED_PREFIX`]), or the table's marker row
/// ([`crate::sql::TABLE_MARKER`]): no contender may take such a name
/// (`ConfigError::ReservedLease`), or the rows picolease writes there
/// would overwrite it.
pub(crate) fn is_reserved(lease: &LeaseName) -> bool {
    lease.as_str() == crate::sql::TABLE_MARKER
        || [
            crate::sql::MEMBER_PREFIX,
            crate::sql::HANDOVER_PREFIX,
            crate::sql::PREFERRED_PREFIX,
        ]
        .iter()
        .any(|prefix| lease.as_str().starts_with(prefix))
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

    /// A set renews by liveness unless told otherwise (DESIGN §9 "Renewal
    /// by liveness"), whether built as a set or from a lone lease's
    /// configuration.
    #[test]
    fn a_set_renews_by_liveness_unless_told_otherwise() {
        let holder = HolderId::new("h").unwrap();
        assert!(SetConfig::new(holder.clone()).by_liveness);
        assert!(SetConfig::with_ttl(holder, Duration::from_secs(2)).by_liveness);
        assert!(config(2_000).without_lease().by_liveness);
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

    #[test]
    fn stop_lead_below_the_bound_is_accepted_and_at_it_refused() {
        let ms = Duration::from_millis;
        // ttl 1 s: validity 1000 − 10 − 1 = 989 ms, interval = timeout = 250 ms.
        let c = config(1000);
        assert_eq!(c.stop_lead, Duration::ZERO);
        assert_eq!(c.stop_lead_bound(), ms(489));
        let mut c = config(1000);
        c.stop_lead = ms(489) - Duration::from_nanos(1);
        assert_eq!(c.validate(), Ok(()));
        c.stop_lead = ms(489);
        assert_eq!(
            c.validate(),
            Err(ConfigError::StopLeadTooLong {
                stop_lead: ms(489),
                bound: ms(489)
            })
        );
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("stop lead 489ms") && err.contains("489ms"),
            "{err}"
        );
        // No room at all: only zero is valid.
        let mut c = config(1000);
        c.request_timeout = ms(900);
        assert_eq!(c.stop_lead_bound(), Duration::ZERO);
        assert_eq!(c.validate(), Ok(()));
        c.stop_lead = Duration::from_nanos(1);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::StopLeadTooLong { .. })
        ));
    }
}
