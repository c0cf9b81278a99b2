//! What the shared step relation and invariants need of a node, whichever
//! machine it runs: a lone [`LeaseState`](crate::LeaseState) (`world::Node`)
//! or a [`LeaseSet`](crate::LeaseSet) (`set::SetNode`).
//!
//! The clocks, the connections, the faults, liveness, progress and the
//! per-lease invariants are written once over this trait (`relation`,
//! `invariants`); what a model does with a statement, a reply or its
//! machine's commands is its own (the `*_input` hooks below), because a
//! lone lease answers one statement and a set a batch.

use super::channel::Channel;
use super::world::{Log, Setup, World};
use super::Violation;
use crate::error::ConfigError;
use crate::names::{Epoch, HolderId};
use crate::time::Instant;

/// A node of either model: its process, clock, connection and, per lease
/// (`lease` indexes `Setup::names`), what its machine believes.
pub(super) trait Contender: Clone + Sized {
    /// A statement on its way to the database.
    type Request: Clone;
    /// A message on its way to the node.
    type Delivery: Clone;

    /// Alive and not finished: its clock matters.
    fn live(&self) -> bool;
    /// Frozen (a fault): its clock runs, its inputs wait.
    fn paused(&self) -> bool;
    fn set_paused(&mut self, paused: bool);
    /// Alive, not finished, not paused: it can act.
    fn running(&self) -> bool {
        self.live() && !self.paused()
    }
    /// Its timer is due at its local clock.
    fn due(&self) -> bool;
    /// A clean shutdown has begun.
    fn shutting_down(&self) -> bool;
    fn holder(&self) -> &HolderId;
    fn incarnation(&self) -> u32;
    /// Local clock in ticks.
    fn clock(&self) -> u64;
    /// Local ticks minus database ticks since the process started.
    fn skew(&self) -> i32;
    fn skew_mut(&mut self) -> &mut i32;
    /// Advances the local clock one tick.
    fn tick(&mut self) {
        *self.clock_mut() += 1;
        *self.skew_mut() += 1;
    }
    fn clock_mut(&mut self) -> &mut u64;
    /// Whether every live drift anchor stays within `drift` of `skew`, and
    /// `skew` within `drift` of the database (the drift relation, see
    /// `check`).
    fn fits(&self, skew: i32, drift: i32) -> bool;
    fn to_db(&self) -> &Channel<Self::Request>;
    fn to_db_mut(&mut self) -> &mut Channel<Self::Request>;
    fn to_node(&self) -> &Channel<Self::Delivery>;
    fn to_node_mut(&mut self) -> &mut Channel<Self::Delivery>;

    /// The epoch `lease` is published leader at, if any.
    fn leader_epoch(&self, lease: usize) -> Option<Epoch>;
    /// While leading `lease`: the machine's local deadline.
    fn leader_deadline(&self, lease: usize) -> Option<Instant>;
    /// Believes it leads `lease` and can act.
    fn leading(&self, lease: usize) -> bool {
        self.running() && self.leader_epoch(lease).is_some()
    }
    /// The gated work of `lease` running, by epoch.
    fn work(&self, lease: usize) -> Option<Epoch>;
    /// A stray acquire of this very process bumped `lease`'s row (see
    /// `world::Node::fenced_out`).
    fn fenced_out(&self, lease: usize) -> bool;
    /// An `Acquired` reply on its way to the lone lease's node, if any (a
    /// term already granted, not yet known; `None` for a set's node,
    /// which the failover check does not cover).
    fn acquired_in_flight(&self) -> Option<Epoch> {
        None
    }

    /// The process dies: its machine, inbox, work and anchors go; what it
    /// sent stays on its way.
    fn crash(&mut self);
    /// A new process of the node, `holder` in `incarnation`, started at
    /// local (and database) tick `clock`; what the old one sent stays on
    /// its way to the database.
    fn restart(
        &mut self,
        setup: &Setup,
        holder: HolderId,
        incarnation: u32,
        clock: u64,
    ) -> Result<(), ConfigError>;

    /// Node `i`'s machine handles its timeout (`handle_timeout`).
    fn timeout_input(
        world: &mut World<Self>,
        setup: &Setup,
        i: usize,
        log: &mut Log,
    ) -> Option<Violation>;
    /// Node `i`'s machine begins a clean shutdown (`handle_shutdown`).
    fn shutdown_input(
        world: &mut World<Self>,
        setup: &Setup,
        i: usize,
        log: &mut Log,
    ) -> Option<Violation>;
    /// Whether node `i`'s health probe already fails (`Bounds::health`,
    /// a lone lease only).
    fn unhealthy(&self) -> bool {
        false
    }
    /// Node `i`'s health probe starts failing (`handle_health(false)`;
    /// `Bounds::health`, a lone lease only).
    fn unhealthy_input(
        world: &mut World<Self>,
        setup: &Setup,
        i: usize,
        log: &mut Log,
    ) -> Option<Violation> {
        let _ = (world, setup, i, log);
        None
    }
    /// Node `i`'s machine hands its lease (a set: its first lease) over to
    /// the next node (`handle_hand_over`; `Bounds::handover`).
    fn hand_over_input(
        world: &mut World<Self>,
        setup: &Setup,
        i: usize,
        log: &mut Log,
    ) -> Option<Violation> {
        let _ = (world, setup, i, log);
        None
    }
    /// A message reaches node `i`.
    fn delivery_input(
        world: &mut World<Self>,
        setup: &Setup,
        i: usize,
        delivery: Self::Delivery,
        log: &mut Log,
    ) -> Option<Violation>;
    /// A statement runs on the model database (`strayed`: out of order,
    /// its cancel having lost the race).
    fn at_db(
        world: &mut World<Self>,
        setup: &Setup,
        request: Self::Request,
        strayed: bool,
        log: &mut Log,
    ) -> Option<Violation>;
}
