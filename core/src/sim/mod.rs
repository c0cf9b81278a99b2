//! Deterministic simulation (feature `sim`): N `LeaseState`s on virtual
//! time, each with its own drifting clock, talking to a model database
//! through a network that delays, loses and reorders messages, under
//! scheduled crashes, restarts, pauses, partitions and shutdowns.
//!
//! # The model
//!
//! - **Real time** is virtual nanoseconds. The database clock is the
//!   reference: it reads real time in whole milliseconds (plus a fixed
//!   Unix-like offset), and never steps.
//! - **Node clocks** run at `1 + ppm/10⁶` with `|ppm|` strictly inside
//!   ρ = drift/ttl (DESIGN §6: "clock rates within ρ").
//! - **The network** delays each message uniformly in
//!   `[delay_min, delay_max]`, with probability `tail` far longer (up to
//!   twice the request timeout, so requests time out and late replies
//!   arrive), and loses it with probability `loss`. Messages of one node's
//!   connection stay in order (TCP); messages of different nodes interleave
//!   freely, so the database sees contenders in any order. A request the
//!   node abandoned (timeout → `Cancel`) and that has not reached the
//!   database yet is dropped there: the driver cancels it on the server.
//! - **Faults**: see [`Fault`].
//!
//! Everything random comes from the seed: same configuration, same trace.

mod clock;
mod fault;
mod model;
mod rng;
pub mod set;
mod trace;

pub use clock::DriftingClock;
pub use fault::{parse_duration, Fault, FaultKind, FaultParseError, Target};
pub use model::{ModelDb, ModelReplica, ModelRow};
pub use rng::SimRng;
pub use trace::{Handover, Happening, LeadershipInterval, Trace, TraceEntry, Violation};

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use crate::config::Config;
use crate::error::ConfigError;
use crate::names::{HolderId, LeaseName};
use crate::protocol::{Command, Failure, Operation, Reply, RequestId};
use crate::rank::Rank;
use crate::sql::{Dialect, Statements};
use crate::state::LeaseState;
use crate::time::{nanos, Instant};

/// The database clock's reading at real time zero, in milliseconds (an
/// arbitrary date in 2026, so expiries look like real timestamps).
pub const DB_EPOCH_MS: i64 = 1_780_000_000_000;

/// One simulation's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Number of contenders.
    pub nodes: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// Lease ttl; the other timings follow DESIGN §4 defaults from it.
    pub ttl: Duration,
    /// Shortest one-way message delay.
    pub delay_min: Duration,
    /// Longest ordinary one-way message delay.
    pub delay_max: Duration,
    /// Probability (per million messages) of a long-tail delay.
    pub tail_per_million: u32,
    /// Probability (per million messages) of losing a message.
    pub loss_per_million: u32,
    /// Whether releases notify the other contenders (PostgreSQL LISTEN).
    pub notify: bool,
    /// How long to run, in real (virtual) time.
    pub duration: Duration,
    /// The faults, by time.
    pub faults: Vec<Fault>,
    /// Every node's stop lead `g` ([`Config::stop_lead`]); zero by default.
    pub stop_lead: Duration,
    /// When set, every node runs under this one node name, its holder ids
    /// made by [`HolderId::incarnation`] (`name#xxxxxx`, a distinct
    /// incarnation per node and per start), as when operators give several
    /// processes, or a process and its restart, the same name. When unset
    /// (the default) node `n` is `n{n}`, restarted `n{n}.{k}`.
    pub node_name: Option<String>,
    /// Node `n`'s rank among candidates (DESIGN §3 "Preferred holders"),
    /// `ranks[n]`; the lowest rank for nodes past the end (the default:
    /// nobody announces).
    pub ranks: Vec<Rank>,
    /// Every node has a health probe (DESIGN §5 "Work that fails"), which
    /// reports healthy as the node starts, so healthy nodes announce
    /// themselves; `unhealthy` faults fail it for a while.
    pub probes: bool,
    /// How long a node whose work escalated (an `escalate` fault) stands
    /// aside.
    pub cool_down: Duration,
}

impl SimConfig {
    /// `nodes` contenders, ttl 10 s, 1–5 ms delays, no loss, no faults,
    /// one minute.
    pub fn new(nodes: usize, seed: u64) -> Self {
        SimConfig {
            nodes,
            seed,
            ttl: Duration::from_secs(10),
            delay_min: Duration::from_millis(1),
            delay_max: Duration::from_millis(5),
            tail_per_million: 0,
            loss_per_million: 0,
            notify: false,
            duration: Duration::from_secs(60),
            faults: Vec::new(),
            stop_lead: Duration::ZERO,
            node_name: None,
            ranks: Vec::new(),
            probes: false,
            cool_down: Duration::from_secs(60),
        }
    }

    /// The lease configuration node `n` runs with, as holder `holder`.
    pub fn lease_config(&self, holder: HolderId, seed: u64) -> Config {
        let mut config = Config::with_ttl(
            LeaseName::new("sim").expect("a valid literal name"),
            holder,
            self.ttl,
        );
        config.seed = seed;
        config.stop_lead = self.stop_lead;
        config
    }

    /// How long a hand-over reserves the row ([`Config::reservation`]).
    pub fn reservation(&self) -> Duration {
        Config::with_ttl(
            LeaseName::new("sim").expect("a valid literal name"),
            HolderId::new("n").expect("a valid literal id"),
            self.ttl,
        )
        .reservation()
    }

    /// The holder id of node `node` in its `incarnation`-th start (from 1).
    pub fn holder(&self, node: usize, incarnation: u32) -> Result<HolderId, ConfigError> {
        match &self.node_name {
            Some(name) => {
                HolderId::incarnation(name, ((node as u64) << 12) | u64::from(incarnation & 0xfff))
            }
            None if incarnation <= 1 => HolderId::new(&format!("n{node}")),
            None => HolderId::new(&format!("n{node}.{incarnation}")),
        }
    }
}

#[derive(Clone, Debug)]
enum Input {
    Reply(RequestId, Reply),
    Notice,
}

#[derive(Clone, Debug)]
enum Event {
    Wake {
        node: usize,
        incarnation: u32,
    },
    AtDb {
        node: usize,
        holder: HolderId,
        request: RequestId,
        operation: Operation,
        /// A hand-over's reservation (`LeaseState::successor`).
        successor: Option<HolderId>,
        /// An announcement's text (`LeaseState::announcement`).
        announcement: Option<String>,
    },
    AtNode {
        node: usize,
        incarnation: u32,
        input: Input,
    },
    Fault(usize),
    /// The standby copies the rows for failover fault `i`: the writes
    /// after this are the ones that fault loses.
    Replicate(usize),
    Resume {
        node: usize,
    },
    /// An `unhealthy` fault's probe passes again.
    Healthy {
        node: usize,
        incarnation: u32,
    },
}

struct Node {
    state: Option<LeaseState>,
    holder: HolderId,
    incarnation: u32,
    clock: DriftingClock,
    paused: bool,
    pending: VecDeque<Input>,
    partitioned_until: u64,
    wake_at: Option<u64>,
    abandoned_upto: u64,
    leading: Option<crate::names::Epoch>,
    /// An `unhealthy` fault ended while the node was paused: it hears
    /// that its probe passes when it resumes.
    healthy_on_resume: bool,
    /// The term this node led when the database failed over: its row may
    /// be gone, so validity is not checked for it (mutual exclusion and
    /// fencing still are).
    term_before_failover: Option<crate::names::Epoch>,
    /// Consecutive wake-ups at one instant that changed nothing.
    idle_wakes: u32,
    fifo_to_db: u64,
    fifo_to_node: u64,
}

/// A running simulation. [`Simulation::run`] drives it to the end and
/// returns the [`Trace`].
pub struct Simulation {
    config: SimConfig,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: Vec<Option<Event>>,
    nodes: Vec<Node>,
    db: ModelDb,
    statements: Statements,
    rng: SimRng,
    trace: Vec<TraceEntry>,
    down_order: Vec<usize>,
    /// Per fault: the replica a failover fault comes back with, once taken.
    replicas: Vec<Option<ModelReplica>>,
    /// A bug planted in every node's machine (feature `mutants`).
    #[cfg(feature = "mutants")]
    node_mutation: crate::state::Mutation,
}

impl Simulation {
    /// Sets up the cluster; fails if the lease configuration derived from
    /// `config.ttl` cannot work.
    pub fn new(config: SimConfig) -> Result<Self, ConfigError> {
        let probe = config.lease_config(HolderId::new("probe")?, 0);
        probe.validate()?;
        let mut rng = SimRng::new(config.seed);
        // Clock rates strictly inside ρ: at most 90% of the allowance.
        let rho_ppm = (probe.drift.as_nanos() * 1_000_000 / probe.ttl.as_nanos().max(1)) as u64;
        let max_ppm = rho_ppm * 9 / 10;
        let mut sim = Simulation {
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            nodes: Vec::with_capacity(config.nodes),
            db: ModelDb::new(),
            statements: Statements::new(Dialect::Sqlite, &crate::names::TableName::default()),
            trace: Vec::new(),
            down_order: Vec::new(),
            replicas: Vec::new(),
            rng: SimRng::new(0),
            #[cfg(feature = "mutants")]
            node_mutation: crate::state::Mutation::None,
            config,
        };
        for n in 0..sim.config.nodes {
            let ppm = rng.range(0, 2 * max_ppm) as i64 - max_ppm as i64;
            sim.nodes.push(Node {
                state: None,
                holder: sim.config.holder(n, 1)?,
                incarnation: 0,
                clock: DriftingClock::new(ppm),
                paused: false,
                pending: VecDeque::new(),
                partitioned_until: 0,
                wake_at: None,
                abandoned_upto: 0,
                leading: None,
                healthy_on_resume: false,
                term_before_failover: None,
                idle_wakes: 0,
                fifo_to_db: 0,
                fifo_to_node: 0,
            });
        }
        sim.rng = rng;
        for n in 0..sim.config.nodes {
            sim.start_node(n)?;
        }
        sim.replicas = vec![None; sim.config.faults.len()];
        for (i, fault) in sim.config.faults.clone().iter().enumerate() {
            if let FaultKind::Failover(lag) = fault.kind {
                sim.schedule(nanos(fault.at.saturating_sub(lag)), Event::Replicate(i));
            }
            sim.schedule(nanos(fault.at), Event::Fault(i));
        }
        Ok(sim)
    }

    /// Runs to `config.duration` and returns what happened.
    pub fn run(mut self) -> Trace {
        while self.step() {}
        Trace {
            entries: self.trace,
            end: self.now,
            nodes: self.config.nodes,
        }
    }

    /// Processes the next event; false once the run is over.
    pub fn step(&mut self) -> bool {
        let end = nanos(self.config.duration);
        let Some(Reverse((at, _, slot))) = self.queue.pop() else {
            self.now = end;
            return false;
        };
        if at > end {
            self.now = end;
            return false;
        }
        self.now = at;
        let Some(event) = self.events[slot].take() else {
            return true;
        };
        match event {
            Event::Wake { node, incarnation } => {
                let n = &mut self.nodes[node];
                if n.incarnation == incarnation && n.wake_at == Some(at) && !n.paused {
                    n.wake_at = None;
                    let now = self.local_now(node);
                    let before = self.trace.len() as u64;
                    if let Some(state) = self.nodes[node].state.as_mut() {
                        state.handle_timeout(now);
                    }
                    self.after_input(node);
                    self.check_progress(node, before);
                }
            }
            Event::AtDb {
                node,
                holder,
                request,
                operation,
                successor,
                announcement,
            } => self.at_db(node, holder, request, operation, successor, announcement),
            Event::AtNode {
                node,
                incarnation,
                input,
            } => {
                let n = &mut self.nodes[node];
                if n.incarnation != incarnation || n.state.is_none() {
                    // The process that asked is gone.
                } else if self.now < n.partitioned_until {
                    if let Input::Reply(request, _) = input {
                        self.record(
                            node,
                            Happening::Lost {
                                request: request.0,
                                cause: "partition",
                            },
                        );
                    }
                } else if n.paused {
                    n.pending.push_back(input);
                } else {
                    self.deliver(node, input);
                }
            }
            Event::Fault(i) => match self.config.faults[i].kind {
                FaultKind::Failover(lag) => self.fail_over(i, lag),
                _ => self.fault(self.config.faults[i]),
            },
            Event::Replicate(i) => self.replicas[i] = Some(self.db.replica()),
            Event::Resume { node } => self.resume(node),
            Event::Healthy { node, incarnation } => {
                if self.nodes[node].incarnation == incarnation {
                    if self.nodes[node].paused {
                        // Its probe passed; the frozen process hears it
                        // when it resumes.
                        self.nodes[node].healthy_on_resume = true;
                    } else {
                        self.set_health(node, true);
                    }
                }
            }
        }
        self.check_validity();
        true
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.events.push(Some(event));
        self.queue
            .push(Reverse((at, self.seq, self.events.len() - 1)));
    }

    fn record(&mut self, node: usize, what: Happening) {
        self.trace.push(TraceEntry {
            at: self.now,
            node,
            what,
        });
    }

    fn local_now(&self, node: usize) -> Instant {
        Instant::from_nanos(self.nodes[node].clock.local(self.now))
    }

    fn db_now_ms(&self) -> i64 {
        DB_EPOCH_MS + (self.now / 1_000_000) as i64
    }

    fn delay(&mut self) -> u64 {
        let lo = nanos(self.config.delay_min);
        let hi = nanos(self.config.delay_max).max(lo);
        if self.rng.chance(self.config.tail_per_million) {
            let timeout = nanos(self.config.ttl / 4);
            self.rng.range(hi, hi + 2 * timeout)
        } else {
            self.rng.range(lo, hi)
        }
    }

    fn start_node(&mut self, node: usize) -> Result<(), ConfigError> {
        let inc = self.nodes[node].incarnation + 1;
        let holder = self.config.holder(node, inc)?;
        let seed = self.config.seed ^ ((node as u64) << 32) ^ u64::from(inc);
        let mut config = self.config.lease_config(holder.clone(), seed);
        config.rank = self.config.ranks.get(node).cloned().unwrap_or_default();
        let n = &mut self.nodes[node];
        n.incarnation = inc;
        n.holder = holder.clone();
        n.paused = false;
        n.pending.clear();
        n.wake_at = None;
        n.leading = None;
        n.healthy_on_resume = false;
        n.abandoned_upto = 0;
        let now = Instant::from_nanos(n.clock.local(self.now));
        n.state = Some(LeaseState::new(config, now)?);
        #[cfg(feature = "mutants")]
        if let Some(state) = n.state.as_mut() {
            state.set_mutation(self.node_mutation);
        }
        self.record(
            node,
            Happening::Started {
                holder: holder.to_string(),
            },
        );
        if let Some(state) = self.nodes[node].state.as_mut() {
            if self.config.probes {
                state.handle_health(now, true);
            }
            state.handle_timeout(now);
        }
        self.after_input(node);
        Ok(())
    }

    /// Node `node`'s probe says `healthy` (never called while it is
    /// paused: a probe that passes then is heard at the resume).
    fn set_health(&mut self, node: usize, healthy: bool) {
        if self.nodes[node].state.is_none() {
            return;
        }
        self.record(node, Happening::Health { healthy });
        let now = self.local_now(node);
        if let Some(state) = self.nodes[node].state.as_mut() {
            state.handle_health(now, healthy);
        }
        self.after_input(node);
    }

    fn deliver(&mut self, node: usize, input: Input) {
        let now = self.local_now(node);
        let Some(state) = self.nodes[node].state.as_mut() else {
            return;
        };
        match input {
            Input::Reply(request, reply) => state.handle_reply(now, request, reply),
            Input::Notice => state.handle_release_notice(now),
        }
        self.after_input(node);
    }

    /// Drains the node's commands, carrying each out, then re-arms its timer.
    fn after_input(&mut self, node: usize) {
        while let Some(command) = self.nodes[node]
            .state
            .as_mut()
            .and_then(LeaseState::poll_command)
        {
            match command {
                Command::Execute { request, operation } => {
                    self.record(
                        node,
                        Happening::Sent {
                            request: request.0,
                            operation,
                        },
                    );
                    self.send_to_db(node, request, operation);
                }
                Command::Cancel { request } => {
                    self.nodes[node].abandoned_upto = request.0;
                    self.record(node, Happening::Abandoned { request: request.0 });
                }
                Command::StartWork { epoch } => {
                    self.nodes[node].leading = Some(epoch);
                    self.record(node, Happening::Leader { epoch });
                }
                Command::StopWork { epoch, reason } => {
                    self.nodes[node].leading = None;
                    self.record(node, Happening::Follower { epoch, reason });
                }
                Command::Publish(leadership) => self.record(node, Happening::Published(leadership)),
                // The simulated database notifies (PostgreSQL's model).
                Command::WatchChanges(_) => {}
                Command::Finished => {
                    self.record(node, Happening::Finished);
                    self.nodes[node].state = None;
                    self.down_order.push(node);
                }
            }
        }
        self.arm_timer(node);
    }

    /// A machine woken at its own `poll_timeout` must make progress: asking
    /// again for the same instant with nothing done would spin a driver's
    /// loop forever. After 100 such wake-ups in a row the node is recorded
    /// as stuck and its timer disarmed.
    fn check_progress(&mut self, node: usize, trace_len_before: u64) {
        let n = &mut self.nodes[node];
        let idle = self.trace.len() as u64 == trace_len_before && n.wake_at == Some(self.now);
        n.idle_wakes = if idle { n.idle_wakes + 1 } else { 0 };
        if n.idle_wakes >= 100 {
            n.wake_at = None;
            n.idle_wakes = 0;
            n.state = None;
            self.record(node, Happening::Stuck);
        }
    }

    fn arm_timer(&mut self, node: usize) {
        let n = &self.nodes[node];
        let Some(local) = n.state.as_ref().and_then(LeaseState::poll_timeout) else {
            return;
        };
        let at = n.clock.real_at(local.as_nanos()).max(self.now);
        if n.wake_at == Some(at) {
            return;
        }
        let incarnation = n.incarnation;
        self.nodes[node].wake_at = Some(at);
        self.schedule(at, Event::Wake { node, incarnation });
    }

    fn send_to_db(&mut self, node: usize, request: RequestId, operation: Operation) {
        if self.now < self.nodes[node].partitioned_until {
            self.record(
                node,
                Happening::Lost {
                    request: request.0,
                    cause: "partition",
                },
            );
            return;
        }
        if self.rng.chance(self.config.loss_per_million) {
            self.record(
                node,
                Happening::Lost {
                    request: request.0,
                    cause: "loss",
                },
            );
            return;
        }
        let at = (self.now + self.delay()).max(self.nodes[node].fifo_to_db);
        self.nodes[node].fifo_to_db = at;
        let holder = self.nodes[node].holder.clone();
        let state = self.nodes[node].state.as_ref();
        let successor = state.and_then(|state| state.successor().cloned());
        let announcement = state.and_then(|state| state.announcement().map(str::to_string));
        self.schedule(
            at,
            Event::AtDb {
                node,
                holder,
                request,
                operation,
                successor,
                announcement,
            },
        );
    }

    fn at_db(
        &mut self,
        node: usize,
        holder: HolderId,
        request: RequestId,
        operation: Operation,
        successor: Option<HolderId>,
        announcement: Option<String>,
    ) {
        let n = &self.nodes[node];
        let same_process = n.holder == holder;
        if self.now < n.partitioned_until && same_process {
            self.record(
                node,
                Happening::Lost {
                    request: request.0,
                    cause: "partition",
                },
            );
            return;
        }
        if same_process && request.0 <= n.abandoned_upto {
            self.record(
                node,
                Happening::Lost {
                    request: request.0,
                    cause: "cancelled",
                },
            );
            return;
        }
        let lease = "sim";
        let ttl = i64::try_from(self.config.ttl.as_millis()).unwrap_or(i64::MAX);
        let now_ms = self.db_now_ms();
        let rows = match operation {
            Operation::Acquire => self.db.acquire(lease, holder.as_str(), ttl, now_ms),
            Operation::Renew { epoch } => self.db.renew(lease, holder.as_str(), epoch, ttl, now_ms),
            Operation::Release { epoch } => self.db.release(lease, holder.as_str(), epoch, now_ms),
            Operation::HandOver { epoch } => {
                let reservation =
                    i64::try_from(self.config.reservation().as_millis()).unwrap_or(i64::MAX);
                let to = successor.as_ref().map_or("", HolderId::as_str);
                self.db
                    .hand_over(lease, holder.as_str(), epoch, to, reservation, now_ms)
            }
            Operation::Announce => {
                let life = i64::try_from(self.config.reservation().as_millis()).unwrap_or(i64::MAX);
                let text = announcement.as_deref().unwrap_or("");
                self.db.announce(lease, text, life, now_ms);
                Vec::new()
            }
        };
        let reply = self
            .statements
            .decode_reply(operation, &holder, &rows)
            .unwrap_or(Reply::Failed(Failure::Fatal));
        self.record(
            node,
            Happening::Executed {
                request: request.0,
                operation,
                reply: reply.clone(),
            },
        );
        if self.config.notify
            && matches!(
                (operation, &reply),
                (
                    Operation::Release { .. } | Operation::HandOver { .. },
                    Reply::Accepted
                )
            )
        {
            for other in 0..self.nodes.len() {
                if other != node {
                    self.reply_to(other, Input::Notice);
                }
            }
        }
        if same_process {
            self.reply_to(node, Input::Reply(request, reply));
        }
    }

    fn reply_to(&mut self, node: usize, input: Input) {
        if self.rng.chance(self.config.loss_per_million) {
            if let Input::Reply(request, _) = input {
                self.record(
                    node,
                    Happening::Lost {
                        request: request.0,
                        cause: "loss",
                    },
                );
            }
            return;
        }
        let at = (self.now + self.delay()).max(self.nodes[node].fifo_to_node);
        self.nodes[node].fifo_to_node = at;
        let incarnation = self.nodes[node].incarnation;
        self.schedule(
            at,
            Event::AtNode {
                node,
                incarnation,
                input,
            },
        );
    }

    fn target(&self, fault: &Fault) -> Option<usize> {
        match (fault.target, fault.kind) {
            (Target::Node(n), _) if n < self.nodes.len() => Some(n),
            (Target::Node(_), _) => None,
            (Target::Leader, FaultKind::Restart) => self
                .down_order
                .iter()
                .rev()
                .copied()
                .find(|&n| self.nodes[n].state.is_none()),
            (Target::Leader, _) => (0..self.nodes.len())
                .find(|&n| self.nodes[n].leading.is_some() && !self.nodes[n].paused),
        }
    }

    fn fault(&mut self, fault: Fault) {
        let Some(node) = self.target(&fault) else {
            self.record(
                0,
                Happening::FaultSkipped {
                    fault: fault.to_string(),
                },
            );
            return;
        };
        let running = self.nodes[node].state.is_some();
        match fault.kind {
            FaultKind::Crash if running => {
                let n = &mut self.nodes[node];
                n.state = None;
                n.leading = None;
                n.healthy_on_resume = false;
                n.paused = false;
                n.pending.clear();
                n.incarnation += 1;
                self.down_order.push(node);
                self.record(node, Happening::Crashed);
            }
            FaultKind::Restart if !running => {
                // A restart after a crash bumped the incarnation already;
                // start_node bumps it again, which is harmless.
                let _ = self.start_node(node);
            }
            FaultKind::Shutdown if running && !self.nodes[node].paused => {
                self.record(node, Happening::ShutdownBegun);
                let now = self.local_now(node);
                if let Some(state) = self.nodes[node].state.as_mut() {
                    state.handle_shutdown(now);
                }
                self.after_input(node);
            }
            FaultKind::Pause(d) if running && !self.nodes[node].paused => {
                self.nodes[node].paused = true;
                self.record(node, Happening::Paused);
                self.schedule(self.now + nanos(d), Event::Resume { node });
            }
            FaultKind::Partition(d) if running => {
                let until = self.now + nanos(d);
                self.nodes[node].partitioned_until = until;
                self.record(node, Happening::Partitioned { until });
            }
            FaultKind::HandOver if running && !self.nodes[node].paused => {
                let next = (node + 1) % self.nodes.len();
                let to = HolderId::reserved_for(self.nodes[next].holder.node()).ok();
                self.record(
                    node,
                    Happening::HandOverBegun {
                        to: to.as_ref().map(|h| h.to_string()),
                    },
                );
                let now = self.local_now(node);
                if let Some(state) = self.nodes[node].state.as_mut() {
                    state.handle_hand_over(now, to);
                }
                self.after_input(node);
            }
            FaultKind::Unhealthy(d) if running && !self.nodes[node].paused => {
                self.set_health(node, false);
                let incarnation = self.nodes[node].incarnation;
                self.schedule(self.now + nanos(d), Event::Healthy { node, incarnation });
            }
            FaultKind::Escalate if running && !self.nodes[node].paused => {
                self.record(node, Happening::Escalated);
                let now = self.local_now(node);
                let cool_down = self.config.cool_down;
                if let Some(state) = self.nodes[node].state.as_mut() {
                    state.handle_work_escalated(now, None, cool_down);
                }
                self.after_input(node);
            }
            _ => self.record(
                node,
                Happening::FaultSkipped {
                    fault: fault.to_string(),
                },
            ),
        }
    }

    /// Failover fault `i`: the database comes back with the replica taken
    /// `lag` earlier, under a new incarnation. Whoever led keeps believing
    /// it does until its renewal is refused or its deadline passes.
    fn fail_over(&mut self, i: usize, lag: Duration) {
        let replica = self.replicas[i].take().unwrap_or_default();
        self.db.fail_over(replica);
        for n in &mut self.nodes {
            n.term_before_failover = n.leading;
        }
        self.record(0, Happening::ServerReplaced { lost: nanos(lag) });
    }

    /// Plants a bug in the model database (feature `mutants`): the
    /// checker's and the simulator's own tests show they find it.
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn set_db_mutation(&mut self, mutation: crate::state::Mutation) {
        self.db.set_mutation(mutation);
    }

    /// Plants a bug in every node's machine, from its next start on
    /// (feature `mutants`), as [`Simulation::set_db_mutation`] does in
    /// the database: the simulator's own tests show its properties catch
    /// it. Call it before [`Simulation::run`].
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn set_node_mutation(&mut self, mutation: crate::state::Mutation) {
        self.node_mutation = mutation;
        for node in &mut self.nodes {
            if let Some(state) = node.state.as_mut() {
                state.set_mutation(mutation);
            }
        }
    }

    fn resume(&mut self, node: usize) {
        if !self.nodes[node].paused {
            return;
        }
        self.nodes[node].paused = false;
        self.record(node, Happening::Resumed);
        if std::mem::take(&mut self.nodes[node].healthy_on_resume) {
            self.set_health(node, true);
        }
        // The thawed process finds its timer due and its socket full: it
        // runs the timer first (a real event loop's order is arbitrary; the
        // machine checks its deadline on every input either way).
        let now = self.local_now(node);
        if let Some(state) = self.nodes[node].state.as_mut() {
            state.handle_timeout(now);
        }
        self.after_input(node);
        while let Some(input) = self.nodes[node].pending.pop_front() {
            self.deliver(node, input);
        }
    }

    /// Validity: every running leader's row is (that node, its epoch),
    /// unexpired. A paused leader is not checked while frozen: it cannot
    /// act, and it checks its deadline first when it thaws.
    fn check_validity(&mut self) {
        let now_ms = self.db_now_ms();
        for node in 0..self.nodes.len() {
            let n = &self.nodes[node];
            let (Some(epoch), false) = (n.leading, n.paused) else {
                continue;
            };
            if n.term_before_failover == Some(epoch) {
                continue;
            }
            let row = self.db.row("sim");
            let valid = row.is_some_and(|row| {
                row.holder.as_deref() == Some(n.holder.as_str())
                    && row.epoch == epoch.to_i64()
                    && row.expires_at > now_ms
            });
            if !valid {
                let row = format!("{row:?} at db time {now_ms}");
                self.record(node, Happening::Invalid { epoch, row });
            }
        }
    }
}
