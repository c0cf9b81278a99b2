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
    /// 0: each contender is a lone [`LeaseState`](crate::LeaseState)
    /// competing for one lease. 1 to 3: each is a
    /// [`LeaseSet`](crate::LeaseSet) over this many leases (`s0`, `s1`, …;
    /// see [`Bounds::for_set`]).
    pub leases: usize,
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
    /// Whether a path may begin with the row held by a process that died
    /// just before (a departed leader, under an id no contender has), due
    /// to lapse an interval later: the contenders then race for a lapsed row,
    /// each on its own poll schedule (the step `db:orphan`).
    pub orphan: bool,
    /// Every contender's stop lead `g` ([`Config::stop_lead`]), in ticks:
    /// 0, or under [`Config::stop_lead_bound`] (ttl − drift − 1 − 2·interval).
    pub stop_lead_ticks: u32,
    /// Whether nodes 0 and 1 are twins: two processes given the same node
    /// name, told apart only by their incarnation
    /// ([`HolderId::incarnation`]).
    pub twins: bool,
    /// How many times the database may fail over (0 to 2; the step
    /// `db:failover`, a fault), each time to the next of as many standbys.
    /// The standbys copy the server now answering only at `db:replicate`
    /// steps, so a promotion loses the writes since the last copy, and the
    /// new server runs under a new incarnation (DESIGN §3 "Failover"). With
    /// 2, the second standby may lack what the first wrote after its
    /// promotion: two lossy failovers in a row. Lone lease only.
    pub failovers: u8,
    /// Whether a leader may hand its lease over to the next node (the step
    /// `nN:handover`, a fault; DESIGN §3 "Planned handover"). Lone lease
    /// only.
    pub handover: bool,
    /// Whether node `n` runs with priority `n + 1` (DESIGN §3 "Preferred
    /// holders"): every follower announces itself, and a
    /// leader yields to a better live candidate by its own handover. Every
    /// such handover must go to a node of higher rank ([`Property::Preference`]).
    /// In a set (leases > 0) the membership rows carry the ranks, and
    /// a node a live member outranks hands its leases to it (DESIGN §9
    /// "Preferred members"). Apart from [`Bounds::handover`] (so every
    /// handover is a yield).
    ///
    /// [`Property::Preference`]: super::Property::Preference
    pub ranked: bool,
    /// Whether every node has a health probe (DESIGN §5 "Work that
    /// fails"), healthy at its start, so it announces itself while a
    /// follower; the step `nN:unhealthy` (a fault) makes it fail for
    /// good. Checked: every property, and [`Property::Health`]. Lone lease
    /// only.
    ///
    /// [`Property::Health`]: super::Property::Health
    pub health: bool,
    /// Lease sets renew by liveness (DESIGN §9 "Renewal by liveness", issue 45): the model
    /// database's set statements link the rows a node takes to its
    /// membership row and confirm them by reading
    /// ([`ModelDb::by_liveness`](crate::sim::ModelDb::by_liveness)). Sets
    /// only; the drivers' statements do not do it yet.
    pub by_liveness: bool,
    /// A planted bug (feature `mutants`).
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub mutation: crate::state::Mutation,
    /// A planted bug in how the checker sets the machines up (feature
    /// `mutants`).
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub setup_mutation: SetupMutation,
}

/// A bug planted in the machines' setup rather than in `LeaseState`
/// (feature `mutants`, for the checker's own tests).
#[cfg(feature = "mutants")]
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SetupMutation {
    /// Set up as configured.
    #[default]
    None,
    /// The machines run without their stop lead (as with `g = 0`) while
    /// the properties still ask for it.
    StopLeadIgnored,
    /// Twins get one holder id: the incarnation ignores the process.
    TwinsShareHolderId,
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
    /// More than 3 leases in a set.
    #[error("leases {0}: a set check explores 1 to 3 leases (0: a lone lease)")]
    Leases(usize),
    /// A database failover asked of a set check.
    #[error("failover: the checker fails the database over under a lone lease only (leases 0)")]
    FailoverOfSet,
    /// More failovers than standbys the checker models.
    #[error("failovers {0}: the checker fails the database over at most 2 times")]
    Failovers(u8),
    /// Ranks asked with planned handovers.
    #[error(
        "ranked: the checker ranks the nodes without --handover only (every handover is a yield)"
    )]
    Ranked,
    /// Health probes asked of a set check or with ranks.
    #[error("health: the checker probes the health of a lone lease's unranked nodes only (leases 0, no --ranked)")]
    Health,
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
    /// A stop lead the core refuses with these timings.
    #[error("stop lead {stop_lead} ticks: must be 0 or under ttl − drift − 1 − 2·interval ({bound} ticks here)")]
    StopLead {
        /// The stop lead.
        stop_lead: u32,
        /// Its bound.
        bound: u32,
    },
}

impl Bounds {
    /// The defaults for `nodes` contenders: ttl 10, interval 4, drift 1,
    /// delivery 1, liveness ttl + 2·interval, notify on, nodes 0 and 1
    /// twins, no stop lead (these timings leave no room for one: see
    /// [`Bounds::with_stop_lead`]), 1 fault.
    ///
    /// 2 nodes: depth 200, deeper than the reachable space, so the search
    /// ends by exhausting it (about 6 million states), and a path may begin
    /// with an orphan row (`orphan`), which is what lets one fault expose a
    /// database that renews without the epoch condition. 3 nodes: depth 60
    /// and no orphan row (the whole 3-node space is beyond 30 million
    /// states; 60 steps, about 9 million, keep the check within 10
    /// minutes).
    pub fn default_for(nodes: usize) -> Self {
        let (faults, depth) = if nodes <= 2 { (1, 200) } else { (1, 60) };
        Bounds {
            nodes,
            leases: 0,
            depth,
            faults,
            ttl_ticks: 10,
            interval_ticks: 4,
            drift_ticks: 1,
            delivery_ticks: 1,
            liveness_ticks: Some(18),
            notify: true,
            orphan: nodes <= 2,
            stop_lead_ticks: 0,
            twins: true,
            failovers: 0,
            handover: false,
            ranked: false,
            health: false,
            by_liveness: false,
            #[cfg(feature = "mutants")]
            mutation: crate::state::Mutation::None,
            #[cfg(feature = "mutants")]
            setup_mutation: SetupMutation::None,
        }
    }

    /// The defaults with a stop lead `g` = 1 tick: ttl 12, interval 4 (so
    /// the bound ttl − drift − 1 − 2·interval is 2 ticks), liveness
    /// ttl + 2·interval, no orphan row, the rest as [`Bounds::default_for`].
    /// (A shorter interval would make the request timeout no longer than a
    /// round trip plus the drift: a node could then time out every
    /// acquire it wins, and liveness rightly fails.)
    pub fn with_stop_lead(nodes: usize) -> Self {
        Bounds {
            ttl_ticks: 12,
            interval_ticks: 4,
            stop_lead_ticks: 1,
            liveness_ticks: Some(20),
            orphan: false,
            ..Bounds::default_for(nodes)
        }
    }

    /// The defaults with a database that may fail over once
    /// ([`Bounds::failovers`]), no twins (2 nodes: about 6 times the states
    /// of the default space without them), and liveness 3 ticks longer:
    /// ttl + 2·interval + 2·delivery + drift. The leader learns of the new
    /// server at its next renewal, the first acquire there starts the
    /// grace period (a ttl), and a follower takes the lease a round trip
    /// after it ends: within ttl + 2·interval at the protocol's real
    /// timings (milliseconds of delivery against seconds of interval), a
    /// few ticks more at the checker's coarse ones.
    pub fn with_failover(nodes: usize) -> Self {
        Self::with_failovers(nodes, 1)
    }

    /// [`Bounds::with_failover`] with `failovers` failovers (1 or 2): with
    /// 2, a chain of two lossy failovers over three servers, and at least
    /// as many faults per path, since each failover is one.
    pub fn with_failovers(nodes: usize, failovers: u8) -> Self {
        let b = Bounds::default_for(nodes);
        Bounds {
            failovers,
            faults: b.faults.max(usize::from(failovers)),
            twins: false,
            liveness_ticks: Some(
                b.ttl_ticks + 2 * b.interval_ticks + 2 * b.delivery_ticks + b.drift_ticks,
            ),
            ..b
        }
    }

    /// The defaults with planned handovers ([`Bounds::handover`]): a leader
    /// may hand its lease over to the next node, a fault step (over a set,
    /// [`Bounds::for_set`] with `handover`, the first lease). The
    /// liveness bound holds as it is: a reservation (two intervals) plus
    /// an interval is within ttl + 2·interval.
    pub fn with_handover(nodes: usize) -> Self {
        Bounds {
            handover: true,
            ..Bounds::default_for(nodes)
        }
    }

    /// The defaults with health probes ([`Bounds::health`]). The liveness
    /// bound grows by the unhealthy follower's wait: with every node
    /// unhealthy, a crashed leader's lease is taken a reservation (two
    /// intervals) after its expiry, so ttl + 4 intervals + 2 deliveries.
    pub fn with_health(nodes: usize) -> Self {
        let bounds = Bounds::default_for(nodes);
        Bounds {
            health: true,
            // Twins share a node, and a leader never yields to its own.
            twins: false,
            liveness_ticks: Some(
                bounds.ttl_ticks + 4 * bounds.interval_ticks + 2 * bounds.delivery_ticks,
            ),
            ..bounds
        }
    }

    /// The defaults with ranked nodes ([`Bounds::ranked`]) and no twins:
    /// node `n` has priority `n + 1`, so the lease climbs to the best live
    /// node by yields.
    /// The liveness bound holds as it is: a yield costs at most a
    /// reservation (two intervals) plus an interval.
    pub fn with_ranks(nodes: usize) -> Self {
        Bounds {
            ranked: true,
            // Twins share a node, and a leader never yields to its own.
            twins: false,
            ..Bounds::default_for(nodes)
        }
    }

    /// How long a planned handover reserves the row, in ticks: two
    /// intervals, at most the ttl (`Config::reservation`).
    pub fn reservation_ticks(&self) -> u32 {
        (2 * self.interval_ticks).min(self.ttl_ticks)
    }

    /// The bounds of a set check: `nodes` contenders, each a
    /// [`LeaseSet`](crate::LeaseSet) over `leases` leases: ttl 10,
    /// interval 3 (a survey and a renewal every 3 ticks, so a node plans
    /// its share a few steps sooner than at 4), drift 1, delivery 1,
    /// notify on, no twins and no orphan rows, liveness per lease at
    /// ttl + 2·interval (16 ticks, as for a lone lease: every lease led
    /// within it of the start or the last fault, while a node is able to
    /// lead), depth 30 and no fault.
    ///
    /// The whole space is out of reach (2 nodes × 2 leases grow about 1.4×
    /// per level past depth 25; about 80 bytes a state are kept, the
    /// states to explore rebuilt from their paths):
    /// depth 30 is 2,640,968 states, about a minute; 2 nodes × 1 lease grow as
    /// fast. By depth 30 a path reaches 6 or 7 database ticks, so the
    /// liveness bound is not reached by the search (see `check`'s docs).
    pub fn for_set(nodes: usize, leases: usize) -> Self {
        Bounds {
            leases,
            depth: 30,
            faults: 0,
            interval_ticks: 3,
            liveness_ticks: Some(10 + 2 * 3),
            orphan: false,
            twins: false,
            ..Bounds::default_for(nodes)
        }
    }

    /// Checks that the bounds describe a cluster the checker can explore.
    pub fn validate(&self) -> Result<(), BoundsError> {
        let Bounds {
            nodes,
            leases,
            depth,
            faults,
            ttl_ticks: ttl,
            interval_ticks: interval,
            drift_ticks: drift,
            delivery_ticks: delivery,
            liveness_ticks,
            stop_lead_ticks: stop_lead,
            ..
        } = *self;
        if !(2..=3).contains(&nodes) {
            return Err(BoundsError::Nodes(nodes));
        }
        if leases > 3 {
            return Err(BoundsError::Leases(leases));
        }
        if self.failovers > 2 {
            return Err(BoundsError::Failovers(self.failovers));
        }
        if self.failovers > 0 && leases > 0 {
            return Err(BoundsError::FailoverOfSet);
        }
        if self.ranked && self.handover {
            return Err(BoundsError::Ranked);
        }
        if self.health && (leases > 0 || self.ranked) {
            return Err(BoundsError::Health);
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
        let bound = ttl.saturating_sub(drift + 1 + 2 * interval);
        if stop_lead > 0 && stop_lead >= bound {
            return Err(BoundsError::StopLead { stop_lead, bound });
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
        config.stop_lead = ms(self.stop_lead_ticks);
        #[cfg(feature = "mutants")]
        if self.setup_mutation == SetupMutation::StopLeadIgnored {
            config.stop_lead = Duration::ZERO;
        }
        config.validate()?;
        Ok(config)
    }
}
