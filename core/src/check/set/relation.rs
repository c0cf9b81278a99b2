//! The step relation of the lease-set model: which steps are enabled and
//! what each does, as `world`'s relation for a lone lease, with batches on
//! the connections.

use super::invariants::violation;
use super::{new_set, Anchors, SetDelivery, SetNode, SetRequest, SetWorld};
use crate::check::step::Step;
use crate::check::world::{holder_id, Log, Setup, ORPHAN};
use crate::check::Property;
use crate::check::Violation;
use crate::names::LeaseName;
use crate::protocol::Reply;
use crate::set::{BatchKind, BatchReply, LeaseSet, SetCommand};
use crate::sim::set::run_batch;
use crate::sim::DB_EPOCH_MS;
use crate::time::Instant;

impl SetWorld {
    fn faults_left(&self, setup: &Setup) -> bool {
        (self.faults as usize) < setup.bounds.faults
    }

    /// Every step enabled here, in a fixed order (as `World::steps`).
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
                let shutting = n.set.as_ref().is_some_and(|s| s.view().shutting_down);
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

    fn can_tick_db(&self, setup: &Setup) -> bool {
        let d = setup.drift();
        self.nodes.iter().all(|n| {
            let heads_on_time = n.to_db.on_time(setup) && (n.paused || n.to_node.on_time(setup));
            heads_on_time && (!n.live() || fits(n, n.skew - 1, d))
        })
    }

    fn can_tick(&self, setup: &Setup, node: usize) -> bool {
        let n = &self.nodes[node];
        n.live() && !(n.running() && n.due()) && fits(n, n.skew + 1, setup.drift())
    }

    /// Applies an enabled step and checks the invariants; `Some` on the
    /// first one violated.
    pub(crate) fn apply(&mut self, setup: &Setup, step: Step, log: &mut Log) -> Option<Violation> {
        self.fresh = false;
        if step.is_fault() {
            self.faults += 1;
        }
        let found = match step {
            Step::Orphan => {
                let left = i64::from(setup.bounds.interval_ticks);
                let now_ms = DB_EPOCH_MS + self.db_clock as i64;
                for name in &setup.names {
                    self.db.acquire(name.as_str(), ORPHAN, left, now_ms);
                }
                log.note(|| format!("every lease starts held by {ORPHAN}, a process gone"));
                None
            }
            Step::TickDb => {
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
                None
            }
            Step::Tick(i) => {
                let n = &mut self.nodes[i];
                n.clock += 1;
                n.skew += 1;
                None
            }
            Step::Timer(i) => self.timer(setup, i, log),
            Step::AtDb(i) => match self.nodes[i].to_db.pop() {
                Some((req, _)) => self.at_db(setup, req, false, log),
                None => None,
            },
            Step::StrayAtDb => match self.stray.take() {
                Some(req) => self.at_db(setup, req, true, log),
                None => None,
            },
            Step::Recv(i) => match self.nodes[i].to_node.pop() {
                Some((delivery, _)) => self.deliver(setup, i, delivery, log),
                None => None,
            },
            Step::Resume(i) => {
                self.nodes[i].paused = false;
                self.timer(setup, i, log)
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
                let leases = setup.names.len();
                let n = &mut self.nodes[i];
                n.set = None;
                n.paused = false;
                n.to_node.clear();
                n.work = vec![None; leases];
                n.anchors = vec![Anchors::default(); leases];
                n.fenced_out = vec![false; leases];
                log.note(|| format!("n{i} crashed as {}", n.holder));
                None
            }
            Step::Restart(i) => return self.restart(setup, i, log),
            Step::Shutdown(i) => self.input(setup, i, log, LeaseSet::handle_shutdown),
        };
        found.or_else(|| self.check_state(setup))
    }

    fn timer(&mut self, setup: &Setup, i: usize, log: &mut Log) -> Option<Violation> {
        let found = self.input(setup, i, log, LeaseSet::handle_timeout);
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
        let incarnation = self.nodes[i].incarnation + 1;
        let holder = match holder_id(setup, i, incarnation) {
            Ok(h) => h,
            Err(e) => return Some(violation(Property::Setup, e.to_string())),
        };
        let now = Instant::from_nanos(db_clock.saturating_mul(super::TICK.as_nanos() as u64));
        let set = match new_set(setup, holder.clone(), now) {
            Ok(s) => s,
            Err(e) => return Some(violation(Property::Setup, e.to_string())),
        };
        log.note(|| format!("n{i} restarted as {holder}"));
        let n = &mut self.nodes[i];
        // What is still on its way to the database stays there: the old
        // process's batches may still run.
        let to_db = std::mem::replace(&mut n.to_db, super::Channel::new());
        *n = SetNode::fresh(holder, incarnation, set, db_clock, setup.names.len());
        n.to_db = to_db;
        self.check_state(setup)
    }

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
    fn at_db(
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
            .map(|(name, _)| self.db.row(name.as_str()).cloned())
            .collect();
        let reply = run_batch(
            &mut self.db,
            &setup.statements,
            &req.holder,
            &req.batch,
            self.stale_ms,
            ttl,
            now_ms,
        );
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
                let held_by_other = before
                    .holder
                    .as_deref()
                    .is_some_and(|h| h != req.holder.as_str())
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
        if let (true, BatchKind::Release, BatchReply::Matched(names)) =
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
                    n.to_db.push(SetRequest {
                        node: i,
                        incarnation: n.incarnation,
                        holder: n.holder.clone(),
                        id: request,
                        batch,
                    });
                    None
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

/// The drift relation (see `check`), over every lease's anchors.
fn fits(n: &SetNode, skew: i32, drift: i32) -> bool {
    let near = |a: Option<i32>| a.is_none_or(|a| (a - skew).abs() <= drift);
    skew.abs() <= drift
        && n.anchors
            .iter()
            .all(|a| near(a.flight.map(|(_, _, s)| s)) && near(a.term))
}
