//! Simulation of lease sets (DESIGN §9): several nodes, each a
//! [`LeaseSet`] over the same leases, on virtual time against the model
//! database, with network delay, late joins, crashes, shutdowns, pauses,
//! an operator's forced releases and release notifications.
//!
//! After every event the simulator checks safety on the database's truth:
//! a node whose work runs for a lease holds that lease's row at the work's
//! epoch, unexpired, so no lease is ever worked by two nodes. Two
//! exceptions, both what DESIGN promises and no more: a paused node's work
//! is frozen (it cannot act, and its set checks its deadline first when it
//! thaws), and a term an operator forced free (`release --force`) may run
//! on until the deadline its holder had then, fenced out from the release
//! on (DESIGN §4b "A term taken away is heard at once"). It samples
//! the share once per interval for the property tests (every lease held,
//! shares within one, no lease moving without cause).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use super::{ModelDb, SimRng, DB_EPOCH_MS};
use crate::config::SetConfig;
use crate::error::ConfigError;
use crate::names::TableName;
use crate::names::{Epoch, HolderId, LeaseName};
use crate::protocol::{Failure, Reply, RequestId};
use crate::set::{Batch, BatchKind, BatchReply, LeaseSet, SetCommand};
use crate::sql::{Dialect, Statements};
use crate::time::Instant;

/// One lease-set simulation's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetSimConfig {
    /// Number of nodes.
    pub nodes: usize,
    /// Number of leases (`s0` … `s{N-1}`), all contended by every node.
    pub leases: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// Lease ttl.
    pub ttl: Duration,
    /// Renew and survey interval.
    pub interval: Duration,
    /// One-way network delay, uniform in this range.
    pub delay: (Duration, Duration),
    /// When each node starts (default: all within the first interval).
    pub starts: Vec<Duration>,
    /// Crashes: (when, node). A crashed node vanishes without releasing.
    pub crashes: Vec<(Duration, usize)>,
    /// Clean shutdowns: (when, node).
    pub shutdowns: Vec<(Duration, usize)>,
    /// Pauses: (when, node, for how long). The process is frozen (SIGSTOP):
    /// its timers, replies, notices and requests wait until it resumes,
    /// while the database and the other nodes go on.
    pub pauses: Vec<(Duration, usize, Duration)>,
    /// An operator's forced releases: (when, lease index)
    /// (`picolease release --force`, [`ModelDb::force_release`]), with a
    /// release notice to every running node when `notify` is on.
    pub forced_releases: Vec<(Duration, usize)>,
    /// Planned handovers: (when, node, lease index, successor node): the
    /// node hands the lease over to the successor's node if it leads it
    /// then ([`LeaseSet::handle_hand_over`]).
    pub hand_overs: Vec<(Duration, usize, usize, usize)>,
    /// "Hand over, then exit": (when, node) ([`LeaseSet::handle_leave`]).
    pub leaves: Vec<(Duration, usize)>,
    /// Per node: its priority ([`SetConfig::rank`]); a node missing here
    /// has priority 0. The share is split among the running nodes of the
    /// highest priority (DESIGN §9 "Preferred members").
    pub priorities: Vec<u32>,
    /// Failing health probes: (from, node, for how long). The node's probe
    /// says unhealthy at `from` and healthy again after the duration
    /// ([`LeaseSet::handle_health`], DESIGN §9 "Members' health"); a node
    /// never listed here has no probe.
    pub unhealthy: Vec<(Duration, usize, Duration)>,
    /// Whether releases notify the other nodes (PostgreSQL's NOTIFY).
    pub notify: bool,
    /// Whether the model database renews sets by liveness (DESIGN §9 "Renewal by liveness":
    /// [`ModelDb::by_liveness`]).
    pub by_liveness: bool,
    /// Renewing by liveness, the nodes that renew every row all the same:
    /// a fleet mid-upgrade, whose older nodes read a linked row as held
    /// far ahead ([`ModelDb::as_every_row`]).
    pub renewing_every_row: Vec<usize>,
    /// How long gated work takes to stop after `StopWork`.
    pub work_stop: Duration,
    /// How long to run.
    pub duration: Duration,
}

impl SetSimConfig {
    /// `nodes` nodes over `leases` leases, ttl 2 s, interval 500 ms, delay
    /// 0.2–2 ms, starts spread over the first interval, notifications on,
    /// 20 s of run.
    pub fn new(nodes: usize, leases: usize, seed: u64) -> Self {
        let mut rng = SimRng::new(seed ^ 0x5e7);
        let interval = Duration::from_millis(500);
        SetSimConfig {
            nodes,
            leases,
            seed,
            ttl: Duration::from_secs(2),
            interval,
            delay: (Duration::from_micros(200), Duration::from_millis(2)),
            starts: (0..nodes)
                .map(|_| Duration::from_nanos(rng.range(0, interval.as_nanos() as u64)))
                .collect(),
            crashes: Vec::new(),
            shutdowns: Vec::new(),
            pauses: Vec::new(),
            forced_releases: Vec::new(),
            hand_overs: Vec::new(),
            leaves: Vec::new(),
            priorities: Vec::new(),
            unhealthy: Vec::new(),
            notify: true,
            by_liveness: false,
            renewing_every_row: Vec::new(),
            work_stop: Duration::from_millis(1),
            duration: Duration::from_secs(20),
        }
    }
}

/// The share at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareSample {
    /// Virtual time.
    pub at: Duration,
    /// Per node: the number of leases whose work runs there, `None` when
    /// the node is not running.
    pub held: Vec<Option<usize>>,
    /// Leases whose work runs nowhere.
    pub unheld: usize,
    /// Per node: its holder id.
    pub holders: Vec<String>,
    /// Per node: its priority.
    pub priorities: Vec<u32>,
    /// Per node: whether its probe passes (true without a probe).
    pub healthy: Vec<bool>,
    /// Rows the database has written since the run began
    /// ([`ModelDb::row_writes`]): the difference between two samples is
    /// what that interval cost it.
    pub row_writes: u64,
}

/// What a run produced.
#[derive(Clone, Debug, Default)]
pub struct SetReport {
    /// Safety violations (empty on a correct run), with the time.
    pub violations: Vec<String>,
    /// One sample per interval.
    pub samples: Vec<ShareSample>,
    /// Every start of work: (time, lease index, node).
    pub starts: Vec<(Duration, usize, usize)>,
    /// Every stop of work (`StopWork` carried out): (time, lease index,
    /// node).
    pub stops: Vec<(Duration, usize, usize)>,
    /// Statements sent per node.
    pub statements: Vec<u64>,
}

impl SetReport {
    /// The first sample from which every later sample has every lease held
    /// and every running node at its share (so shares within one).
    pub fn settled_at(&self) -> Option<Duration> {
        self.settled_after(Duration::ZERO)
    }

    /// Like [`SetReport::settled_at`], counting only samples from `from`
    /// on (the last disturbance).
    pub fn settled_after(&self, from: Duration) -> Option<Duration> {
        let mut settled = None;
        for sample in self.samples.iter().filter(|s| s.at >= from) {
            // Settled: every running node holds exactly its share (so
            // within one of the others), by its rank among the running
            // nodes' holder ids; a lease still due to move because of a
            // rank shift is not settled yet.
            // Only the running nodes of the best standing share (healthy
            // first, then the highest priority); the others hold nothing.
            let priority = |node: usize| {
                (
                    sample.healthy.get(node).copied().unwrap_or(true),
                    sample.priorities.get(node).copied().unwrap_or(0),
                )
            };
            let best = (0..sample.held.len())
                .filter(|&n| sample.held[n].is_some())
                .map(priority)
                .max();
            let outranked_hold = (0..sample.held.len())
                .any(|n| Some(priority(n)) < best && sample.held[n].is_some_and(|h| h > 0));
            let mut running: Vec<(&str, usize)> = sample
                .held
                .iter()
                .zip(&sample.holders)
                .enumerate()
                .filter(|&(n, _)| Some(priority(n)) == best)
                .filter_map(|(_, (held, holder))| held.map(|h| (holder.as_str(), h)))
                .collect();
            running.sort_unstable();
            let leases = sample.unheld + running.iter().map(|r| r.1).sum::<usize>();
            let balanced = !running.is_empty()
                && !outranked_hold
                && running.iter().enumerate().all(|(rank, &(_, held))| {
                    held == crate::set::share::target(leases, running.len(), rank)
                });
            if sample.unheld == 0 && balanced {
                settled.get_or_insert(sample.at);
            } else {
                settled = None;
            }
        }
        settled
    }

    /// Work starts at or after `from`: each one is a lease moving (or
    /// starting) somewhere.
    pub fn moves_since(&self, from: Duration) -> usize {
        self.starts.iter().filter(|(at, _, _)| *at >= from).count()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Start(usize),
    Crash(usize),
    Shutdown(usize),
    /// A node is frozen for the duration (nanoseconds).
    Pause(usize, u64),
    Resume(usize),
    /// An index into `forced_releases`.
    ForceRelease(usize),
    /// An index into `hand_overs`.
    HandOver(usize),
    Leave(usize),
    /// A node's probe says healthy (true) or not.
    Health(usize, bool),
    /// The batch reaches the database.
    Execute {
        node: usize,
        life: u32,
        request: u64,
        batch_index: usize,
    },
    Reply {
        node: usize,
        life: u32,
        request: u64,
        reply_index: usize,
    },
    WorkStopped {
        node: usize,
        life: u32,
        lease: usize,
    },
    Notice {
        node: usize,
        life: u32,
        notice: usize,
    },
    Sample,
}

struct Node {
    set: Option<LeaseSet>,
    holder: HolderId,
    life: u32,
    /// Per lease: the epoch of the work running here.
    working: Vec<Option<Epoch>>,
    /// What its probe last said (`None`: it has no probe).
    probe: Option<bool>,
    /// Frozen: its events wait in `pending` until it resumes.
    paused: bool,
    /// What reached the frozen process, in order.
    pending: Vec<Event>,
}

/// A term an operator forced free while its holder still led it: the
/// holder's work may run on, fenced out, until the deadline it had then
/// (at most the row's expiry on the database's clock at the release).
struct ForcedTerm {
    lease: usize,
    holder: String,
    epoch: i64,
    until_ms: i64,
}

/// A lease-set simulation.
pub struct SetSimulation {
    config: SetSimConfig,
    rng: SimRng,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    nodes: Vec<Node>,
    names: Vec<LeaseName>,
    db: ModelDb,
    statements: Statements,
    batches: Vec<Batch>,
    replies: Vec<BatchReply>,
    /// Names released, for notices in flight.
    notices: Vec<String>,
    /// Terms forced free, for the safety check.
    forced: Vec<ForcedTerm>,
    /// A bug planted in every node's set (feature `mutants`).
    #[cfg(feature = "mutants")]
    node_mutation: crate::state::Mutation,
    report: SetReport,
}

impl SetSimulation {
    /// Builds the simulation; rejects unusable timings.
    pub fn new(config: SetSimConfig) -> Result<Self, ConfigError> {
        let names = (0..config.leases)
            .map(|i| LeaseName::new(&format!("s{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sim = SetSimulation {
            rng: SimRng::new(config.seed),
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            nodes: (0..config.nodes)
                .map(|i| {
                    Ok(Node {
                        set: None,
                        holder: HolderId::new(&format!("n{i}#0"))?,
                        life: 0,
                        working: vec![None; config.leases],
                        probe: None,
                        paused: false,
                        pending: Vec::new(),
                    })
                })
                .collect::<Result<_, ConfigError>>()?,
            names,
            db: if config.by_liveness {
                ModelDb::by_liveness()
            } else {
                ModelDb::new()
            },
            statements: Statements::new(Dialect::Postgres, &TableName::new("leases")?),
            batches: Vec::new(),
            replies: Vec::new(),
            notices: Vec::new(),
            forced: Vec::new(),
            #[cfg(feature = "mutants")]
            node_mutation: crate::state::Mutation::None,
            report: SetReport {
                statements: vec![0; config.nodes],
                ..SetReport::default()
            },
            config,
        };
        for node in 0..sim.config.nodes {
            let at = sim.config.starts.get(node).copied().unwrap_or_default();
            sim.schedule(at.as_nanos() as u64, Event::Start(node));
        }
        for &(at, node) in &sim.config.crashes.clone() {
            sim.schedule(at.as_nanos() as u64, Event::Crash(node));
        }
        for &(at, node) in &sim.config.shutdowns.clone() {
            sim.schedule(at.as_nanos() as u64, Event::Shutdown(node));
        }
        for &(at, node, span) in &sim.config.pauses.clone() {
            sim.schedule(
                at.as_nanos() as u64,
                Event::Pause(node, span.as_nanos() as u64),
            );
        }
        for (index, &(at, _)) in sim.config.forced_releases.clone().iter().enumerate() {
            sim.schedule(at.as_nanos() as u64, Event::ForceRelease(index));
        }
        for (index, &(at, ..)) in sim.config.hand_overs.clone().iter().enumerate() {
            sim.schedule(at.as_nanos() as u64, Event::HandOver(index));
        }
        for &(at, node) in &sim.config.leaves.clone() {
            sim.schedule(at.as_nanos() as u64, Event::Leave(node));
        }
        for &(at, node, span) in &sim.config.unhealthy.clone() {
            sim.schedule(at.as_nanos() as u64, Event::Health(node, false));
            sim.schedule((at + span).as_nanos() as u64, Event::Health(node, true));
        }
        sim.schedule(sim.config.interval.as_nanos() as u64, Event::Sample);
        // Check the template once, so a bad configuration fails here.
        sim.template(0)?.validate()?;
        Ok(sim)
    }

    /// Plants a bug in every node's set, from its start on (feature
    /// `mutants`): the simulator's own tests show its safety check catches
    /// what a pause or a forced release exposes. Call it before
    /// [`SetSimulation::run`].
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn set_node_mutation(&mut self, mutation: crate::state::Mutation) {
        self.node_mutation = mutation;
    }

    fn template(&self, node: usize) -> Result<SetConfig, ConfigError> {
        let mut config = SetConfig::with_ttl(self.nodes[node].holder.clone(), self.config.ttl)
            .interval(self.config.interval);
        config.seed = self.config.seed ^ node as u64;
        config.rank = crate::rank::Rank::new(self.priority(node), None)?;
        config.by_liveness =
            self.config.by_liveness && !self.config.renewing_every_row.contains(&node);
        Ok(config)
    }

    fn priority(&self, node: usize) -> u32 {
        self.config.priorities.get(node).copied().unwrap_or(0)
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, event)));
    }

    fn delay(&mut self) -> u64 {
        let (lo, hi) = (
            self.config.delay.0.as_nanos() as u64,
            self.config.delay.1.as_nanos() as u64,
        );
        self.rng.range(lo, hi)
    }

    fn db_ms(&self) -> i64 {
        DB_EPOCH_MS + (self.now / 1_000_000) as i64
    }

    /// Runs to the end and reports.
    pub fn run(mut self) -> SetReport {
        let end = self.config.duration.as_nanos() as u64;
        loop {
            let wake = self
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| !n.paused)
                .filter_map(|(i, n)| {
                    n.set
                        .as_ref()
                        .and_then(|s| s.poll_timeout())
                        .map(|t| (t.as_nanos(), i))
                })
                .min();
            let event = self.events.peek().map(|Reverse((t, _, _))| *t);
            match (wake, event) {
                (Some((t, node)), e) if e.is_none_or(|e| t < e) => {
                    if t > end {
                        break;
                    }
                    self.now = self.now.max(t);
                    let now = Instant::from_nanos(self.now);
                    if let Some(set) = self.nodes[node].set.as_mut() {
                        set.handle_timeout(now);
                    }
                    self.carry_out(node);
                }
                (_, Some(t)) => {
                    if t > end {
                        break;
                    }
                    let Reverse((t, _, event)) = self.events.pop().expect("peeked");
                    self.now = self.now.max(t);
                    self.handle(event);
                }
                (_, None) => break,
            }
            self.check();
        }
        self.report
    }

    /// The node an event reaches as an input of its process (what waits
    /// while it is frozen), if any.
    fn input_of(&self, event: &Event) -> Option<usize> {
        match *event {
            Event::Shutdown(node)
            | Event::Leave(node)
            | Event::Health(node, _)
            | Event::Reply { node, .. }
            | Event::WorkStopped { node, .. }
            | Event::Notice { node, .. } => Some(node),
            Event::HandOver(index) => Some(self.config.hand_overs[index].1),
            _ => None,
        }
    }

    fn handle(&mut self, event: Event) {
        if let Some(node) = self.input_of(&event) {
            if self.nodes[node].paused {
                self.nodes[node].pending.push(event);
                return;
            }
        }
        let now = Instant::from_nanos(self.now);
        match event {
            Event::Start(node) => {
                let template = self.template(node).expect("validated in new");
                self.nodes[node].life += 1;
                self.nodes[node].holder =
                    HolderId::new(&format!("n{node}#{}", self.nodes[node].life))
                        .expect("a short id");
                let mut template = template;
                template.holder = self.nodes[node].holder.clone();
                let mut set = LeaseSet::new(template, self.names.clone(), now).expect("valid set");
                #[cfg(feature = "mutants")]
                set.set_mutation(self.node_mutation);
                // A restarted node's probe says what it said before.
                if let Some(healthy) = self.nodes[node].probe {
                    set.handle_health(now, healthy);
                }
                self.nodes[node].set = Some(set);
                if let Some(set) = self.nodes[node].set.as_mut() {
                    set.handle_timeout(now);
                }
                self.carry_out(node);
            }
            Event::Crash(node) => {
                let n = &mut self.nodes[node];
                n.set = None;
                n.life += 1;
                n.working.iter_mut().for_each(|w| *w = None);
                n.paused = false;
                n.pending.clear();
            }
            Event::Pause(node, span) => {
                let n = &mut self.nodes[node];
                if n.set.is_some() && !n.paused {
                    n.paused = true;
                    self.schedule(self.now + span, Event::Resume(node));
                }
            }
            Event::Resume(node) => {
                if !std::mem::take(&mut self.nodes[node].paused) {
                    return;
                }
                // The thawed process finds its timer due and its socket
                // full: the timer first (the set checks its deadline on
                // every input either way), then what arrived, in order.
                if let Some(set) = self.nodes[node].set.as_mut() {
                    set.handle_timeout(now);
                }
                self.carry_out(node);
                for event in std::mem::take(&mut self.nodes[node].pending) {
                    self.handle(event);
                }
            }
            Event::ForceRelease(index) => {
                let (_, lease) = self.config.forced_releases[index];
                let name = self.names[lease].clone();
                let now_ms = self.db_ms();
                if let Some(row) = self.db.row(name.as_str()) {
                    let until_ms = self.db.expiry(row, now_ms);
                    if let Some(holder) = row.holder.clone().filter(|_| until_ms > now_ms) {
                        self.forced.push(ForcedTerm {
                            lease,
                            holder,
                            epoch: row.epoch,
                            until_ms,
                        });
                    }
                }
                let ttl_ms = self.config.ttl.as_millis() as i64;
                if self
                    .db
                    .force_release(name.as_str(), ttl_ms, now_ms)
                    .is_empty()
                    || !self.config.notify
                {
                    return;
                }
                // Notified like a release, to every running node: the
                // holder too, which renews at once and hears its loss.
                self.notify_released(name.as_str(), None);
            }
            Event::Shutdown(node) => {
                if let Some(set) = self.nodes[node].set.as_mut() {
                    set.handle_shutdown(now);
                }
                self.carry_out(node);
            }
            Event::Health(node, healthy) => {
                self.nodes[node].probe = Some(healthy);
                if let Some(set) = self.nodes[node].set.as_mut() {
                    set.handle_health(now, healthy);
                }
                self.carry_out(node);
            }
            Event::Leave(node) => {
                if let Some(set) = self.nodes[node].set.as_mut() {
                    set.handle_leave(now);
                }
                self.carry_out(node);
            }
            Event::HandOver(index) => {
                let (_, node, lease, to) = self.config.hand_overs[index];
                let name = self.names[lease].clone();
                let to = HolderId::reserved_for(self.nodes[to].holder.node()).ok();
                if let Some(set) = self.nodes[node].set.as_mut() {
                    set.handle_hand_over(now, name.as_str(), to);
                }
                self.carry_out(node);
            }
            Event::Execute {
                node,
                life,
                request,
                batch_index,
            } => {
                let batch = std::mem::replace(
                    &mut self.batches[batch_index],
                    Batch {
                        kind: BatchKind::Survey,
                        items: Vec::new(),
                    },
                );
                let reply = self.execute(node, &batch);
                // A hand-over notifies as a release does (`with_notify`).
                if let (
                    BatchKind::Release | BatchKind::HandOver,
                    true,
                    BatchReply::Matched(names),
                ) = (batch.kind, self.config.notify, &reply)
                {
                    for name in names.clone() {
                        self.notify_released(&name, Some(node));
                    }
                }
                self.replies.push(reply);
                let reply_index = self.replies.len() - 1;
                let at = self.now + self.delay();
                self.schedule(
                    at,
                    Event::Reply {
                        node,
                        life,
                        request,
                        reply_index,
                    },
                );
            }
            Event::Reply {
                node,
                life,
                request,
                reply_index,
            } => {
                let reply = std::mem::replace(
                    &mut self.replies[reply_index],
                    BatchReply::Failed(Failure::Transient),
                );
                if self.nodes[node].life == life {
                    if let Some(set) = self.nodes[node].set.as_mut() {
                        set.handle_reply(now, RequestId(request), reply);
                    }
                    self.carry_out(node);
                }
            }
            Event::WorkStopped { node, life, lease } => {
                if self.nodes[node].life == life {
                    let name = self.names[lease].clone();
                    if let Some(set) = self.nodes[node].set.as_mut() {
                        set.handle_work_stopped(now, name.as_str());
                    }
                    self.carry_out(node);
                }
            }
            Event::Notice { node, life, notice } => {
                if self.nodes[node].life == life {
                    let name = self.notices[notice].clone();
                    if let Some(set) = self.nodes[node].set.as_mut() {
                        set.handle_release_notice(now, &name);
                    }
                    self.carry_out(node);
                }
            }
            Event::Sample => {
                let mut unheld = 0;
                for lease in 0..self.names.len() {
                    if self.nodes.iter().all(|n| n.working[lease].is_none()) {
                        unheld += 1;
                    }
                }
                let held = self
                    .nodes
                    .iter()
                    .map(|n| {
                        n.set
                            .as_ref()
                            .filter(|s| !s.is_finished())
                            .map(|_| n.working.iter().flatten().count())
                    })
                    .collect();
                let holders = self.nodes.iter().map(|n| n.holder.to_string()).collect();
                self.report.samples.push(ShareSample {
                    at: Duration::from_nanos(self.now),
                    held,
                    unheld,
                    holders,
                    priorities: (0..self.nodes.len()).map(|n| self.priority(n)).collect(),
                    healthy: self.nodes.iter().map(|n| n.probe != Some(false)).collect(),
                    row_writes: self.db.row_writes(),
                });
                let next = self.now + self.config.interval.as_nanos() as u64;
                self.schedule(next, Event::Sample);
            }
        }
    }

    /// Sends the release notice of `name` to every running node but
    /// `except`, each after its own network delay.
    fn notify_released(&mut self, name: &str, except: Option<usize>) {
        for other in 0..self.nodes.len() {
            if Some(other) != except && self.nodes[other].set.is_some() {
                let at = self.now + self.delay();
                let life = self.nodes[other].life;
                self.notices.push(name.to_string());
                let notice = self.notices.len() - 1;
                self.schedule(
                    at,
                    Event::Notice {
                        node: other,
                        life,
                        notice,
                    },
                );
            }
        }
    }

    /// Runs a batch on the model database, through the real decoders.
    fn execute(&mut self, node: usize, batch: &Batch) -> BatchReply {
        let holder = self.nodes[node].holder.clone();
        let now_ms = self.db_ms();
        let ttl_ms = self.config.ttl.as_millis() as i64;
        let stale = self.nodes[node]
            .set
            .as_ref()
            .map_or(0, LeaseSet::stale_millis);
        if batch.kind == BatchKind::HandOver {
            let successor = self.nodes[node]
                .set
                .as_ref()
                .and_then(LeaseSet::hand_over_in_flight)
                .and_then(|(_, successor)| successor.cloned());
            let Some(successor) = successor else {
                return BatchReply::Failed(Failure::Transient);
            };
            let reservation_ms = self.nodes[node]
                .set
                .as_ref()
                .map_or(0, |set| set.config().reservation_millis());
            return self.in_shape_of(node, |db, statements| {
                run_hand_over(
                    db,
                    statements,
                    &holder,
                    batch,
                    &successor,
                    reservation_ms,
                    now_ms,
                )
            });
        }
        self.in_shape_of(node, |db, statements| {
            run_batch(db, statements, &holder, batch, stale, ttl_ms, now_ms)
        })
    }

    /// Runs a node's statements on the model database in the node's shape:
    /// renewing every row in a fleet that renews by liveness, as such a
    /// node's statements read the table ([`ModelDb::as_every_row`]).
    fn in_shape_of<T>(
        &mut self,
        node: usize,
        statements: impl FnOnce(&mut ModelDb, &Statements) -> T,
    ) -> T {
        let older = self.db.is_by_liveness() && self.config.renewing_every_row.contains(&node);
        if older {
            let shape = &self.statements;
            self.db.as_every_row(|db| statements(db, shape))
        } else {
            statements(&mut self.db, &self.statements)
        }
    }

    /// Carries out a node's commands.
    fn carry_out(&mut self, node: usize) {
        while let Some(command) = self.nodes[node]
            .set
            .as_mut()
            .and_then(LeaseSet::poll_command)
        {
            let life = self.nodes[node].life;
            match command {
                SetCommand::Execute { request, batch, .. } => {
                    self.report.statements[node] += 1;
                    self.batches.push(batch);
                    let batch_index = self.batches.len() - 1;
                    let at = self.now + self.delay();
                    self.schedule(
                        at,
                        Event::Execute {
                            node,
                            life,
                            request: request.0,
                            batch_index,
                        },
                    );
                }
                SetCommand::Cancel { .. } | SetCommand::Publish { .. } => {}
                SetCommand::StartWork { lease, epoch } => {
                    let i = self.lease_index(&lease);
                    self.nodes[node].working[i] = Some(epoch);
                    self.report
                        .starts
                        .push((Duration::from_nanos(self.now), i, node));
                }
                SetCommand::StopWork { lease, .. } => {
                    let i = self.lease_index(&lease);
                    self.nodes[node].working[i] = None;
                    self.report
                        .stops
                        .push((Duration::from_nanos(self.now), i, node));
                    let at = self.now + self.config.work_stop.as_nanos() as u64;
                    self.schedule(
                        at,
                        Event::WorkStopped {
                            node,
                            life,
                            lease: i,
                        },
                    );
                }
                // The simulated database notifies (PostgreSQL's model).
                SetCommand::WatchChanges(_) => {}
                SetCommand::Finished => {
                    self.nodes[node].set = None;
                    break;
                }
            }
        }
    }

    fn lease_index(&self, lease: &LeaseName) -> usize {
        lease.as_str()[1..]
            .parse()
            .expect("the simulator's own names")
    }

    /// Safety on the database's truth: running work holds its row. A
    /// frozen node's work is not checked (it cannot act, and its set
    /// checks its deadline first when it thaws); a term forced free runs
    /// on, fenced out, until the deadline its holder had, and no later.
    fn check(&mut self) {
        let now_ms = self.db_ms();
        let mut by_lease: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (node, n) in self.nodes.iter().enumerate() {
            if n.paused {
                continue;
            }
            for (lease, epoch) in n.working.iter().enumerate() {
                let Some(epoch) = epoch else { continue };
                let row = self.db.row(self.names[lease].as_str());
                let holds = row.is_some_and(|r| {
                    r.holder.as_deref() == Some(n.holder.as_str())
                        && r.epoch == epoch.to_i64()
                        && self.db.expiry(r, now_ms) > now_ms
                });
                let forced_free = !holds
                    && self.forced.iter().any(|f| {
                        f.lease == lease
                            && f.holder == n.holder.as_str()
                            && f.epoch == epoch.to_i64()
                            && now_ms < f.until_ms
                    });
                if forced_free {
                    continue;
                }
                by_lease.entry(lease).or_default().push(node);
                if !holds {
                    self.report.violations.push(format!(
                        "at {:?}: node {node} works lease s{lease} at epoch {epoch} but the row is {row:?}",
                        Duration::from_nanos(self.now)
                    ));
                }
            }
        }
        for (lease, nodes) in by_lease {
            if nodes.len() > 1 {
                self.report.violations.push(format!(
                    "at {:?}: lease s{lease} worked by nodes {nodes:?}",
                    Duration::from_nanos(self.now)
                ));
            }
        }
    }
}

/// Runs a set's [`BatchKind::HandOver`] (one lease, `(name, epoch)`) on
/// the model database with the single-row statement, reserving the row for
/// `successor` for `reservation_ms`, decoded by the real decoder and read
/// as [`LeaseSet::handle_row_reply`] reads it.
pub(crate) fn run_hand_over(
    db: &mut ModelDb,
    statements: &Statements,
    holder: &HolderId,
    batch: &Batch,
    successor: &HolderId,
    reservation_ms: i64,
    now_ms: i64,
) -> BatchReply {
    let Some((name, Some(epoch))) = batch.items.first() else {
        return BatchReply::Failed(Failure::Transient);
    };
    let rows = db.hand_over(
        name.as_str(),
        holder.as_str(),
        *epoch,
        successor.as_str(),
        reservation_ms,
        now_ms,
    );
    let operation = crate::Operation::HandOver { epoch: *epoch };
    match statements.decode_reply(operation, holder, &rows) {
        Ok(Reply::Accepted) => BatchReply::Matched(vec![name.as_str().to_string()]),
        Ok(_) => BatchReply::Matched(Vec::new()),
        Err(_) => BatchReply::Failed(Failure::Fatal),
    }
}

/// Runs `batch` of `holder` on the model database at database time
/// `now_ms` and decodes its rows with the real decoders, as a driver would
/// (a row the decoders refuse is a fatal failure). The simulator's and the
/// model checker's one way to the model database for a lease set; `stale_ms`
/// is the survey's bound ([`LeaseSet::stale_millis`]).
pub(crate) fn run_batch(
    db: &mut ModelDb,
    statements: &Statements,
    holder: &HolderId,
    batch: &Batch,
    stale_ms: i64,
    ttl_ms: i64,
    now_ms: i64,
) -> BatchReply {
    let names: Vec<&str> = batch.items.iter().map(|(n, _)| n.as_str()).collect();
    let pairs: Vec<(&str, Epoch)> = batch
        .items
        .iter()
        .map(|(n, e)| (n.as_str(), e.unwrap_or(Epoch::new(0))))
        .collect();
    let decoded = match batch.kind {
        BatchKind::Acquire => {
            let rows = db.acquire_batch(&names, holder.as_str(), ttl_ms, now_ms);
            statements
                .decode_acquire_batch(holder, &rows)
                .map(BatchReply::Acquired)
        }
        BatchKind::Renew => {
            let rows = db.renew_batch(&pairs, holder.as_str(), ttl_ms, now_ms);
            statements.decode_batch_reply(BatchKind::Renew, holder, &rows)
        }
        BatchKind::Release => {
            let rows = db.release_batch(&pairs, holder.as_str(), now_ms);
            statements
                .decode_batch_names(&rows)
                .map(|v| BatchReply::Matched(v.into_iter().map(|(n, _)| n).collect()))
        }
        BatchKind::Survey => {
            let rows = db.survey(stale_ms, now_ms);
            statements.decode_survey(&rows).map(BatchReply::Survey)
        }
        // Not a batch: the single-row hand-over, which needs the set's
        // reservation (`SetSim::execute` runs it with `run_hand_over`).
        BatchKind::HandOver => Ok(BatchReply::Failed(Failure::Transient)),
    };
    decoded.unwrap_or(BatchReply::Failed(Failure::Fatal))
}
