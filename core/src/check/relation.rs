//! The step relation: which steps are enabled in a state, and what each
//! does to it (the machines' inputs, the database's statements, the
//! faults), checking gating and fencing on each command carried out.

use super::channel::{Delivery, Request};
use super::invariants::violation;
use super::step::Step;
use super::world::{holder_id, new_lease, Log, Node, Setup, World, LEASE, ORPHAN};
use super::{Property, Violation};
use crate::protocol::{Command, Failure, Operation, Reply};
use crate::sim::DB_EPOCH_MS;
use crate::state::LeaseState;
use crate::time::Instant;

impl World {
    fn faults_left(&self, setup: &Setup) -> bool {
        (self.faults as usize) < setup.bounds.faults
    }

    /// Every step enabled here, in a fixed order.
    pub(crate) fn steps(&self, setup: &Setup, out: &mut Vec<Step>) {
        out.clear();
        if self.fresh && setup.bounds.orphan {
            out.push(Step::Orphan);
        }
        if self.can_tick_db(setup) {
            out.push(Step::TickDb);
        }
        if self.stray.is_some() {
            out.push(Step::StrayAtDb);
        }
        let faults = self.faults_left(setup);
        for (i, n) in self.nodes.iter().enumerate() {
            if self.can_tick(setup, i) {
                out.push(Step::Tick(i));
            }
            if n.running() && n.due() {
                out.push(Step::Timer(i));
            }
            if !n.to_db.queue.is_empty() {
                out.push(Step::AtDb(i));
            }
            if n.running() && !n.to_node.queue.is_empty() {
                out.push(Step::Recv(i));
            }
            if n.paused && n.live() {
                out.push(Step::Resume(i));
            }
            if !faults {
                continue;
            }
            if !n.to_db.queue.is_empty() {
                out.push(Step::LoseToDb(i));
                if !n.to_db.late {
                    out.push(Step::LateToDb(i));
                }
                if self.stray.is_none() {
                    out.push(Step::Stray(i));
                }
            }
            if !n.to_node.queue.is_empty() {
                out.push(Step::LoseToNode(i));
                if !n.to_node.late {
                    out.push(Step::LateToNode(i));
                }
            }
            if n.running() {
                out.push(Step::Pause(i));
                let shutting = n
                    .lease
                    .as_ref()
                    .is_some_and(|l| l.snapshot().shutting_down.is_some());
                if !shutting {
                    out.push(Step::Shutdown(i));
                }
            }
            if n.live() {
                out.push(Step::Crash(i));
            } else {
                out.push(Step::Restart(i));
            }
        }
    }

    /// The database clock may advance unless a head message would outlive
    /// the delivery bound, or a live clock would fall out of its drift
    /// window.
    fn can_tick_db(&self, setup: &Setup) -> bool {
        let d = setup.drift();
        self.nodes.iter().all(|n| {
            let heads_on_time = n.to_db.on_time(setup) && (n.paused || n.to_node.on_time(setup));
            heads_on_time && (!n.live() || clock_fits(n, n.skew - 1, d))
        })
    }

    /// A node's clock may advance unless its timer is due (a driver wakes
    /// at `poll_timeout`; a late wake-up is a pause) or it would leave its
    /// drift window.
    fn can_tick(&self, setup: &Setup, node: usize) -> bool {
        let n = &self.nodes[node];
        n.live() && !(n.running() && n.due()) && clock_fits(n, n.skew + 1, setup.drift())
    }

    /// Applies an enabled step and checks the invariants; `Some` on the
    /// first one violated.
    pub(crate) fn apply(&mut self, setup: &Setup, step: Step, log: &mut Log) -> Option<Violation> {
        self.fresh = false;
        if step.is_fault() {
            self.faults += 1;
            self.leaderless = 0;
        }
        let found = match step {
            Step::Orphan => {
                // Lapsing one interval from now: when the contenders
                // that found it held poll again.
                let left = i64::from(setup.bounds.interval_ticks);
                let now_ms = DB_EPOCH_MS + self.db_clock as i64;
                self.db.acquire(LEASE, ORPHAN, left, now_ms);
                log.note(|| format!("the row starts held by {ORPHAN}, a process gone"));
                None
            }
            Step::TickDb => self.tick_db(setup, log),
            Step::Tick(i) => {
                let n = &mut self.nodes[i];
                n.clock += 1;
                n.skew += 1;
                None
            }
            Step::Timer(i) => self.timer(i, log),
            Step::AtDb(i) => match self.nodes[i].to_db.pop() {
                Some((req, late)) => {
                    if late {
                        self.leaderless = 0;
                    }
                    self.at_db(setup, req, false, log)
                }
                None => None,
            },
            Step::StrayAtDb => match self.stray.take() {
                Some(req) => {
                    self.leaderless = 0;
                    self.at_db(setup, req, true, log)
                }
                None => None,
            },
            Step::Recv(i) => match self.nodes[i].to_node.pop() {
                Some((delivery, late)) => {
                    if late {
                        self.leaderless = 0;
                    }
                    self.deliver(i, delivery, log)
                }
                None => None,
            },
            Step::Resume(i) => {
                self.nodes[i].paused = false;
                self.timer(i, log)
            }
            Step::LoseToDb(i) => {
                self.nodes[i].to_db.pop();
                None
            }
            Step::LoseToNode(i) => {
                self.nodes[i].to_node.pop();
                None
            }
            Step::LateToDb(i) => {
                self.nodes[i].to_db.late = true;
                None
            }
            Step::LateToNode(i) => {
                self.nodes[i].to_node.late = true;
                None
            }
            Step::Stray(i) => {
                self.stray = self.nodes[i].to_db.pop().map(|(req, _)| req);
                None
            }
            Step::Pause(i) => {
                self.nodes[i].paused = true;
                None
            }
            Step::Crash(i) => {
                let n = &mut self.nodes[i];
                n.lease = None;
                n.paused = false;
                n.to_node.clear();
                n.work = None;
                n.anchor_flight = None;
                n.anchor_term = None;
                n.fenced_out = false;
                log.note(|| format!("n{i} crashed as {}", n.holder));
                None
            }
            Step::Restart(i) => return self.restart(setup, i, log),
            Step::Shutdown(i) => self.input(i, log, LeaseState::handle_shutdown),
        };
        found.or_else(|| self.check_state(setup))
    }

    fn tick_db(&mut self, setup: &Setup, log: &mut Log) -> Option<Violation> {
        self.db_clock += 1;
        for n in &mut self.nodes {
            if n.live() {
                n.skew -= 1;
            }
            if !n.to_db.queue.is_empty() {
                n.to_db.age += 1;
            }
            if !n.to_node.queue.is_empty() && !n.paused {
                n.to_node.age += 1;
            }
        }
        let bound = setup.bounds.liveness_ticks?;
        let able = self.nodes.iter().any(|n| {
            n.running()
                && !n.to_db.late
                && !n.to_node.late
                && n.lease
                    .as_ref()
                    .is_some_and(|l| l.snapshot().shutting_down.is_none())
        });
        if !able || self.nodes.iter().any(Node::leading) {
            self.leaderless = 0;
            return None;
        }
        self.leaderless += 1;
        log.note(|| format!("no leader for {} db ticks", self.leaderless));
        (self.leaderless > bound).then(|| {
            violation(
                Property::Liveness,
                format!(
                    "no leader for {} database ticks (bound {bound}) at db tick {}, with no fault since and a node able to lead",
                    self.leaderless, self.db_clock
                ),
            )
        })
    }

    fn timer(&mut self, i: usize, log: &mut Log) -> Option<Violation> {
        let found = self.input(i, log, LeaseState::handle_timeout);
        let n = &self.nodes[i];
        if found.is_none() && n.running() && n.due() {
            return Some(violation(
                Property::Progress,
                format!(
                    "n{i} woken at its poll_timeout (local tick {}) asks to be woken again at once",
                    n.clock
                ),
            ));
        }
        found
    }

    fn restart(&mut self, setup: &Setup, i: usize, log: &mut Log) -> Option<Violation> {
        let db_clock = self.db_clock;
        let n = &mut self.nodes[i];
        n.incarnation += 1;
        let holder = match holder_id(setup, i, n.incarnation) {
            Ok(h) => h,
            Err(e) => return Some(violation(Property::Setup, e.to_string())),
        };
        n.clock = db_clock;
        n.skew = 0;
        let lease = match new_lease(setup, holder.clone(), n.now()) {
            Ok(l) => l,
            Err(e) => return Some(violation(Property::Setup, e.to_string())),
        };
        log.note(|| format!("n{i} restarted as {holder}"));
        n.holder = holder;
        n.lease = Some(lease);
        n.paused = false;
        n.to_node.clear();
        n.abandoned_upto = 0;
        n.anchor_flight = None;
        n.anchor_term = None;
        n.work = None;
        n.fenced_out = false;
        self.check_state(setup)
    }

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
    fn at_db(
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
        loop {
            let n = &mut self.nodes[i];
            let Some(command) = n.lease.as_mut().and_then(LeaseState::poll_command) else {
                break;
            };
            log.note(|| format!("n{i} -> {command:?}"));
            let problem = match command {
                Command::Execute { request, operation } => {
                    n.anchor_flight = Some(n.skew);
                    n.to_db.push(Request {
                        node: i,
                        incarnation: n.incarnation,
                        holder: n.holder.clone(),
                        id: request,
                        operation,
                    });
                    None
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
                        let last = self.last_epoch.replace(epoch);
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
