//! The lease-set model's own part of the step relation (the
//! [`Contender`] hooks of [`SetNode`]): each node's `LeaseSet` batches its
//! leases' statements on the node's connection, the batches run on the
//! model database through the set simulator's glue, and gating, fencing
//! and no stealing are checked per lease on each command and batch. The
//! clocks, connections, faults, liveness and progress are the shared
//! relation's (`check::relation`).

use super::{new_set, Anchors, SetDelivery, SetNode, SetRequest, SetWorld};
use crate::check::channel::Channel;
use crate::check::contender::Contender;
use crate::check::invariants::violation;
use crate::check::world::{preference_problem, Log, Setup, World};
use crate::check::Property;
use crate::check::Violation;
use crate::error::ConfigError;
use crate::names::{Epoch, HolderId, LeaseName};
use crate::protocol::Reply;
use crate::set::{BatchKind, BatchReply, LeaseSet, SetCommand};
use crate::sim::set::{run_batch, run_hand_over};
use crate::sim::{ModelRow, DB_EPOCH_MS};
use crate::time::Instant;

impl Contender for SetNode {
    type Request = SetRequest;
    type Delivery = SetDelivery;

    fn live(&self) -> bool {
        self.set.as_ref().is_some_and(|s| !s.is_finished())
    }
    fn paused(&self) -> bool {
        self.paused
    }
    fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }
    fn due(&self) -> bool {
        let now = self.now();
        self.set
            .as_ref()
            .and_then(LeaseSet::poll_timeout)
            .is_some_and(|t| t <= now)
    }
    fn shutting_down(&self) -> bool {
        self.set.as_ref().is_some_and(|s| s.view().shutting_down)
    }
    fn holder(&self) -> &HolderId {
        &self.holder
    }
    fn incarnation(&self) -> u32 {
        self.incarnation
    }
    fn clock(&self) -> u64 {
        self.clock
    }
    fn skew(&self) -> i32 {
        self.skew
    }
    fn skew_mut(&mut self) -> &mut i32 {
        &mut self.skew
    }
    fn clock_mut(&mut self) -> &mut u64 {
        &mut self.clock
    }
    /// The drift relation over every lease's anchors.
    fn fits(&self, skew: i32, drift: i32) -> bool {
        let near = |a: Option<i32>| a.is_none_or(|a| (a - skew).abs() <= drift);
        skew.abs() <= drift
            && self
                .anchors
                .iter()
                .all(|a| near(a.flight.map(|(_, _, s)| s)) && near(a.term))
    }
    fn to_db(&self) -> &Channel<SetRequest> {
        &self.to_db
    }
    fn to_db_mut(&mut self) -> &mut Channel<SetRequest> {
        &mut self.to_db
    }
    fn to_node(&self) -> &Channel<SetDelivery> {
        &self.to_node
    }
    fn to_node_mut(&mut self) -> &mut Channel<SetDelivery> {
        &mut self.to_node
    }
    fn leader_epoch(&self, lease: usize) -> Option<Epoch> {
        let set = self.set.as_ref()?;
        set.slot_view(lease).machine.leadership().leader_epoch()
    }
    fn leader_deadline(&self, lease: usize) -> Option<Instant> {
        let set = self.set.as_ref()?;
        set.slot_view(lease).machine.leader_deadline()
    }
    fn work(&self, lease: usize) -> Option<Epoch> {
        self.work[lease]
    }
    fn fenced_out(&self, lease: usize) -> bool {
        self.fenced_out[lease]
    }

    fn crash(&mut self) {
        let leases = self.work.len();
        self.set = None;
        self.paused = false;
        self.to_node.clear();
        self.work = vec![None; leases];
        self.anchors = vec![Anchors::default(); leases];
        self.fenced_out = vec![false; leases];
    }

    fn restart(
        &mut self,
        setup: &Setup,
        holder: HolderId,
        incarnation: u32,
        clock: u64,
    ) -> Result<(), ConfigError> {
        let now = Instant::from_nanos(clock.saturating_mul(super::TICK.as_nanos() as u64));
        let set = new_set(setup, holder.clone(), now)?;
        // What is still on its way to the database stays there: the old
        // process's batches may still run.
        let to_db = std::mem::replace(&mut self.to_db, Channel::new());
        *self = SetNode::fresh(holder, incarnation, set, clock, setup.names.len());
        self.to_db = to_db;
        Ok(())
    }

    fn timeout_input(
        world: &mut SetWorld,
        setup: &Setup,
        i: usize,
        log: &mut Log,
    ) -> Option<Violation> {
        world.input(setup, i, log, LeaseSet::handle_timeout)
    }

    fn shutdown_input(
        world: &mut SetWorld,
        setup: &Setup,
        i: usize,
        log: &mut Log,
    ) -> Option<Violation> {
        world.input(setup, i, log, LeaseSet::handle_shutdown)
    }

    /// The first lease goes to the next node's reservation.
    fn hand_over_input(
        world: &mut SetWorld,
        setup: &Setup,
        i: usize,
        log: &mut Log,
    ) -> Option<Violation> {
        let next = (i + 1) % world.nodes.len();
        let to = HolderId::reserved_for(world.nodes[next].holder.node()).ok();
        let lease = setup.names[0].clone();
        log.note(|| format!("n{i} hands {lease} over to {to:?}"));
        world.input(setup, i, log, |set, now| {
            set.handle_hand_over(now, lease.as_str(), to);
        })
    }

    fn delivery_input(
        world: &mut SetWorld,
        setup: &Setup,
        i: usize,
        delivery: SetDelivery,
        log: &mut Log,
    ) -> Option<Violation> {
        world.deliver(setup, i, delivery, log)
    }

    fn at_db(
        world: &mut SetWorld,
        setup: &Setup,
        request: SetRequest,
        strayed: bool,
        log: &mut Log,
    ) -> Option<Violation> {
        world.run_at_db(setup, request, strayed, log)
    }
}

impl World<SetNode> {
    fn deliver(
        &mut self,
        setup: &Setup,
        i: usize,
        delivery: SetDelivery,
        log: &mut Log,
    ) -> Option<Violation> {
        match delivery {
            SetDelivery::Reply(id, reply) => {
                log.note(|| format!("n{i} receives #{} {reply:?}", id.0));
                self.input(setup, i, log, |set, now| set.handle_reply(now, id, reply))
            }
            SetDelivery::Notice(names) => {
                log.note(|| format!("n{i} receives release notices for {names:?}"));
                self.input(setup, i, log, |set, now| {
                    set.handle_release_notices(now, names.iter().map(LeaseName::as_str));
                })
            }
        }
    }

    /// Feeds node `i`'s set one input at its local time, then carries out
    /// its commands.
    fn input(
        &mut self,
        setup: &Setup,
        i: usize,
        log: &mut Log,
        handle: impl FnOnce(&mut LeaseSet, Instant),
    ) -> Option<Violation> {
        let n = &mut self.nodes[i];
        let now = n.now();
        let set = n.set.as_mut()?;
        let before: Vec<(Option<Instant>, Option<i32>)> = (0..setup.names.len())
            .map(|k| {
                (
                    set.slot_view(k).machine.leader_deadline(),
                    n.anchors[k].flight.map(|(_, _, skew)| skew),
                )
            })
            .collect();
        handle(set, now);
        self.after_input(setup, i, &before, log)
    }

    /// Runs a batch against the model database at the database clock,
    /// through the set simulator's glue; checks that no acquire takes a
    /// row another holder holds unexpired.
    fn run_at_db(
        &mut self,
        setup: &Setup,
        req: SetRequest,
        strayed: bool,
        log: &mut Log,
    ) -> Option<Violation> {
        let i = req.node;
        let same_process = self.nodes[i].incarnation == req.incarnation;
        if same_process && !strayed && req.id.0 <= self.nodes[i].abandoned_upto {
            log.note(|| format!("db drops #{} of n{i} (cancelled)", req.id.0));
            return None;
        }
        let now_ms = DB_EPOCH_MS + self.db_clock as i64;
        let ttl = i64::from(setup.bounds.ttl_ticks);
        let before: Vec<_> = req
            .batch
            .items
            .iter()
            .map(|(name, _)| {
                // With the row's expiry as it stood (a linked row's is its
                // holder's liveness's, which the acquire may end).
                self.db.row(name.as_str()).map(|row| ModelRow {
                    expires_at: self.db.expiry(row, now_ms),
                    ..row.clone()
                })
            })
            .collect();
        let reply = match (&req.batch.kind, &req.successor) {
            (BatchKind::HandOver, Some(successor)) => run_hand_over(
                &mut self.db,
                &setup.statements,
                &req.holder,
                &req.batch,
                successor,
                i64::from(setup.bounds.reservation_ticks()),
                now_ms,
            ),
            _ => run_batch(
                &mut self.db,
                &setup.statements,
                &req.holder,
                &req.batch,
                self.stale_ms,
                ttl,
                now_ms,
            ),
        };
        log.note(|| {
            format!(
                "db runs #{} {:?} {:?} of {} at db tick {} -> {reply:?}",
                req.id.0, req.batch.kind, req.batch.items, req.holder, self.db_clock
            )
        });
        let mut found = None;
        if req.batch.kind == BatchKind::Acquire {
            for ((name, _), before) in req.batch.items.iter().zip(&before) {
                let Some(before) = before else { continue };
                let after = self.db.row(name.as_str());
                let taken = after.is_some_and(|a| {
                    a.holder.as_deref() == Some(req.holder.as_str()) && a.epoch != before.epoch
                });
                // A row reserved for the acquiring node (a planned
                // handover) is its own to take.
                let reservation = req.holder.reservation();
                let held_by_other = before
                    .holder
                    .as_deref()
                    .is_some_and(|h| h != req.holder.as_str() && h != reservation)
                    && before.expires_at > now_ms;
                if taken && held_by_other && found.is_none() {
                    found = Some(violation(
                        Property::Stealing,
                        format!(
                            "n{i}'s acquire ({}) took {name} from {} at db tick {}, {} ticks before its expiry",
                            req.holder,
                            before.holder.as_deref().unwrap_or("free"),
                            self.db_clock,
                            before.expires_at - now_ms
                        ),
                    ));
                }
            }
        }
        if same_process {
            self.track_fencing_out(setup, i, &req, &reply, strayed);
        }
        // A hand-over notifies as a release does.
        if let (true, BatchKind::Release | BatchKind::HandOver, BatchReply::Matched(names)) =
            (setup.bounds.notify, req.batch.kind, &reply)
        {
            let freed: Vec<LeaseName> = req
                .batch
                .items
                .iter()
                .map(|(n, _)| n.clone())
                .filter(|n| names.iter().any(|m| m == n.as_str()))
                .collect();
            if !freed.is_empty() {
                for (j, other) in self.nodes.iter_mut().enumerate() {
                    if j != i && other.live() {
                        other.to_node.push(SetDelivery::Notice(freed.clone()));
                    }
                }
            }
        }
        let n = &mut self.nodes[i];
        if same_process && n.live() {
            n.to_node.push(SetDelivery::Reply(req.id, reply));
        }
        found
    }

    /// Per lease, as `World::track_fencing_out`: a stray acquire of the
    /// process itself that took its row marks it; the process's next
    /// acquire of it run, or renew of it accepted, clears it.
    fn track_fencing_out(
        &mut self,
        setup: &Setup,
        i: usize,
        req: &SetRequest,
        reply: &BatchReply,
        strayed: bool,
    ) {
        let n = &mut self.nodes[i];
        for (name, _) in &req.batch.items {
            let Some(k) = setup.names.iter().position(|l| l == name) else {
                continue;
            };
            match (req.batch.kind, reply, strayed) {
                (BatchKind::Acquire, BatchReply::Acquired(outcomes), true)
                    if outcomes.iter().any(|(m, r)| {
                        m == name.as_str() && matches!(r, Reply::Acquired { .. })
                    }) =>
                {
                    n.fenced_out[k] = true;
                }
                (BatchKind::Acquire, _, false) => n.fenced_out[k] = false,
                (BatchKind::Renew, BatchReply::Matched(names), false)
                    if names.iter().any(|m| m == name.as_str()) =>
                {
                    n.fenced_out[k] = false;
                }
                _ => {}
            }
        }
    }

    /// Carries out a node's commands in order, checking gating and fencing
    /// per lease; confirms stopped work at once; keeps the drift anchors.
    fn after_input(
        &mut self,
        setup: &Setup,
        i: usize,
        before: &[(Option<Instant>, Option<i32>)],
        log: &mut Log,
    ) -> Option<Violation> {
        let mut found = None;
        let mut stopped: Vec<LeaseName> = Vec::new();
        let ranked = self.ranked;
        loop {
            let n = &mut self.nodes[i];
            let now = n.now();
            let Some(set) = n.set.as_mut() else { break };
            let Some(command) = set.poll_command() else {
                // The work stopped at once: confirm it, which may send the
                // release.
                if stopped.is_empty() {
                    break;
                }
                for name in stopped.drain(..) {
                    log.note(|| format!("n{i} work of {name} stopped"));
                    set.handle_work_stopped(now, name.as_str());
                }
                continue;
            };
            log.note(|| format!("n{i} -> {command:?}"));
            let index = |lease: &LeaseName| setup.names.iter().position(|l| l == lease);
            let problem = match command {
                SetCommand::Execute { request, batch, .. } => {
                    let successor = (batch.kind == BatchKind::HandOver)
                        .then(|| set.hand_over_in_flight().and_then(|(_, to)| to.cloned()))
                        .flatten();
                    // With ranked nodes every hand-over is a yield: to a
                    // node of strictly higher rank.
                    let problem = successor
                        .as_ref()
                        .filter(|_| ranked)
                        .and_then(|to| preference_problem(&n.holder, to));
                    n.to_db.push(SetRequest {
                        node: i,
                        incarnation: n.incarnation,
                        holder: n.holder.clone(),
                        id: request,
                        batch,
                        successor,
                    });
                    problem
                }
                SetCommand::Cancel { request } => {
                    n.abandoned_upto = request.0;
                    None
                }
                SetCommand::StartWork { lease, epoch } => {
                    let Some(k) = index(&lease) else { continue };
                    let published = set.slot_view(k).machine.leadership().leader_epoch();
                    let problem = match (n.work[k], published) {
                        (Some(prev), _) => Some(format!(
                            "work of {lease} started at epoch {epoch} while epoch {prev} ran"
                        )),
                        (None, p) if p != Some(epoch) => Some(format!(
                            "work of {lease} started at epoch {epoch} without a leader publication"
                        )),
                        _ => None,
                    };
                    n.work[k] = Some(epoch);
                    problem.map(|p| (Property::Gating, p))
                }
                SetCommand::StopWork { lease, epoch, .. } => {
                    let Some(k) = index(&lease) else { continue };
                    let problem = (n.work[k] != Some(epoch)).then(|| {
                        format!(
                            "work of {lease} stopped at epoch {epoch}, but {:?} ran",
                            n.work[k]
                        )
                    });
                    n.work[k] = None;
                    stopped.push(lease);
                    problem.map(|p| (Property::Gating, p))
                }
                SetCommand::Publish { lease, leadership } => {
                    let Some(k) = index(&lease) else { continue };
                    match (leadership.leader_epoch(), n.work[k]) {
                        (None, Some(running)) => Some((
                            Property::Gating,
                            format!("{lease} published follower while work of epoch {running} ran"),
                        )),
                        (Some(epoch), _) => {
                            let last = self.last_epoch[k].replace(epoch);
                            last.filter(|&prev| epoch <= prev).map(|prev| {
                                (
                                    Property::Fencing,
                                    format!(
                                        "leads {lease} at epoch {epoch} after a leadership at epoch {prev}"
                                    ),
                                )
                            })
                        }
                        _ => None,
                    }
                }
                // Releases reach every node unasked here, as notices.
                SetCommand::WatchChanges(_) => None,
                SetCommand::Finished => {
                    n.to_node.clear();
                    let running = n.work.iter().position(Option::is_some);
                    running.map(|k| {
                        (
                            Property::Gating,
                            format!("finished with the work of {} running", setup.names[k]),
                        )
                    })
                }
            };
            if let (None, Some((property, detail))) = (&found, problem) {
                found = Some(violation(property, format!("n{i}: {detail}")));
            }
        }
        let n = &mut self.nodes[i];
        let skew = n.skew;
        let Some(set) = n.set.as_ref() else {
            return found;
        };
        for (k, &(deadline_before, flight_before)) in before.iter().enumerate() {
            let machine = set.slot_view(k).machine;
            let anchors = &mut n.anchors[k];
            match machine.snapshot().in_flight {
                None => anchors.flight = None,
                Some((id, _, sent)) => {
                    if anchors.flight.is_none_or(|(a, s, _)| (a, s) != (id, sent)) {
                        anchors.flight = Some((id, sent, skew));
                    }
                }
            }
            match machine.snapshot().leading {
                None => anchors.term = None,
                Some((_, deadline)) if Some(deadline) != deadline_before => {
                    anchors.term = flight_before;
                }
                Some(_) => {}
            }
        }
        found
    }
}
