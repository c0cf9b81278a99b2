//! The lone-lease model's own part of the step relation (the
//! [`Contender`] hooks of [`Node`]): one `LeaseState` per node, one
//! statement at a time on the model database, gating and fencing checked
//! on each command carried out, the drift anchors kept.

use super::channel::{Channel, Delivery, Request};
use super::contender::Contender;
use super::invariants::violation;
use super::world::{new_lease, Log, Node, Setup, World, LEASE};
use super::{Property, Violation};
use crate::error::ConfigError;
use crate::names::{Epoch, HolderId};
use crate::protocol::{Command, Failure, Operation, Reply};
use crate::sim::DB_EPOCH_MS;
use crate::state::LeaseState;
use crate::time::Instant;

impl Contender for Node {
    type Request = Request;
    type Delivery = Delivery;

    fn live(&self) -> bool {
        self.lease.as_ref().is_some_and(|l| !l.is_finished())
    }
    fn paused(&self) -> bool {
        self.paused
    }
    fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }
    fn due(&self) -> bool {
        let now = self.now();
        self.lease
            .as_ref()
            .and_then(LeaseState::poll_timeout)
            .is_some_and(|t| t <= now)
    }
    fn shutting_down(&self) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|l| l.snapshot().shutting_down.is_some())
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
    fn fits(&self, skew: i32, drift: i32) -> bool {
        clock_fits(self, skew, drift)
    }
    fn to_db(&self) -> &Channel<Request> {
        &self.to_db
    }
    fn to_db_mut(&mut self) -> &mut Channel<Request> {
        &mut self.to_db
    }
    fn to_node(&self) -> &Channel<Delivery> {
        &self.to_node
    }
    fn to_node_mut(&mut self) -> &mut Channel<Delivery> {
        &mut self.to_node
    }
    fn leader_epoch(&self, _: usize) -> Option<Epoch> {
        self.lease
            .as_ref()
            .and_then(|l| l.leadership().leader_epoch())
    }
    fn leader_deadline(&self, _: usize) -> Option<Instant> {
        self.lease.as_ref().and_then(LeaseState::leader_deadline)
    }
    fn work(&self, _: usize) -> Option<Epoch> {
        self.work
    }
    fn fenced_out(&self, _: usize) -> bool {
        self.fenced_out
    }
    fn acquired_in_flight(&self) -> Option<Epoch> {
        // The latest request's: a node retries an acquire whose reply is
        // late, and takes only the reply to its last request. By request
        // id, not by epoch: a stray acquire of the same process (an older
        // request run late) answers a higher epoch, which the node ignores
        // (found by `check --failovers 2 --depth 24`: a term won by the
        // latest reply, on its way at a failover, was flagged invalid
        // because the stray's epoch was taken for the outlived term).
        self.to_node
            .queue
            .iter()
            .filter_map(|d| match d {
                super::channel::Delivery::Reply(id, crate::protocol::Reply::Acquired { epoch }) => {
                    Some((*id, *epoch))
                }
                _ => None,
            })
            .max_by_key(|&(id, _)| id)
            .map(|(_, epoch)| epoch)
    }

    fn crash(&mut self) {
        self.lease = None;
        self.paused = false;
        self.to_node.clear();
        self.work = None;
        self.anchor_flight = None;
        self.anchor_term = None;
        self.fenced_out = false;
    }

    fn restart(
        &mut self,
        setup: &Setup,
        holder: HolderId,
        incarnation: u32,
        clock: u64,
    ) -> Result<(), ConfigError> {
        self.incarnation = incarnation;
        self.clock = clock;
        self.skew = 0;
        self.lease = Some(new_lease(setup, holder.clone(), self.now())?);
        self.holder = holder;
        self.paused = false;
        self.to_node.clear();
        self.abandoned_upto = 0;
        self.anchor_flight = None;
        self.anchor_term = None;
        self.work = None;
        self.fenced_out = false;
        Ok(())
    }

    fn timeout_input(world: &mut World, _: &Setup, i: usize, log: &mut Log) -> Option<Violation> {
        world.input(i, log, LeaseState::handle_timeout)
    }

    fn shutdown_input(world: &mut World, _: &Setup, i: usize, log: &mut Log) -> Option<Violation> {
        world.input(i, log, LeaseState::handle_shutdown)
    }

    fn unhealthy(&self) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|lease| !lease.is_healthy(self.now()))
    }

    fn unhealthy_input(world: &mut World, _: &Setup, i: usize, log: &mut Log) -> Option<Violation> {
        log.note(|| format!("n{i}'s health probe fails"));
        world.input(i, log, |lease, now| lease.handle_health(now, false))
    }

    fn hand_over_input(world: &mut World, _: &Setup, i: usize, log: &mut Log) -> Option<Violation> {
        let next = (i + 1) % world.nodes.len();
        let to = HolderId::reserved_for(world.nodes[next].holder.node()).ok();
        log.note(|| format!("n{i} hands over to {to:?}"));
        world.input(i, log, |lease, now| {
            lease.handle_hand_over(now, to);
        })
    }

    fn delivery_input(
        world: &mut World,
        _: &Setup,
        i: usize,
        delivery: Delivery,
        log: &mut Log,
    ) -> Option<Violation> {
        world.deliver(i, delivery, log)
    }

    fn at_db(
        world: &mut World,
        setup: &Setup,
        request: Request,
        strayed: bool,
        log: &mut Log,
    ) -> Option<Violation> {
        world.run_at_db(setup, request, strayed, log)
    }
}

impl World {
    fn deliver(&mut self, i: usize, delivery: Delivery, log: &mut Log) -> Option<Violation> {
        match delivery {
            Delivery::Reply(id, reply) => {
                log.note(|| format!("n{i} receives #{} {reply:?}", id.0));
                self.input(i, log, |lease, now| lease.handle_reply(now, id, reply))
            }
            Delivery::Notice => {
                log.note(|| format!("n{i} receives a release notice"));
                self.input(i, log, LeaseState::handle_release_notice)
            }
        }
    }

    /// Feeds node `i`'s machine one input at its local time, then carries
    /// out its commands.
    fn input(
        &mut self,
        i: usize,
        log: &mut Log,
        handle: impl FnOnce(&mut LeaseState, Instant),
    ) -> Option<Violation> {
        let n = &mut self.nodes[i];
        let now = n.now();
        let lease = n.lease.as_mut()?;
        let before = (lease.leader_deadline(), n.anchor_flight);
        handle(lease, now);
        self.after_input(i, before, log)
    }

    /// Runs a statement against the model database at the database clock,
    /// as the simulator does: an abandoned request of the live process is
    /// dropped (cancelled) unless it strayed.
    fn run_at_db(
        &mut self,
        setup: &Setup,
        req: Request,
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
        let holder = req.holder.as_str();
        let rows = match req.operation {
            Operation::Acquire => self.db.acquire(LEASE, holder, ttl, now_ms),
            Operation::Renew { epoch } => self.db.renew(LEASE, holder, epoch, ttl, now_ms),
            Operation::Release { epoch } => self.db.release(LEASE, holder, epoch, now_ms),
            Operation::HandOver { epoch } => {
                let to = req.successor.as_ref().map_or("", HolderId::as_str);
                let reservation = i64::from(setup.bounds.reservation_ticks());
                self.db
                    .hand_over(LEASE, holder, epoch, to, reservation, now_ms)
            }
            // Ranked nodes announce (`Bounds::ranked`), and healthy ones
            // with a probe (`Bounds::health`) at the lowest rank.
            Operation::Announce => {
                let candidate = crate::Candidate {
                    holder: req.holder.clone(),
                    rank: if setup.bounds.ranked {
                        super::world::node_rank(holder)
                    } else {
                        crate::Rank::default()
                    },
                };
                if let Some(text) = candidate.announcement() {
                    let life = i64::from(setup.bounds.reservation_ticks());
                    self.db.announce(LEASE, &text, life, now_ms);
                }
                Vec::new()
            }
        };
        let reply = setup
            .statements
            .decode_reply(req.operation, &req.holder, &rows)
            .unwrap_or(Reply::Failed(Failure::Fatal));
        log.note(|| {
            format!(
                "db runs #{} {:?} of {} at db tick {} -> {reply:?}",
                req.id.0, req.operation, req.holder, self.db_clock
            )
        });
        if same_process {
            self.track_fencing_out(i, &req, &reply, strayed);
        }
        if setup.bounds.notify
            && matches!(
                (req.operation, &reply),
                (Operation::Release { .. }, Reply::Accepted)
            )
        {
            for (j, other) in self.nodes.iter_mut().enumerate() {
                if j != i && other.live() {
                    other.to_node.push(Delivery::Notice);
                }
            }
        }
        let n = &mut self.nodes[i];
        if same_process && n.live() {
            n.to_node.push(Delivery::Reply(req.id, reply));
        }
        None
    }

    /// The residual risk of a stray acquire (see `Node::fenced_out`): a
    /// stray acquire of the process itself that bumped its row marks it; the
    /// process's next acquire run or renew accepted clears it, so validity
    /// holds again from there (the machine's next renew after a bump is
    /// rejected and it demotes).
    fn track_fencing_out(&mut self, i: usize, req: &Request, reply: &Reply, strayed: bool) {
        let n = &mut self.nodes[i];
        match (req.operation, reply, strayed) {
            (Operation::Acquire, Reply::Acquired { .. }, true) => n.fenced_out = true,
            (Operation::Acquire, _, false) | (Operation::Renew { .. }, Reply::Accepted, false) => {
                n.fenced_out = false;
            }
            _ => {}
        }
    }

    /// Carries out a node's commands in order, checking gating and fencing
    /// on each, and keeps its clock anchors.
    /// `before` is the leader's deadline and the in-flight anchor before
    /// the input: a new deadline was set by the request in flight then.
    fn after_input(
        &mut self,
        i: usize,
        (deadline_before, flight_before): (Option<Instant>, Option<i32>),
        log: &mut Log,
    ) -> Option<Violation> {
        let mut found = None;
        let ranked = self.ranked;
        loop {
            let n = &mut self.nodes[i];
            let Some(command) = n.lease.as_mut().and_then(LeaseState::poll_command) else {
                break;
            };
            log.note(|| format!("n{i} -> {command:?}"));
            let problem = match command {
                Command::Execute { request, operation } => {
                    n.anchor_flight = Some(n.skew);
                    let successor = n.lease.as_ref().and_then(|l| l.successor().cloned());
                    let problem = match (&successor, operation) {
                        (Some(to), Operation::HandOver { .. }) if ranked => {
                            super::world::preference_problem(&n.holder, to)
                        }
                        _ => None,
                    };
                    n.to_db.push(Request {
                        node: i,
                        incarnation: n.incarnation,
                        holder: n.holder.clone(),
                        id: request,
                        operation,
                        successor,
                    });
                    problem
                }
                Command::Cancel { request } => {
                    n.abandoned_upto = request.0;
                    n.anchor_flight = None;
                    None
                }
                Command::StartWork { epoch } => {
                    let published = n.lease.as_ref().and_then(|l| l.leadership().leader_epoch());
                    let problem = match (n.work, published) {
                        (Some(prev), _) => Some(format!(
                            "work started at epoch {epoch} while epoch {prev} ran"
                        )),
                        (None, p) if p != Some(epoch) => Some(format!(
                            "work started at epoch {epoch} without a leader publication"
                        )),
                        _ => None,
                    };
                    n.work = Some(epoch);
                    problem.map(|p| (Property::Gating, p))
                }
                Command::StopWork { epoch, .. } => {
                    let problem = (n.work != Some(epoch))
                        .then(|| format!("work stopped at epoch {epoch}, but {:?} ran", n.work));
                    n.work = None;
                    problem.map(|p| (Property::Gating, p))
                }
                Command::Publish(leadership) => match (leadership.leader_epoch(), n.work) {
                    (None, Some(running)) => Some((
                        Property::Gating,
                        format!("published follower while work of epoch {running} ran"),
                    )),
                    (Some(epoch), _) => {
                        let last = self.last_epoch[0].replace(epoch);
                        last.filter(|&prev| epoch <= prev).map(|prev| {
                            (
                                Property::Fencing,
                                format!(
                                    "leads at epoch {epoch} after a leadership at epoch {prev}"
                                ),
                            )
                        })
                    }
                    _ => None,
                },
                // The model tells every node of releases unasked
                // (PostgreSQL's notices): nothing to watch.
                Command::WatchChanges(_) => None,
                Command::Finished => {
                    n.to_node.clear();
                    n.work.map(|epoch| {
                        (
                            Property::Gating,
                            format!("finished with work of epoch {epoch} running"),
                        )
                    })
                }
            };
            if let (None, Some((property, detail))) = (&found, problem) {
                found = Some(violation(property, format!("n{i}: {detail}")));
            }
        }
        let n = &mut self.nodes[i];
        // An unhealthy leader that read a live candidate on another node
        // has handed over by the end of the same input (DESIGN §5).
        if let Some(lease) = n.lease.as_ref() {
            let other = lease
                .preferred()
                .and_then(|c| c.successor_from(lease.config().holder.node()));
            if found.is_none()
                && lease.leadership().is_leader()
                && !lease.is_healthy(n.now())
                && other.is_some()
            {
                found = Some(violation(
                    Property::Health,
                    format!("n{i}: unhealthy, it still leads though it read the live candidate {other:?}"),
                ));
            }
        }
        let snapshot = n.lease.as_ref().map(LeaseState::snapshot);
        if snapshot.as_ref().is_none_or(|s| s.in_flight.is_none()) {
            n.anchor_flight = None;
        }
        match snapshot.and_then(|s| s.leading) {
            None => n.anchor_term = None,
            Some((_, deadline)) if Some(deadline) != deadline_before => {
                n.anchor_term = flight_before;
            }
            Some(_) => {}
        }
        found
    }
}

/// Every live anchor within the drift of the new skew, and the skew itself
/// within the drift of the database: the drift relation (see `check`).
fn clock_fits(n: &Node, skew: i32, drift: i32) -> bool {
    let near = |a: Option<i32>| a.is_none_or(|a| (a - skew).abs() <= drift);
    skew.abs() <= drift && near(n.anchor_flight) && near(n.anchor_term)
}
