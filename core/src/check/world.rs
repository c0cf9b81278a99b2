//! The model the checker explores: the nodes (the real `LeaseState`s here,
//! or `LeaseSet`s in `set`) on tick clocks, the model database and the
//! connections between them (`channel`). What a step does is the step
//! relation (`relation`, shared, with each model's hooks in `lone` and
//! `set::relation`); what must hold after it, the invariants
//! (`invariants`).

use std::fmt::Write as _;

use super::bounds::{Bounds, TICK};
use super::channel::{Channel, Delivery, Request};
use super::contender::Contender;
use crate::error::ConfigError;
use crate::names::{Epoch, HolderId, LeaseName};
use crate::sim::{ModelDb, ModelReplica, DB_EPOCH_MS};
use crate::sql::{Dialect, Statements};
use crate::state::LeaseState;
use crate::time::Instant;

/// The lease every contender competes for in the lone-lease check.
pub(super) const LEASE: &str = "check";

/// What does not change during a check.
pub(crate) struct Setup {
    pub(super) bounds: Bounds,
    pub(super) statements: Statements,
    /// The leases: a set check's (`Bounds::leases`), or the lone lease
    /// ([`LEASE`]). The per-lease state of the world and its nodes is
    /// indexed by position here.
    pub(super) names: Vec<LeaseName>,
}

impl Setup {
    pub(crate) fn new(bounds: Bounds) -> Self {
        let names = if bounds.leases == 0 {
            LeaseName::new(LEASE).map(|n| vec![n])
        } else {
            super::set::lease_names(bounds.leases)
        };
        Setup {
            names: names.unwrap_or_default(),
            bounds,
            statements: Statements::new(Dialect::Sqlite, &crate::names::TableName::default()),
        }
    }

    pub(super) fn drift(&self) -> i32 {
        self.bounds.drift_ticks as i32
    }

    /// How many database ticks a head message may wait: the delivery bound,
    /// or for a late one the simulator's long tail, up to twice the request
    /// timeout more.
    pub(super) fn bound(&self, late: bool) -> u32 {
        let b = &self.bounds;
        if late {
            b.delivery_ticks + 2 * b.interval_ticks
        } else {
            b.delivery_ticks
        }
    }
}

/// One contender: its process (if alive), clock and connection.
#[derive(Clone, Debug)]
pub(super) struct Node {
    /// The machine; `None` once the process crashed.
    pub(super) lease: Option<LeaseState>,
    pub(super) holder: HolderId,
    pub(super) incarnation: u32,
    pub(super) paused: bool,
    /// Local clock in ticks.
    pub(super) clock: u64,
    /// Local ticks minus database ticks since the process started.
    pub(super) skew: i32,
    /// `skew` when the request in flight was sent.
    pub(super) anchor_flight: Option<i32>,
    /// `skew` when the request that set the current deadline was sent.
    pub(super) anchor_term: Option<i32>,
    pub(super) to_db: Channel<Request>,
    pub(super) to_node: Channel<Delivery>,
    /// Requests up to this id were abandoned: the database drops them.
    pub(super) abandoned_upto: u64,
    /// The gated work running, by epoch.
    pub(super) work: Option<Epoch>,
    /// A stray acquire of this very process bumped its own row: a term it
    /// leads meanwhile is covered by fencing (ARCHITECTURE, known residual
    /// risk), so validity only asks for its own unexpired row until the
    /// process's next acquire runs or renew is accepted.
    pub(super) fenced_out: bool,
}

impl Node {
    pub(super) fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.saturating_mul(TICK.as_nanos() as u64))
    }
}

/// The whole model at one point of a path, over nodes of either kind: the
/// lone lease's [`Node`] (the default) or a set's
/// [`SetNode`](super::set::SetNode) (`SetWorld`).
#[derive(Clone, Debug)]
pub(crate) struct World<N: Contender = Node> {
    pub(super) db: ModelDb,
    /// Database (real) time in ticks.
    pub(super) db_clock: u64,
    pub(super) nodes: Vec<N>,
    /// A statement that strayed on the server.
    pub(super) stray: Option<N::Request>,
    pub(super) faults: u32,
    /// Per lease: database ticks without a leader since the last fault,
    /// while a node was able to lead (liveness).
    pub(super) leaderless: Vec<u32>,
    /// Per lease: the epoch of its latest leadership.
    pub(super) last_epoch: Vec<Option<Epoch>>,
    /// No step taken yet (`db:orphan` is enabled). Left out of the
    /// fingerprint: a later state that looks the same is the initial one
    /// shifted in time, and the initial one is explored first.
    pub(super) fresh: bool,
    /// The standbys' copies of the rows (`Bounds::failovers` of them at
    /// first), in the order they are promoted; the first is the next.
    pub(super) standbys: Vec<ModelReplica>,
    /// With failovers: the highest epoch any server has written to the
    /// lone lease's row so far, lost writes included.
    pub(super) issued: i64,
    /// With failovers: the highest epoch written by the servers before the
    /// one now answering. Every epoch the current server writes must
    /// exceed it, or `(name, epoch)` names two terms (DESIGN §3
    /// "Failover": the epoch after an adoption).
    pub(super) issued_before: i64,
    /// Per node: the term it led when the database failed over. Its row
    /// may be gone, so validity and the stop lead's row are not asked of
    /// it (mutual exclusion and fencing still are).
    pub(super) outlived: Vec<Option<Epoch>>,
    /// The survey's staleness bound (`LeaseSet::stale_millis`, the same
    /// for every node of a set check; 0 for a lone lease, which has no
    /// survey).
    pub(super) stale_ms: i64,
    /// Node `n` has priority `n + 1` (`Bounds::ranked`): every handover a
    /// machine sends must go up.
    pub(super) ranked: bool,
}

impl<N: Contender> World<N> {
    /// Who leads which lease, and which nodes are down or paused, for a
    /// picture of a replay.
    pub(crate) fn standing(&self, setup: &Setup) -> super::replay::Standing {
        let mut standing = super::replay::Standing {
            db_tick: self.db_clock,
            ..Default::default()
        };
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.live() {
                standing.down.push(i);
            } else if node.paused() {
                standing.paused.push(i);
            }
            for (k, name) in setup.names.iter().enumerate() {
                if let Some(epoch) = node.leader_epoch(k) {
                    standing
                        .leaders
                        .push((i, name.as_str().to_string(), epoch.get()));
                }
            }
        }
        standing
    }

    /// The model at time zero over `nodes`, every lease free.
    pub(super) fn start(setup: &Setup, nodes: Vec<N>, stale_ms: i64) -> Self {
        #[allow(unused_mut)]
        let mut db = if setup.bounds.by_liveness {
            ModelDb::by_liveness()
        } else {
            ModelDb::new()
        };
        #[cfg(feature = "mutants")]
        db.set_mutation(setup.bounds.mutation);
        let leases = setup.names.len();
        let standbys = vec![db.replica(); usize::from(setup.bounds.failovers)];
        World {
            standbys,
            issued: 0,
            issued_before: 0,
            outlived: vec![None; nodes.len()],
            db,
            db_clock: 0,
            nodes,
            stray: None,
            faults: 0,
            leaderless: vec![0; leases],
            last_epoch: vec![None; leases],
            fresh: true,
            stale_ms,
            ranked: setup.bounds.ranked,
        }
    }
}

/// What a step did, as text lines, when the caller wants them (replay).
pub(crate) struct Log {
    pub(crate) enabled: bool,
    pub(crate) lines: Vec<String>,
}

impl Log {
    pub(crate) fn off() -> Self {
        Log {
            enabled: false,
            lines: Vec::new(),
        }
    }

    pub(super) fn note(&mut self, line: impl FnOnce() -> String) {
        if self.enabled {
            self.lines.push(line());
        }
    }
}

/// The holder of the orphan row (`Bounds::orphan`): no contender's.
pub(super) const ORPHAN: &str = "n9.0";

/// The node name twins share (`Bounds::twins`).
const TWIN: &str = "twin";

/// Node `node`'s holder id in its `incarnation`: `n0.1`, or for twins
/// [`HolderId::incarnation`] of their shared name with a nonce that tells
/// the processes apart (`twin#001001`).
pub(super) fn holder_id(
    setup: &Setup,
    node: usize,
    incarnation: u32,
) -> Result<HolderId, ConfigError> {
    if setup.bounds.twins && node < 2 {
        #[allow(unused_mut)]
        let mut nonce = ((node as u64) << 12) | u64::from(incarnation);
        #[cfg(feature = "mutants")]
        if setup.bounds.setup_mutation == super::bounds::SetupMutation::TwinsShareHolderId {
            nonce = u64::from(incarnation);
        }
        return HolderId::incarnation(TWIN, nonce);
    }
    HolderId::new(&format!("n{node}.{incarnation}"))
}

/// With [`super::Bounds::ranked`], the rank of the node behind holder id
/// `holder` (or a reservation for it): priority = node index + 1, so
/// every node announces itself (priority 0 would not).
pub(super) fn node_rank(holder: &str) -> crate::Rank {
    let holder = holder.strip_suffix('#').unwrap_or(holder);
    let node = parse_holder(holder).map_or(0, |(node, _)| node);
    crate::Rank::new(u32::try_from(node + 1).unwrap_or(0), None).unwrap_or_default()
}

/// With ranked nodes every handover is a yield: the **preference**
/// violation, if `holder` hands over to `to` without `to`'s node
/// outranking its own. Checked on every hand-over a lone lease's machine
/// or a set sends.
pub(super) fn preference_problem(
    holder: &HolderId,
    to: &HolderId,
) -> Option<(super::Property, String)> {
    let own = node_rank(holder.as_str());
    let theirs = node_rank(to.as_str());
    (!crate::rank::yields_to(&own, &theirs)).then(|| {
        (
            super::Property::Preference,
            format!(
                "{holder} (priority {}) handed over to {to} (priority {})",
                own.priority(),
                theirs.priority()
            ),
        )
    })
}

/// `(node, incarnation)` of a holder id the checker made.
pub(super) fn parse_holder(holder: &str) -> Option<(usize, u32)> {
    if let Some(nonce) = holder.strip_prefix(TWIN).and_then(|h| h.strip_prefix('#')) {
        let nonce = u32::from_str_radix(nonce, 16).ok()?;
        return Some(((nonce >> 12) as usize, nonce & 0xfff));
    }
    let (node, inc) = holder.strip_prefix('n')?.split_once('.')?;
    Some((node.parse().ok()?, inc.parse().ok()?))
}

impl World<Node> {
    /// Every node started at time zero, its timer due.
    pub(crate) fn new(setup: &Setup) -> Result<Self, ConfigError> {
        let mut nodes = Vec::with_capacity(setup.bounds.nodes);
        for n in 0..setup.bounds.nodes {
            let holder = holder_id(setup, n, 1)?;
            let lease = new_lease(setup, holder.clone(), Instant::ZERO)?;
            nodes.push(Node {
                lease: Some(lease),
                holder,
                incarnation: 1,
                paused: false,
                clock: 0,
                skew: 0,
                anchor_flight: None,
                anchor_term: None,
                to_db: Channel::new(),
                to_node: Channel::new(),
                abandoned_upto: 0,
                work: None,
                fenced_out: false,
            });
        }
        Ok(World::start(setup, nodes, 0))
    }

    /// One line on the state of every node and the row, for replays.
    pub(crate) fn describe(&self) -> String {
        let mut out = format!("db tick {}", self.db_clock);
        match self.db.row(LEASE) {
            Some(r) => {
                let _ = write!(
                    out,
                    ", row ({}, epoch {}, expires {})",
                    r.holder.as_deref().unwrap_or("free"),
                    r.epoch,
                    r.expires_at - DB_EPOCH_MS
                );
            }
            None => out.push_str(", no row"),
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let role = match &n.lease {
                None => "crashed".to_string(),
                Some(l) if l.is_finished() => "finished".to_string(),
                Some(l) => match l.leadership().leader_epoch() {
                    Some(e) => format!("leader@{e}"),
                    None => "follower".to_string(),
                },
            };
            let paused = if n.paused { " paused" } else { "" };
            let _ = write!(
                out,
                "; n{i} {role}{paused} clock {} skew {}",
                n.clock, n.skew
            );
            for (name, anchor) in [("flight", n.anchor_flight), ("term", n.anchor_term)] {
                if let Some(a) = anchor {
                    let _ = write!(out, " {name}@{a}");
                }
            }
        }
        out
    }
}

pub(super) fn new_lease(
    setup: &Setup,
    holder: HolderId,
    now: Instant,
) -> Result<LeaseState, ConfigError> {
    let mut config = setup.bounds.lease_config(holder)?;
    if setup.bounds.ranked {
        config.rank = node_rank(config.holder.as_str());
    }
    let mut lease = LeaseState::new(config, now)?;
    #[cfg(feature = "mutants")]
    lease.set_mutation(setup.bounds.mutation);
    if setup.bounds.health {
        // A probe that passes from the start: the node announces itself.
        lease.handle_health(now, true);
    }
    Ok(lease)
}
