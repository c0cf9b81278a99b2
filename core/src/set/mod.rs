//! `LeaseSet`: one node contending for many leases over one statement at a
//! time, with a fair share between the live nodes (DESIGN §9).
//!
//! The rules of each term are not repeated here: every lease of the set is
//! a [`LeaseState`], the machine of a lone lease, and the set only decides
//! *which* of them compete (the fair share) and carries their statements
//! in batches. A lease's acquire or renew joins the next batch of its kind;
//! its deadline counts from the moment the lease's machine issued the
//! statement, which is never after the batch's send, so a lease is never
//! believed held longer than a lone lease would be.

mod batch;
mod hand_over;
mod health;
mod membership;
mod plan;
mod protocol;
pub mod share;
mod standing;
mod survey;
#[cfg(feature = "sim")]
mod view;

pub use batch::MAX_BATCH;
pub use membership::{
    member_row_name, read_member_row, unhealthy_row_name, MemberRow, UNHEALTHY_MARK,
};
pub use protocol::{Batch, BatchKind, BatchReply, SetCommand};

use std::collections::{HashMap, VecDeque};

use batch::InFlight;
#[cfg(feature = "sim")]
pub(crate) use view::SeenView;

use crate::config::SetConfig;
use crate::error::ConfigError;
use crate::names::{Epoch, HolderId, LeaseName};
use crate::protocol::{Command, Failure, Leadership, Operation, Reply, RequestId};
use crate::rank::Rank;
use crate::sql::MEMBER_PREFIX;
use crate::state::LeaseState;
use crate::time::Instant;

/// The most leases one set may hold (the CLI's `--name` limit too).
pub const MAX_LEASES: usize = 100_000;

/// What this node last learned of a lease it does not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    /// Nothing yet: the row may not exist.
    Unknown,
    /// Free or lapsed when last read.
    Free,
    /// Held by another node; `until` is its expiry when a statement told
    /// it (a stale row of the survey, an acquire answered "held"), `None`
    /// when it was healthy (renewed on time) at the last survey.
    Held { until: Option<Instant> },
}

/// Another live node of the set, as the last survey read its membership
/// row.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub(crate) holder: HolderId,
    rank: Rank,
    /// False when the row read was its unhealthy row (DESIGN §9 "Members'
    /// health").
    pub(crate) healthy: bool,
    /// The membership row's name (a release notice names it).
    row: String,
    /// The row's expiry.
    pub(crate) until: Instant,
}

#[derive(Clone, Debug)]
struct Slot {
    name: LeaseName,
    machine: LeaseState,
    /// The statement the machine issued that no batch carried yet.
    queued: Option<(RequestId, Operation)>,
    /// The machine's request carried by the batch in flight.
    sent: Option<RequestId>,
    seen: Seen,
    /// `StopWork` was given and the driver has not confirmed the stop:
    /// the lease's release waits.
    stopping: bool,
    /// Given up because the share moved (stop → release); the machine is
    /// replaced by a fresh follower once it finishes.
    yielding: bool,
    /// Given up by the driver (its work ended): not tried again by this
    /// node before this instant, so work that ends at once does not spin.
    rest_until: Option<Instant>,
    /// The last survey read the row reserved for this node (a planned
    /// handover, DESIGN §3) until this instant: the node takes it whatever
    /// its share, and keeps it over the leases it prefers for a ttl after.
    offered_until: Option<Instant>,
    /// When this node took a lease handed to it (its offer is used up
    /// then): the share gives such a lease up last for a ttl after.
    handed_at: Option<Instant>,
    /// The lease handed to this node was taken while a live member
    /// outranked this one: handed past the better member (the one
    /// leaving, whose membership row goes last renewing by liveness, or
    /// an operator's choice), so it is not handed back for a ttl after
    /// (`plan.rs::kept_from_better`).
    handed_past_better: bool,
    /// Renewing by liveness: the term (epoch) the surveys have read lapsed
    /// under a holder, untaken, and when they first read it so. A lease
    /// left lapsed a whole ttl past that is an orphan nobody's share
    /// takes (a linked row, in a fleet where some nodes renew every row
    /// and cannot take it, DESIGN §9 "Renewal by liveness"), and any node takes it
    /// (`plan.rs::is_orphan`, `take_outside_share`).
    untaken: Option<(Epoch, Instant)>,
    preference: u64,
}

impl Slot {
    /// Slot `i` of a set with `template`: a follower for `name`, out of
    /// the share (nothing competes before the first survey has told the
    /// node its share). Its jitter seed is mixed with its position.
    fn new(
        template: &SetConfig,
        i: usize,
        name: LeaseName,
        now: Instant,
    ) -> Result<Slot, ConfigError> {
        let mut config = template.for_lease(name.clone());
        config.seed = template.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut machine = LeaseState::own_row(config, now)?;
        machine.set_contending(now, false);
        Ok(Slot {
            preference: share::preference(&template.holder, name.as_str()),
            name,
            machine,
            queued: None,
            sent: None,
            seen: Seen::Unknown,
            stopping: false,
            yielding: false,
            rest_until: None,
            offered_until: None,
            handed_at: None,
            handed_past_better: false,
            untaken: None,
        })
    }
}

/// A node's contention for a set of leases, as a pure state machine.
///
/// Same contract as [`LeaseState`]: after every input drain
/// [`LeaseSet::poll_command`], carry the commands out in order, then sleep
/// until [`LeaseSet::poll_timeout`] and call [`LeaseSet::handle_timeout`].
/// At most one batch is in flight; feed its result back with
/// [`LeaseSet::handle_reply`].
///
/// Each interval a settled node sends one renew batch (its held leases and
/// its membership row) and one survey; a node under its share also sends
/// one acquire batch. A node announces itself through its membership row
/// (`sql::MEMBER_PREFIX` + holder id), held like a lease: the survey lists
/// the live ones. With N leases among n live nodes, the `N mod n` nodes
/// ranked first by holder id aim for ⌈N/n⌉ leases and the others for
/// ⌊N/n⌋ ([`share::target`]). A node over its target gives its surplus up
/// through stop → release; a node under it tries the free and lapsed
/// leases it prefers most. The acquire statement never takes a held,
/// unexpired row, so balancing never steals.
#[derive(Clone, Debug)]
pub struct LeaseSet {
    template: SetConfig,
    slots: Vec<Slot>,
    index: HashMap<String, usize>,
    /// The membership row's slot: the first after the leases. The
    /// unhealthy row's, once this node's probe first failed, is the next
    /// (and last) one.
    member: usize,
    /// The name of the row this node holds instead of its membership row
    /// while its probe fails ([`unhealthy_row_name`]).
    unhealthy_row: LeaseName,
    /// The health probe's last verdict; `None` without a probe (healthy).
    probe: Option<bool>,
    /// When this node's unhealthy row was first held, while its probe
    /// fails: the others have read it an interval and a request timeout
    /// later (`standing.rs`).
    marked_at: Option<Instant>,
    next_request: u64,
    in_flight: Option<InFlight>,
    next_survey: Instant,
    /// Surveys answered so far (the share is planned from the second on).
    surveys: u32,
    /// An acquire found a lease this node believed free already taken
    /// (nodes short of their share at once reached for the same rows):
    /// other rows it believes free may be taken too, so it surveys before
    /// choosing again rather than trying them one batch at a time.
    resurvey: bool,
    /// Live members other than this node.
    members: Vec<Member>,
    /// Instants at which a row seen by the last survey lapses: the share
    /// is planned again then.
    wakeups: Vec<Instant>,
    /// Per lease: whether it is assigned to this node among `assigned_among`
    /// (rendezvous hashing with bounded loads, `share::assign`). Nodes try
    /// the free leases assigned to them before any other, so nodes short
    /// of their share at the same time reach for different leases instead
    /// of colliding on the same rows, and together for every lease.
    assigned_here: Vec<bool>,
    /// The live members `assigned_here` was computed for.
    assigned_among: Vec<HolderId>,
    shutting_down: bool,
    finished: bool,
    /// What the driver was last told of watching for changes
    /// ([`SetCommand::WatchChanges`]).
    watching: bool,
    commands: VecDeque<SetCommand>,
    /// A planted bug for the model checker's own tests (feature `mutants`).
    #[cfg(feature = "mutants")]
    mutation: crate::state::Mutation,
}

impl LeaseSet {
    /// A node contending for `leases` with the timings and holder of
    /// `template`. Rejects an empty set, more than [`MAX_LEASES`], a
    /// repeated name, a name in the membership namespace, and timings
    /// [`SetConfig::validate`] rejects.
    pub fn new(
        template: SetConfig,
        leases: Vec<LeaseName>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        template.validate()?;
        if leases.is_empty() || leases.len() > MAX_LEASES {
            return Err(ConfigError::SetSize {
                count: leases.len(),
                max: MAX_LEASES,
            });
        }
        let member_name = LeaseName::new(&member_row_name(&template.holder, &template.rank)?)?;
        let unhealthy_row = LeaseName::new(&unhealthy_row_name(&template.holder, &template.rank)?)?;
        let mut index = HashMap::with_capacity(leases.len() + 1);
        let mut slots = Vec::with_capacity(leases.len() + 1);
        for (i, name) in leases
            .into_iter()
            .chain(std::iter::once(member_name))
            .enumerate()
        {
            if index.insert(name.as_str().to_string(), i).is_some() {
                return Err(ConfigError::DuplicateLease {
                    name: name.as_str().chars().take(80).collect(),
                });
            }
            slots.push(Slot::new(&template, i, name, now)?);
        }
        let member = slots.len() - 1;
        for slot in &mut slots[..member] {
            slot.machine.release_lapsed_terms(template.by_liveness);
        }
        if let Some(slot) = slots[..member]
            .iter()
            .find(|s| crate::config::is_reserved(&s.name))
        {
            return Err(ConfigError::ReservedLease {
                name: slot.name.as_str().chars().take(80).collect(),
            });
        }
        // The membership row always competes: nobody else wants it.
        slots[member].machine.set_contending(now, true);
        let mut set = LeaseSet {
            template,
            slots,
            index,
            member,
            unhealthy_row,
            probe: None,
            marked_at: None,
            next_request: 0,
            in_flight: None,
            next_survey: now,
            surveys: 0,
            resurvey: false,
            members: Vec::new(),
            wakeups: Vec::new(),
            assigned_here: Vec::new(),
            assigned_among: Vec::new(),
            shutting_down: false,
            finished: false,
            watching: false,
            commands: VecDeque::with_capacity(64),
            #[cfg(feature = "mutants")]
            mutation: crate::state::Mutation::None,
        };
        // Its acquire is issued now and goes right after the first survey:
        // left in its machine, it would wait for the machine's request
        // timeout (an interval), and the other nodes started at the same
        // moment would plan their share without this node.
        set.drain(now, member);
        Ok(set)
    }
}

impl LeaseSet {
    /// Plants a bug (feature `mutants`, for the model checker's tests): in
    /// the set, or in every lease's machine.
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn set_mutation(&mut self, mutation: crate::state::Mutation) {
        self.mutation = mutation;
        for slot in &mut self.slots {
            slot.machine.set_mutation(mutation);
        }
    }

    /// The holder id and timings every lease of the set runs with.
    pub fn config(&self) -> &SetConfig {
        &self.template
    }

    /// The leases of the set, in the order given.
    pub fn leases(&self) -> impl Iterator<Item = &LeaseName> {
        self.slots[..self.member].iter().map(|s| &s.name)
    }

    /// The name of this node's membership row.
    pub fn member_row(&self) -> &LeaseName {
        &self.slots[self.member].name
    }

    /// `lease`'s leadership as last published, if it is in the set.
    pub fn leadership(&self, lease: &str) -> Option<&Leadership> {
        let &i = self.index.get(lease)?;
        (i < self.member).then(|| self.slots[i].machine.leadership())
    }

    /// The leases this node leads, with their epochs, in set order.
    pub fn held(&self) -> impl Iterator<Item = (&LeaseName, Epoch)> {
        self.slots[..self.member]
            .iter()
            .filter_map(|s| s.machine.leadership().leader_epoch().map(|e| (&s.name, e)))
    }

    /// While leading, the local instant at which `lease`'s term ends unless
    /// renewed (for the work's deadline).
    pub fn deadline(&self, lease: &str) -> Option<Instant> {
        let &i = self.index.get(lease)?;
        self.slots[i].machine.leader_deadline()
    }

    /// True once the set has finished (shut down, or a fatal failure).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The next command, in order; drain until `None` after every input.
    pub fn poll_command(&mut self) -> Option<SetCommand> {
        self.commands.pop_front()
    }

    /// When the set next needs [`LeaseSet::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.finished {
            return None;
        }
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        for slot in &self.slots {
            if let Some(t) = slot.machine.poll_timeout() {
                consider(t);
            }
        }
        if let Some(batch) = &self.in_flight {
            consider(batch.give_up);
        } else if !self.shutting_down {
            consider(self.next_survey);
        }
        if let Some(&t) = self.wakeups.first() {
            consider(t);
        }
        next
    }

    /// Time passed: every lease whose deadline, timeout or next statement
    /// came is stepped; a batch past its timeout is abandoned; the share
    /// is planned again; the next batch goes out.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        if self.in_flight.as_ref().is_some_and(|b| now >= b.give_up) {
            let batch = self.in_flight.take().expect("checked above");
            self.commands
                .push_back(SetCommand::Cancel { request: batch.id });
            self.fail_items(now, &batch, Failure::Transient);
        }
        for i in 0..self.slots.len() {
            if self.slots[i]
                .machine
                .poll_timeout()
                .is_some_and(|t| t <= now)
            {
                self.slots[i].machine.handle_timeout(now);
                self.drain(now, i);
            }
        }
        self.wakeups.retain(|&t| t > now);
        self.settle(now);
    }

    /// Another contender released `lease` (a PostgreSQL notification): if
    /// it is in the set and this node is under its share, it tries at once;
    /// if this node leads it, it renews it at once (the notice may be of
    /// its row taken away), as a lone lease's leader does.
    /// A released membership row means its node left: the share is planned
    /// without it at once.
    pub fn handle_release_notice(&mut self, now: Instant, lease: &str) {
        self.handle_release_notices(now, std::iter::once(lease));
    }

    /// Several release notices at once (a driver drains the notifications
    /// that arrived together): each is taken as by
    /// [`LeaseSet::handle_release_notice`], and the share is planned once
    /// for all of them. A node giving up hundreds of leases sends hundreds
    /// of notifications in one commit.
    pub fn handle_release_notices<'a>(
        &mut self,
        now: Instant,
        leases: impl IntoIterator<Item = &'a str>,
    ) {
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        if self.shutting_down {
            return;
        }
        for lease in leases {
            if lease.starts_with(MEMBER_PREFIX) {
                // A node left cleanly: its share is free now, not at its
                // membership row's expiry.
                self.members.retain(|m| m.row != lease);
            } else if let Some(&i) = self.index.get(lease) {
                if i < self.member && self.slots[i].machine.leadership().is_leader() {
                    // A held lease's row changed under it (an operator's
                    // forced release, an adoption): its machine renews at
                    // once and a refused renewal demotes it now.
                    self.slots[i].machine.handle_release_notice(now);
                    self.drain(now, i);
                } else if i < self.member {
                    // Released or handed over: no orphan any more.
                    self.slots[i].untaken = None;
                    // A lease this node does not try for may have been
                    // handed to it (a hand-over notifies as a release
                    // does): the survey tells, now rather than within an
                    // interval.
                    let slot = &self.slots[i];
                    if !slot.machine.is_contending() && slot.rest_until.is_none_or(|t| t <= now) {
                        self.next_survey = self.next_survey.min(now);
                    }
                    self.slots[i].seen = Seen::Free;
                    self.slots[i].machine.handle_release_notice(now);
                    self.drain(now, i);
                }
            }
        }
        self.settle(now);
    }

    /// A reading of the database clock taken by the batch sent at
    /// `sent_at` whose reply came at `now` (SQLite, where it is the host's
    /// wall clock): every lease's machine compares it with its last one
    /// ([`LeaseState::handle_db_clock`]), so a step of the wall clock
    /// beyond ρ·ttl demotes each held lease with `clock`, as it does a
    /// lone lease. Returns whether the clock stepped, for the driver to
    /// log.
    pub fn handle_db_clock(&mut self, now: Instant, sent_at: Instant, db_millis: i64) -> bool {
        if self.finished {
            return false;
        }
        self.step_deadlines(now);
        let mut stepped = false;
        for i in 0..self.slots.len() {
            stepped |= self.slots[i]
                .machine
                .handle_db_clock(now, sent_at, db_millis);
            self.drain(now, i);
        }
        self.settle(now);
        stepped
    }

    /// The gated work of `lease` stopped (after a `StopWork`): its release,
    /// if one is due, may now go out.
    pub fn handle_work_stopped(&mut self, now: Instant, lease: &str) {
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        if let Some(&i) = self.index.get(lease) {
            self.slots[i].stopping = false;
        }
        self.settle(now);
    }

    /// Gives `lease` up as the share would (stop → release), for example
    /// because its work ended by itself. The node stays in the set: the
    /// share may bring the lease back to it, or to another node, later.
    pub fn handle_give_up(&mut self, now: Instant, lease: &str) {
        let rest = self.template.ttl;
        self.give_up_for(now, lease, rest);
    }

    /// `lease`'s work failed past its restart policy (DESIGN §5 "Work that
    /// fails"): the node gives it up as [`LeaseSet::handle_give_up`] does
    /// and leaves it alone for `cool_down` (at least a ttl), so the share
    /// moves it to another member meanwhile.
    pub fn handle_work_escalated(
        &mut self,
        now: Instant,
        lease: &str,
        term: Option<crate::Epoch>,
        cool_down: std::time::Duration,
    ) {
        // A late escalation does not give up a later term of the lease.
        let later = self.index.get(lease).is_some_and(|&i| {
            let led = self.slots[i].machine.leadership().leader_epoch();
            term.is_some_and(|term| led.is_some_and(|led| led != term))
        });
        if later {
            return;
        }
        let rest = cool_down.max(self.template.ttl);
        self.give_up_for(now, lease, rest);
    }

    /// Gives `lease` up and rests from it for `rest`.
    fn give_up_for(&mut self, now: Instant, lease: &str, rest: std::time::Duration) {
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        if self.shutting_down {
            return;
        }
        if let Some(&i) = self.index.get(lease) {
            let slot = &mut self.slots[i];
            if i < self.member && slot.machine.leadership().is_leader() && !slot.yielding {
                slot.yielding = true;
                let until = now + rest;
                slot.rest_until = Some(until);
                let at = self.wakeups.partition_point(|&t| t < until);
                self.wakeups.insert(at, until);
                slot.machine.handle_shutdown(now);
                self.drain(now, i);
            }
        }
        self.settle(now);
    }

    /// Stop: every lease's work stops and every held lease (and the
    /// membership row) is released, then `Finished`.
    pub fn handle_shutdown(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        for i in 0..self.slots.len() {
            self.slots[i].machine.handle_shutdown(now);
            self.drain(now, i);
            // An acquire still waiting for its batch never reached the
            // database: it is not sent now (a set shutting down takes no
            // row), and its machine hears that it failed, so it finishes.
            if let Some((request, Operation::Acquire)) = self.slots[i].queued {
                self.slots[i].queued = None;
                self.slots[i]
                    .machine
                    .handle_reply(now, request, Reply::Failed(Failure::Transient));
                self.drain(now, i);
            }
        }
        self.settle(now);
    }

    /// Every input checks the deadlines first, as a lone lease's does
    /// (DESIGN §4b): a term whose deadline has passed ends now, whatever
    /// the input is about, so no input leaves a lapsed lease held.
    fn step_deadlines(&mut self, now: Instant) {
        for i in 0..self.slots.len() {
            if self.slots[i]
                .machine
                .leader_deadline()
                .is_some_and(|deadline| deadline <= now)
            {
                self.slots[i].machine.handle_timeout(now);
                self.drain(now, i);
            }
        }
    }

    /// Takes one lease machine's commands: statements wait for the next
    /// batch, the rest go to the driver under the lease's name (the
    /// membership row's stay inside).
    fn drain(&mut self, now: Instant, i: usize) {
        while let Some(command) = self.slots[i].machine.poll_command() {
            let name = self.slots[i].name.clone();
            // The membership rows' commands stay inside.
            let member = i >= self.member;
            match command {
                Command::Execute { request, operation } => {
                    self.slots[i].queued = Some((request, operation));
                }
                Command::Cancel { request } => {
                    let slot = &mut self.slots[i];
                    if slot.queued.is_some_and(|(q, _)| q == request) {
                        slot.queued = None;
                    }
                    if slot.sent == Some(request) {
                        slot.sent = None;
                    }
                }
                Command::StartWork { epoch } if !member => {
                    self.commands
                        .push_back(SetCommand::StartWork { lease: name, epoch });
                }
                #[cfg(feature = "mutants")]
                Command::StopWork { .. }
                    if !member
                        && self.slots[i].yielding
                        && self.mutation == crate::state::Mutation::SetYieldKeepsWork => {}
                #[cfg(feature = "mutants")]
                Command::StopWork {
                    reason: crate::protocol::Demotion::HandedOver,
                    ..
                } if !member && self.mutation == crate::state::Mutation::SetHandOverKeepsWork => {
                    self.after_hand_over(now, i);
                }
                Command::StopWork { epoch, reason } if !member => {
                    // A hand-over (for a better member, or for this
                    // node's failing probe): the share leaves it alone.
                    if reason == crate::protocol::Demotion::HandedOver
                        || (reason == crate::protocol::Demotion::Unhealthy
                            && self.slots[i].machine.is_handing_over())
                    {
                        self.after_hand_over(now, i);
                    }
                    self.slots[i].stopping = true;
                    self.commands.push_back(SetCommand::StopWork {
                        lease: name,
                        epoch,
                        reason,
                    });
                }
                Command::Publish(leadership) if !member => {
                    self.commands.push_back(SetCommand::Publish {
                        lease: name,
                        leadership,
                    });
                }
                Command::StartWork { .. } | Command::StopWork { .. } | Command::Publish(_) => {}
                // Whether the set watches is the set's call (`settle`).
                Command::WatchChanges(_) => {}
                Command::Finished => self.on_machine_finished(now, i),
            }
        }
        // A renewal still waiting for its batch when its term ended (the
        // deadline passed meanwhile) must not go out: it would extend the
        // row of a lease this node no longer leads. It never reached the
        // database: its machine hears that it failed.
        if let Some((request, Operation::Renew { .. })) = self.slots[i].queued {
            if !self.slots[i].machine.leadership().is_leader() {
                self.slots[i].queued = None;
                self.slots[i]
                    .machine
                    .handle_reply(now, request, Reply::Failed(Failure::Transient));
                self.drain(now, i);
            }
        }
    }

    fn on_machine_finished(&mut self, now: Instant, i: usize) {
        let slot = &mut self.slots[i];
        slot.queued = None;
        slot.sent = None;
        slot.stopping = false;
        if slot.yielding && !self.shutting_down {
            // Given back for the share: a fresh follower, out of the share
            // until the plan wants it again.
            slot.yielding = false;
            slot.seen = Seen::Free;
            // An offer taken and given up again is used up: taking it
            // back at once would start and stop its work in a loop.
            slot.offered_until = None;
            slot.untaken = None;
            let mut config = slot.machine.config().clone();
            config.seed = config.seed.wrapping_add(1);
            if let Ok(mut machine) = LeaseState::own_row(config, now) {
                machine.set_contending(now, false);
                machine.release_lapsed_terms(self.template.by_liveness && i < self.member);
                #[cfg(feature = "mutants")]
                machine.set_mutation(self.mutation);
                slot.machine = machine;
            }
        } else if !self.shutting_down {
            // A fatal failure (the table is gone or malformed): the whole
            // set stops, as a lone lease would.
            self.handle_shutdown(now);
        }
    }
}
