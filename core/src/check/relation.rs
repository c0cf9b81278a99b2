//! The step relation, written once for both models: which steps are
//! enabled in a state, the clocks, the connections, the faults, liveness
//! and progress. What a statement, a reply or a machine's commands do is
//! each model's own (the [`Contender`] hooks: `lone` for a lone lease,
//! `set::relation` for a set), where gating and fencing are checked on
//! each command carried out.

use super::contender::Contender;
use super::invariants::violation;
use super::step::Step;
use super::world::{holder_id, Log, Setup, World, ORPHAN};
use super::{Property, Violation};
use crate::sim::DB_EPOCH_MS;

impl<N: Contender> World<N> {
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
        if self.standbys.iter().any(|s| !self.db.holds(s)) {
            out.push(Step::Replicate);
        }
        if !self.standbys.is_empty() {
            // Whenever: a standby that lacks a lease's very first row is
            // promoted too (the table's marker, which every standby has,
            // starts the fresh row in a grace; DESIGN §3 "Failover"). A
            // promotion takes longer than a millisecond: never at the
            // database tick of the previous server's adoption, whose
            // epoch counts that very millisecond (`sql::adopted_epoch`).
            let now_ms = DB_EPOCH_MS + self.db_clock as i64;
            if faults && !self.db.adopted_at(now_ms) {
                out.push(Step::Failover);
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if self.can_tick(setup, i) {
                out.push(Step::Tick(i));
            }
            if n.running() && n.due() {
                out.push(Step::Timer(i));
            }
            if !n.to_db().queue.is_empty() {
                out.push(Step::AtDb(i));
            }
            if n.running() && !n.to_node().queue.is_empty() {
                out.push(Step::Recv(i));
            }
            if n.paused() && n.live() {
                out.push(Step::Resume(i));
            }
            if !faults {
                continue;
            }
            if !n.to_db().queue.is_empty() {
                out.push(Step::LoseToDb(i));
                if !n.to_db().late {
                    out.push(Step::LateToDb(i));
                }
                if self.stray.is_none() {
                    out.push(Step::Stray(i));
                }
            }
            if !n.to_node().queue.is_empty() {
                out.push(Step::LoseToNode(i));
                if !n.to_node().late {
                    out.push(Step::LateToNode(i));
                }
            }
            if n.running() {
                out.push(Step::Pause(i));
                if !n.shutting_down() {
                    out.push(Step::Shutdown(i));
                }
                if setup.bounds.handover && n.leading(0) {
                    out.push(Step::HandOver(i));
                }
                if setup.bounds.health && !n.unhealthy() {
                    out.push(Step::Unhealthy(i));
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
            let heads_on_time =
                n.to_db().on_time(setup) && (n.paused() || n.to_node().on_time(setup));
            heads_on_time && (!n.live() || n.fits(n.skew() - 1, d))
        })
    }

    /// A node's clock may advance unless its timer is due (a driver wakes
    /// at `poll_timeout`; a late wake-up is a pause) or it would leave its
    /// drift window.
    fn can_tick(&self, setup: &Setup, node: usize) -> bool {
        let n = &self.nodes[node];
        n.live() && !(n.running() && n.due()) && n.fits(n.skew() + 1, setup.drift())
    }

    /// Applies an enabled step and checks the invariants; `Some` on the
    /// first one violated.
    pub(crate) fn apply(&mut self, setup: &Setup, step: Step, log: &mut Log) -> Option<Violation> {
        self.fresh = false;
        if step.is_fault() {
            self.faults += 1;
            self.calm();
        }
        let found = match step {
            Step::Orphan => {
                // Lapsing one interval from now: when the contenders
                // that found it held poll again.
                let left = i64::from(setup.bounds.interval_ticks);
                let now_ms = DB_EPOCH_MS + self.db_clock as i64;
                for name in &setup.names {
                    self.db.acquire(name.as_str(), ORPHAN, left, now_ms);
                }
                if setup.bounds.leases == 0 {
                    log.note(|| format!("the row starts held by {ORPHAN}, a process gone"));
                } else {
                    log.note(|| format!("every lease starts held by {ORPHAN}, a process gone"));
                }
                None
            }
            Step::TickDb => self.tick_db(setup, log),
            Step::Replicate => {
                let copy = self.db.replica();
                for standby in &mut self.standbys {
                    standby.clone_from(&copy);
                }
                None
            }
            Step::Failover => {
                self.issued_before = self.issued;
                if !self.standbys.is_empty() {
                    let standby = self.standbys.remove(0);
                    self.db.fail_over(standby);
                }
                // The terms the lost history granted: led now, or won
                // by a reply still on its way.
                for (i, n) in self.nodes.iter().enumerate() {
                    self.outlived[i] = n.leader_epoch(0).or_else(|| n.acquired_in_flight());
                }
                log.note(|| {
                    "the database failed over to a standby, losing the writes since its last copy"
                        .to_string()
                });
                None
            }
            Step::Tick(i) => {
                self.nodes[i].tick();
                None
            }
            Step::Timer(i) => self.timer(setup, i, log),
            Step::AtDb(i) => match self.nodes[i].to_db_mut().pop() {
                Some((req, late)) => {
                    if late {
                        self.calm();
                    }
                    N::at_db(self, setup, req, false, log)
                }
                None => None,
            },
            Step::StrayAtDb => match self.stray.take() {
                Some(req) => {
                    self.calm();
                    N::at_db(self, setup, req, true, log)
                }
                None => None,
            },
            Step::Recv(i) => match self.nodes[i].to_node_mut().pop() {
                Some((delivery, late)) => {
                    if late {
                        self.calm();
                    }
                    N::delivery_input(self, setup, i, delivery, log)
                }
                None => None,
            },
            Step::Resume(i) => {
                self.nodes[i].set_paused(false);
                self.timer(setup, i, log)
            }
            Step::LoseToDb(i) => {
                self.nodes[i].to_db_mut().pop();
                None
            }
            Step::LoseToNode(i) => {
                self.nodes[i].to_node_mut().pop();
                None
            }
            Step::LateToDb(i) => {
                self.nodes[i].to_db_mut().late = true;
                None
            }
            Step::LateToNode(i) => {
                self.nodes[i].to_node_mut().late = true;
                None
            }
            Step::Stray(i) => {
                self.stray = self.nodes[i].to_db_mut().pop().map(|(req, _)| req);
                None
            }
            Step::Pause(i) => {
                self.nodes[i].set_paused(true);
                None
            }
            Step::Crash(i) => {
                let n = &mut self.nodes[i];
                n.crash();
                log.note(|| format!("n{i} crashed as {}", n.holder()));
                None
            }
            Step::Restart(i) => return self.restart(setup, i, log),
            Step::Shutdown(i) => N::shutdown_input(self, setup, i, log),
            Step::HandOver(i) => N::hand_over_input(self, setup, i, log),
            Step::Unhealthy(i) => N::unhealthy_input(self, setup, i, log),
        };
        if !self.standbys.is_empty() || self.db.incarnation() > 0 {
            if let Some(row) = self.db.row(setup.names[0].as_str()) {
                self.issued = self.issued.max(row.epoch);
            }
        }
        found.or_else(|| self.check_state(setup))
    }

    /// A disturbance the liveness bound does not cover (a fault, a late
    /// message arriving, a stray statement running): every lease's
    /// leaderless stretch starts again.
    fn calm(&mut self) {
        self.leaderless.iter_mut().for_each(|l| *l = 0);
    }

    /// The database clock advances; then liveness (`Bounds::liveness_ticks`),
    /// per lease: with a node able to lead (running, not shutting down, its
    /// connection not late), the lease has a leader within the bound.
    fn tick_db(&mut self, setup: &Setup, log: &mut Log) -> Option<Violation> {
        self.db_clock += 1;
        for n in &mut self.nodes {
            if n.live() {
                *n.skew_mut() -= 1;
            }
            if !n.to_db().queue.is_empty() {
                n.to_db_mut().age += 1;
            }
            if !n.to_node().queue.is_empty() && !n.paused() {
                n.to_node_mut().age += 1;
            }
        }
        let bound = setup.bounds.liveness_ticks?;
        let able = self
            .nodes
            .iter()
            .any(|n| n.running() && !n.to_db().late && !n.to_node().late && !n.shutting_down());
        let lone = setup.bounds.leases == 0;
        let mut found = None;
        for (k, name) in setup.names.iter().enumerate() {
            if !able || self.nodes.iter().any(|n| n.leading(k)) {
                self.leaderless[k] = 0;
                continue;
            }
            self.leaderless[k] += 1;
            let ticks = self.leaderless[k];
            let lease = if lone {
                String::new()
            } else {
                format!(" of {name}")
            };
            log.note(|| format!("no leader{lease} for {ticks} db ticks"));
            if ticks > bound && found.is_none() {
                found = Some(violation(
                    Property::Liveness,
                    format!(
                        "no leader{lease} for {ticks} database ticks (bound {bound}) at db tick {}, with no fault since and a node able to lead",
                        self.db_clock
                    ),
                ));
            }
        }
        found
    }

    /// The timer fires; progress: a timer never asks to be woken again at
    /// once.
    fn timer(&mut self, setup: &Setup, i: usize, log: &mut Log) -> Option<Violation> {
        let found = N::timeout_input(self, setup, i, log);
        let n = &self.nodes[i];
        if found.is_none() && n.running() && n.due() {
            return Some(violation(
                Property::Progress,
                format!(
                    "n{i} woken at its poll_timeout (local tick {}) asks to be woken again at once",
                    n.clock()
                ),
            ));
        }
        found
    }

    /// A new process of node `i`, with the next incarnation's holder id,
    /// its clock at the database's.
    fn restart(&mut self, setup: &Setup, i: usize, log: &mut Log) -> Option<Violation> {
        let incarnation = self.nodes[i].incarnation() + 1;
        let holder = match holder_id(setup, i, incarnation) {
            Ok(h) => h,
            Err(e) => return Some(violation(Property::Setup, e.to_string())),
        };
        log.note(|| format!("n{i} restarted as {holder}"));
        let clock = self.db_clock;
        if let Err(e) = self.nodes[i].restart(setup, holder, incarnation, clock) {
            return Some(violation(Property::Setup, e.to_string()));
        }
        self.check_state(setup)
    }
}
