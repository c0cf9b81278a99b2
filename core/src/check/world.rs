//! The model the checker explores: the real `LeaseState`s on tick clocks,
//! the model database, the connections between them, and the invariants
//! checked on every step.

use std::collections::VecDeque;
use std::fmt::Write as _;

use super::bounds::{Bounds, TICK};
use super::step::Step;
use super::{Property, Violation};
use crate::error::ConfigError;
use crate::names::{Epoch, HolderId};
use crate::protocol::{Command, Failure, Operation, Reply, RequestId};
use crate::sim::{ModelDb, DB_EPOCH_MS};
use crate::sql::{Dialect, Statements};
use crate::state::LeaseState;
use crate::time::Instant;

/// The lease every contender competes for.
pub(super) const LEASE: &str = "check";

/// What does not change during a check.
pub(crate) struct Setup {
    pub(super) bounds: Bounds,
    statements: Statements,
}

impl Setup {
    pub(crate) fn new(bounds: Bounds) -> Self {
        Setup {
            bounds,
            statements: Statements::new(Dialect::Sqlite, &crate::names::TableName::default()),
        }
    }

    fn drift(&self) -> i32 {
        self.bounds.drift_ticks as i32
    }

    /// How many database ticks a head message may wait: the delivery bound,
    /// or for a late one the simulator's long tail, up to twice the request
    /// timeout more.
    fn bound(&self, late: bool) -> u32 {
        let b = &self.bounds;
        if late {
            b.delivery_ticks + 2 * b.interval_ticks
        } else {
            b.delivery_ticks
        }
    }
}

/// A statement on its way to the database.
#[derive(Clone, Debug)]
pub(super) struct Request {
    pub(super) node: usize,
    pub(super) incarnation: u32,
    pub(super) holder: HolderId,
    pub(super) id: RequestId,
    pub(super) operation: Operation,
}

/// A message on its way to a node.
#[derive(Clone, Debug)]
pub(super) enum Delivery {
    Reply(RequestId, Reply),
    Notice,
}

/// One direction of a connection: in order (TCP), with the age of its
/// head message in database ticks, or `late` once a fault delayed it.
#[derive(Clone, Debug)]
pub(super) struct Channel<T> {
    pub(super) queue: VecDeque<T>,
    pub(super) age: u32,
    pub(super) late: bool,
}

impl<T> Channel<T> {
    fn new() -> Self {
        Channel {
            queue: VecDeque::new(),
            age: 0,
            late: false,
        }
    }

    fn push(&mut self, item: T) {
        if self.queue.is_empty() {
            self.age = 0;
            self.late = false;
        }
        self.queue.push_back(item);
    }

    /// The head, and whether it was late.
    fn pop(&mut self) -> Option<(T, bool)> {
        let item = self.queue.pop_front()?;
        let late = self.late;
        self.age = 0;
        self.late = false;
        Some((item, late))
    }

    /// Whether the head may wait one more database tick.
    fn on_time(&self, setup: &Setup) -> bool {
        self.queue.is_empty() || self.age < setup.bound(self.late)
    }

    fn clear(&mut self) {
        self.queue.clear();
        self.age = 0;
        self.late = false;
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
    /// Alive and not finished: its clock matters.
    pub(super) fn live(&self) -> bool {
        self.lease.as_ref().is_some_and(|l| !l.is_finished())
    }

    /// Alive, not finished, not paused: it can act.
    pub(super) fn running(&self) -> bool {
        self.live() && !self.paused
    }

    /// Believes it leads and can act.
    fn leading(&self) -> bool {
        self.running()
            && self
                .lease
                .as_ref()
                .is_some_and(|l| l.leadership().is_leader())
    }

    fn due(&self) -> bool {
        let now = Instant::from_nanos(self.clock * TICK.as_nanos() as u64);
        self.lease
            .as_ref()
            .and_then(LeaseState::poll_timeout)
            .is_some_and(|t| t <= now)
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.saturating_mul(TICK.as_nanos() as u64))
    }
}

/// The whole model at one point of a path.
#[derive(Clone, Debug)]
pub(crate) struct World {
    pub(super) db: ModelDb,
    /// Database (real) time in ticks.
    pub(super) db_clock: u64,
    pub(super) nodes: Vec<Node>,
    /// A statement that strayed on the server.
    pub(super) stray: Option<Request>,
    pub(super) faults: u32,
    /// Database ticks without a leader since the last fault.
    pub(super) leaderless: u32,
    /// The epoch of the latest leadership.
    pub(super) last_epoch: Option<Epoch>,
    /// No step taken yet (`db:orphan` is enabled). Left out of the
    /// fingerprint: a later state that looks the same is the initial one
    /// shifted in time, and the initial one is explored first.
    pub(super) fresh: bool,
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

    fn note(&mut self, line: impl FnOnce() -> String) {
        if self.enabled {
            self.lines.push(line());
        }
    }
}

/// The holder of the orphan row (`Bounds::orphan`): no contender's.
const ORPHAN: &str = "n9.0";

/// The node name twins share (`Bounds::twins`).
const TWIN: &str = "twin";

/// Node `node`'s holder id in its `incarnation`: `n0.1`, or for twins
/// [`HolderId::incarnation`] of their shared name with a nonce that tells
/// the processes apart (`twin#001001`).
fn holder_id(setup: &Setup, node: usize, incarnation: u32) -> Result<HolderId, ConfigError> {
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

/// `(node, incarnation)` of a holder id the checker made.
pub(super) fn parse_holder(holder: &str) -> Option<(usize, u32)> {
    if let Some(nonce) = holder.strip_prefix(TWIN).and_then(|h| h.strip_prefix('#')) {
        let nonce = u32::from_str_radix(nonce, 16).ok()?;
        return Some(((nonce >> 12) as usize, nonce & 0xfff));
    }
    let (node, inc) = holder.strip_prefix('n')?.split_once('.')?;
    Some((node.parse().ok()?, inc.parse().ok()?))
}

fn violation(property: Property, detail: String) -> Violation {
    Violation {
        property,
        detail,
        trace: String::new(),
        depth: 0,
    }
}

impl World {
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
        #[allow(unused_mut)]
        let mut db = ModelDb::new();
        #[cfg(feature = "mutants")]
        db.set_mutation(setup.bounds.mutation);
        Ok(World {
            db,
            db_clock: 0,
            nodes,
            stray: None,
            faults: 0,
            leaderless: 0,
            last_epoch: None,
            fresh: true,
        })
    }

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

    /// Whether the step is enabled here.
    pub(crate) fn enabled(&self, setup: &Setup, step: Step) -> bool {
        let mut steps = Vec::new();
        self.steps(setup, &mut steps);
        steps.contains(&step)
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

    /// Mutual exclusion and validity, on the state reached.
    fn check_state(&self, setup: &Setup) -> Option<Violation> {
        let leaders: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].leading())
            .collect();
        if let [a, b, ..] = leaders[..] {
            return Some(violation(
                Property::MutualExclusion,
                format!(
                    "n{a} and n{b} both lead at db tick {} (epochs {:?} and {:?})",
                    self.db_clock,
                    self.leader_epoch(a),
                    self.leader_epoch(b)
                ),
            ));
        }
        let now_ms = DB_EPOCH_MS + self.db_clock as i64;
        for &i in &leaders {
            let n = &self.nodes[i];
            let Some(epoch) = self.leader_epoch(i) else {
                continue;
            };
            let row = self.db.row(LEASE);
            let valid = row.is_some_and(|row| {
                row.holder.as_deref() == Some(n.holder.as_str())
                    && (row.epoch == epoch.to_i64() || n.fenced_out)
                    && row.expires_at > now_ms
            });
            if !valid {
                let mut detail = format!(
                    "n{i} ({}) leads at epoch {epoch} at db tick {}, but the row is ",
                    n.holder, self.db_clock
                );
                match row {
                    Some(r) => {
                        let _ = write!(
                            detail,
                            "({}, epoch {}, expires at db tick {})",
                            r.holder.as_deref().unwrap_or("free"),
                            r.epoch,
                            r.expires_at - DB_EPOCH_MS
                        );
                    }
                    None => detail.push_str("absent"),
                }
                return Some(violation(Property::Validity, detail));
            }
        }
        self.check_stop_lead(setup)
    }

    /// The stop lead `g` (`Config::stop_lead`): a node's work is stopped
    /// no later than its local `deadline − g` (at that very tick only
    /// while its timer, due then, has yet to run), and while the work runs
    /// the row is the node's with more than `g` database ticks left. A
    /// paused process's work is frozen with it; its timer runs first on
    /// resuming. With `g = 0` this is the deadline itself and validity.
    fn check_stop_lead(&self, setup: &Setup) -> Option<Violation> {
        let g = u64::from(setup.bounds.stop_lead_ticks);
        let now_ms = DB_EPOCH_MS + self.db_clock as i64;
        for (i, n) in self.nodes.iter().enumerate() {
            let (Some(epoch), true) = (n.work, n.running()) else {
                continue;
            };
            let deadline = n.lease.as_ref().and_then(LeaseState::leader_deadline);
            if let Some(deadline) = deadline {
                let stop = (deadline.as_nanos() / TICK.as_nanos() as u64).saturating_sub(g);
                if n.clock > stop || (n.clock == stop && !n.due()) {
                    return Some(violation(
                        Property::StopLead,
                        format!(
                            "n{i} runs the work of epoch {epoch} at local tick {}, its deadline − stop lead being {stop}",
                            n.clock
                        ),
                    ));
                }
            }
            let row = self.db.row(LEASE);
            let left = row
                .filter(|r| r.holder.as_deref() == Some(n.holder.as_str()))
                .map(|r| r.expires_at - now_ms);
            if left.is_none_or(|left| left <= g as i64) {
                return Some(violation(
                    Property::StopLead,
                    format!(
                        "n{i} runs the work of epoch {epoch} at db tick {} with {} left on its row (stop lead {g})",
                        self.db_clock,
                        left.map_or("nothing".to_string(), |l| format!("{l} ticks"))
                    ),
                ));
            }
        }
        None
    }

    fn leader_epoch(&self, i: usize) -> Option<Epoch> {
        self.nodes[i]
            .lease
            .as_ref()
            .and_then(|l| l.leadership().leader_epoch())
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

/// Every live anchor within the drift of the new skew, and the skew itself
/// within the drift of the database: the drift relation (see `check`).
fn clock_fits(n: &Node, skew: i32, drift: i32) -> bool {
    let near = |a: Option<i32>| a.is_none_or(|a| (a - skew).abs() <= drift);
    skew.abs() <= drift && near(n.anchor_flight) && near(n.anchor_term)
}

fn new_lease(setup: &Setup, holder: HolderId, now: Instant) -> Result<LeaseState, ConfigError> {
    let config = setup.bounds.lease_config(holder)?;
    #[allow(unused_mut)]
    let mut lease = LeaseState::new(config, now)?;
    #[cfg(feature = "mutants")]
    lease.set_mutation(setup.bounds.mutation);
    Ok(lease)
}
