//! How far the checker looks: the cluster, the timings in ticks, the
//! number of faults and the depth.

use std::time::Duration;

use crate::config::Config;
use crate::error::ConfigError;
use crate::names::{HolderId, LeaseName};

/// One tick of every clock in the checker: one millisecond, the database
/// clock's resolution, so every timing of the protocol is a whole number of
/// ticks and no deadline falls between two ticks.
pub const TICK: Duration = Duration::from_millis(1);

/// The bounds of one exhaustive check. Timings are in ticks ([`TICK`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Contenders: 2 or 3.
    pub nodes: usize,
    /// The longest path explored, in steps.
    pub depth: usize,
    /// Faults per path (loss, late delivery, stray statement, pause, crash,
    /// restart, shutdown each count one).
    pub faults: usize,
    /// The lease ttl. At least 10 (`Config` refuses a ttl under 10 ms).
    pub ttl_ticks: u32,
    /// Renew and poll interval, also the request timeout; under ttl/2.
    pub interval_ticks: u32,
    /// ρ·ttl: how far a node's clock may drift from the database's over the
    /// windows the deadline relies on; `Config::drift` is set to match.
    pub drift_ticks: u32,
    /// A message at the head of its connection is delivered within this
    /// many database ticks unless a fault (`late`) delays it.
    pub delivery_ticks: u32,
    /// Liveness: with a node able to lead, a leaderless stretch longer than
    /// this many database ticks since the last fault is a violation.
    /// `None` checks safety only.
    pub liveness_ticks: Option<u32>,
    /// Whether an accepted release notifies the other contenders
    /// (PostgreSQL LISTEN/NOTIFY).
    pub notify: bool,
    /// A planted bug (feature `mutants`).
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub mutation: crate::state::Mutation,
}

/// The longest depth accepted: beyond it a path's trace is unreadable and
/// the search would not finish anyway.
pub const MAX_DEPTH: usize = 1_000;

/// Bounds that cannot be checked, naming the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BoundsError {
    /// Only 2 or 3 nodes.
    #[error("nodes {0}: the checker explores 2 or 3 nodes")]
    Nodes(usize),
    /// Depth 0 or above [`MAX_DEPTH`].
    #[error("depth {0}: must be 1 to {MAX_DEPTH}")]
    Depth(usize),
    /// More than 8 faults.
    #[error("faults {0}: at most 8 per path")]
    Faults(usize),
    /// ttl under 10 or over 100 ticks.
    #[error("ttl {0} ticks: must be 10 to 100 (1 tick = 1 ms; Config refuses under 10 ms)")]
    Ttl(u32),
    /// interval 0 or not under ttl/2.
    #[error("interval {interval} ticks: must be 1 to under ttl/2 ({ttl}/2)")]
    Interval {
        /// The interval.
        interval: u32,
        /// The ttl.
        ttl: u32,
    },
    /// drift 0 (the checker must exercise drift) or not under ttl/2.
    #[error("drift {drift} ticks: must be 1 to under ttl/2 ({ttl}/2)")]
    Drift {
        /// The drift.
        drift: u32,
        /// The ttl.
        ttl: u32,
    },
    /// delivery 0 or not under the interval (the request timeout).
    #[error("delivery {delivery} ticks: must be 1 to under the interval {interval}")]
    Delivery {
        /// The delivery bound.
        delivery: u32,
        /// The interval.
        interval: u32,
    },
    /// A liveness bound of 0 or over 250.
    #[error("liveness {0} ticks: must be 1 to 250")]
    Liveness(u32),
}

impl Bounds {
    /// The defaults for `nodes` contenders: ttl 10, interval 4, drift 1,
    /// delivery 1, liveness ttl + 2·interval, notify on, 1 fault. Depth 200
    /// for 2 nodes (deeper than the reachable space, so the search ends by
    /// exhausting it: about 2 million states); 60 for 3 (the whole 3-node
    /// space is beyond 30 million states; 60 steps, about 11 million states,
    /// keep the check within 10 minutes).
    pub fn default_for(nodes: usize) -> Self {
        let (faults, depth) = if nodes <= 2 { (1, 200) } else { (1, 60) };
        Bounds {
            nodes,
            depth,
            faults,
            ttl_ticks: 10,
            interval_ticks: 4,
            drift_ticks: 1,
            delivery_ticks: 1,
            liveness_ticks: Some(18),
            notify: true,
            #[cfg(feature = "mutants")]
            mutation: crate::state::Mutation::None,
        }
    }

    /// Checks that the bounds describe a cluster the checker can explore.
    pub fn validate(&self) -> Result<(), BoundsError> {
        let Bounds {
            nodes,
            depth,
            faults,
            ttl_ticks: ttl,
            interval_ticks: interval,
            drift_ticks: drift,
            delivery_ticks: delivery,
            liveness_ticks,
            ..
        } = *self;
        if !(2..=3).contains(&nodes) {
            return Err(BoundsError::Nodes(nodes));
        }
        if depth == 0 || depth > MAX_DEPTH {
            return Err(BoundsError::Depth(depth));
        }
        if faults > 8 {
            return Err(BoundsError::Faults(faults));
        }
        if !(10..=100).contains(&ttl) {
            return Err(BoundsError::Ttl(ttl));
        }
        if interval == 0 || 2 * interval >= ttl {
            return Err(BoundsError::Interval { interval, ttl });
        }
        if drift == 0 || 2 * drift >= ttl {
            return Err(BoundsError::Drift { drift, ttl });
        }
        if delivery == 0 || delivery >= interval {
            return Err(BoundsError::Delivery { delivery, interval });
        }
        if let Some(l) = liveness_ticks {
            if l == 0 || l > 250 {
                return Err(BoundsError::Liveness(l));
            }
        }
        Ok(())
    }

    /// The configuration each contender runs with: the ticks as
    /// milliseconds, timeout = interval, drift as given, jitter 0 (the
    /// checker alone chooses the schedule).
    pub fn lease_config(&self, holder: HolderId) -> Result<Config, ConfigError> {
        let ms = |t: u32| TICK * t;
        let lease = LeaseName::new("check")?;
        let mut config =
            Config::with_ttl(lease, holder, ms(self.ttl_ticks)).interval(ms(self.interval_ticks));
        config.drift = ms(self.drift_ticks);
        config.jitter = Duration::ZERO;
        config.seed = 0;
        config.validate()?;
        Ok(config)
    }
}
