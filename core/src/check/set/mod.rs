//! The model check over a lease set (`Bounds::leases` > 0): each node runs
//! the real [`LeaseSet`] over the same leases (`s0`, `s1`, …), against the
//! model database through the batch statements and the real decoders
//! (`sim::set::run_batch`, the set simulator's glue), on the clocks,
//! connections and faults of the lone-lease model (`super::world`).
//!
//! The driver it models carries every command out at once: a batch goes on
//! the node's connection, a cancel drops the batch at the database unless
//! it strayed, work starts and stops on the spot, and a stopped work is
//! confirmed (`handle_work_stopped`) right after the commands that stopped
//! it. A release's notifications (PostgreSQL) reach each other live node as
//! one message, the names it freed (`handle_release_notices`).

mod canon;
mod relation;

pub(crate) use canon::SetFingerprinter;

use std::fmt::Write as _;

use super::bounds::TICK;
use super::channel::Channel;
use super::contender::Contender;
use super::world::{holder_id, Setup, World};
use crate::error::ConfigError;
use crate::names::{Epoch, HolderId, LeaseName};
use crate::protocol::RequestId;
use crate::set::{Batch, BatchReply, LeaseSet};
use crate::sim::DB_EPOCH_MS;
use crate::time::Instant;

/// A batch on its way to the database.
#[derive(Clone, Debug)]
pub(super) struct SetRequest {
    pub(super) node: usize,
    pub(super) incarnation: u32,
    pub(super) holder: HolderId,
    pub(super) id: RequestId,
    pub(super) batch: Batch,
    /// A hand-over's reservation (`LeaseSet::hand_over_in_flight`).
    pub(super) successor: Option<HolderId>,
}

/// A message on its way to a node.
#[derive(Clone, Debug)]
pub(super) enum SetDelivery {
    Reply(RequestId, BatchReply),
    /// The names one release batch freed (PostgreSQL notifications).
    Notice(Vec<LeaseName>),
}

/// The drift anchors of one lease's machine (see `check`'s model): the
/// skew when its statement in flight was issued, keyed by the request, and
/// the skew when the statement whose success set its deadline was issued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Anchors {
    pub(super) flight: Option<(RequestId, Instant, i32)>,
    pub(super) term: Option<i32>,
}

/// One node: its process (if alive), clock and connection.
#[derive(Clone, Debug)]
pub(super) struct SetNode {
    /// The set; `None` once the process crashed.
    pub(super) set: Option<LeaseSet>,
    pub(super) holder: HolderId,
    pub(super) incarnation: u32,
    pub(super) paused: bool,
    /// Local clock in ticks.
    pub(super) clock: u64,
    /// Local ticks minus database ticks since the process started.
    pub(super) skew: i32,
    /// Per lease.
    pub(super) anchors: Vec<Anchors>,
    pub(super) to_db: Channel<SetRequest>,
    pub(super) to_node: Channel<SetDelivery>,
    /// Batches up to this id were abandoned: the database drops them.
    pub(super) abandoned_upto: u64,
    /// Per lease: the gated work running, by epoch.
    pub(super) work: Vec<Option<Epoch>>,
    /// Per lease: a stray acquire of this very process bumped its own row
    /// (as `Node::fenced_out`, per lease).
    pub(super) fenced_out: Vec<bool>,
}

impl SetNode {
    pub(super) fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.saturating_mul(TICK.as_nanos() as u64))
    }

    pub(super) fn fresh(
        holder: HolderId,
        incarnation: u32,
        set: LeaseSet,
        clock: u64,
        leases: usize,
    ) -> Self {
        SetNode {
            set: Some(set),
            holder,
            incarnation,
            paused: false,
            clock,
            skew: 0,
            anchors: vec![Anchors::default(); leases],
            to_db: Channel::new(),
            to_node: Channel::new(),
            abandoned_upto: 0,
            work: vec![None; leases],
            fenced_out: vec![false; leases],
        }
    }
}

/// The lease-set model at one point of a path: the shared world over
/// nodes running `LeaseSet`s.
pub(crate) type SetWorld = World<SetNode>;

/// The leases of a set check: `s0`, `s1`, …
pub(crate) fn lease_names(leases: usize) -> Result<Vec<LeaseName>, ConfigError> {
    (0..leases)
        .map(|k| LeaseName::new(&format!("s{k}")))
        .collect()
}

/// A node's lease set, started at `now`.
pub(super) fn new_set(
    setup: &Setup,
    holder: HolderId,
    now: Instant,
) -> Result<LeaseSet, ConfigError> {
    let mut config = setup.bounds.lease_config(holder)?.without_lease();
    if setup.bounds.ranked {
        config.rank = super::world::node_rank(config.holder.as_str());
    }
    config.by_liveness = setup.bounds.by_liveness;
    #[allow(unused_mut)]
    let mut set = LeaseSet::new(config, setup.names.clone(), now)?;
    #[cfg(feature = "mutants")]
    set.set_mutation(setup.bounds.mutation);
    Ok(set)
}

impl World<SetNode> {
    /// Every node started at time zero, its first survey due.
    pub(crate) fn new(setup: &Setup) -> Result<Self, ConfigError> {
        let leases = setup.names.len();
        let mut stale_ms = 0;
        let mut nodes = Vec::with_capacity(setup.bounds.nodes);
        for n in 0..setup.bounds.nodes {
            let holder = holder_id(setup, n, 1)?;
            let set = new_set(setup, holder.clone(), Instant::ZERO)?;
            stale_ms = set.stale_millis();
            nodes.push(SetNode::fresh(holder, 1, set, 0, leases));
        }
        Ok(World::start(setup, nodes, stale_ms))
    }

    /// One line on the state of every node and every row, for replays.
    pub(crate) fn describe(&self, setup: &Setup) -> String {
        let mut out = format!("db tick {}", self.db_clock);
        for name in &setup.names {
            match self.db.row(name.as_str()) {
                Some(r) => {
                    let _ = write!(
                        out,
                        ", {name} ({}, epoch {}, expires {})",
                        r.holder.as_deref().unwrap_or("free"),
                        r.epoch,
                        r.expires_at - DB_EPOCH_MS
                    );
                }
                None => {
                    let _ = write!(out, ", {name} no row");
                }
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let role = match &n.set {
                None => "crashed".to_string(),
                Some(s) if s.is_finished() => "finished".to_string(),
                Some(_) => {
                    let held: Vec<String> = (0..setup.names.len())
                        .filter_map(|k| {
                            n.leader_epoch(k).map(|e| format!("{}@{e}", setup.names[k]))
                        })
                        .collect();
                    if held.is_empty() {
                        "holds nothing".to_string()
                    } else {
                        format!("holds {}", held.join(","))
                    }
                }
            };
            let paused = if n.paused { " paused" } else { "" };
            let _ = write!(
                out,
                "; n{i} {role}{paused} clock {} skew {}",
                n.clock, n.skew
            );
        }
        out
    }
}
