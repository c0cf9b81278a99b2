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

mod protocol;
pub mod share;

pub use protocol::{Batch, BatchKind, BatchReply, SetCommand};

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use crate::config::Config;
use crate::error::ConfigError;
use crate::names::{Epoch, HolderId, LeaseName};
use crate::protocol::{Command, Failure, Leadership, Operation, Reply, RequestId};
use crate::sql::{LeaseRow, MEMBER_PREFIX};
use crate::state::LeaseState;
use crate::time::Instant;

/// The most leases one set may hold (the CLI's `--name` limit too).
pub const MAX_LEASES: usize = 100_000;

/// The most leases one renewal or release batch carries (besides the
/// node's membership row). A batch of 1,000 renews in a few milliseconds
/// on PostgreSQL (`set_scale`: 7.4–8.6 ms here), far inside any request
/// timeout the timings allow; one of 10,000 took 100 ms on a quiet machine
/// and outlived a 500 ms request timeout (ttl 2 s) on a loaded one, so a
/// node holding every lease lost them all by expiry. A node holding more
/// sends several back to back, each in name order (DESIGN §9).
pub const MAX_BATCH: usize = 1_000;

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
    preference: u64,
}

struct InFlight {
    id: RequestId,
    kind: BatchKind,
    items: Vec<usize>,
    sent_at: Instant,
    give_up: Instant,
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
pub struct LeaseSet {
    template: Config,
    slots: Vec<Slot>,
    index: HashMap<String, usize>,
    /// The membership row's slot (the last one).
    member: usize,
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
    /// Live members other than this node, with their rows' expiry.
    members: Vec<(HolderId, Instant)>,
    /// Instants at which a row seen by the last survey lapses: the share
    /// is planned again then.
    wakeups: Vec<Instant>,
    /// Per lease: whether this node ranks first for it among `ranked_among`
    /// (rendezvous hashing). Nodes try the free leases they rank first for
    /// before any other, so nodes short of their share at the same time
    /// reach for different leases instead of colliding on the same rows.
    ranks_first: Vec<bool>,
    /// The live members `ranks_first` was computed for.
    ranked_among: Vec<HolderId>,
    shutting_down: bool,
    finished: bool,
    commands: VecDeque<SetCommand>,
}

impl LeaseSet {
    /// A node contending for `leases` with the timings and holder of
    /// `template` (its lease name is ignored). Rejects an empty set, more
    /// than [`MAX_LEASES`], a repeated name, a name in the membership
    /// namespace, and timings [`Config::validate`] rejects.
    pub fn new(
        template: Config,
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
        let member_name = LeaseName::new(&format!("{MEMBER_PREFIX}{}", template.holder))?;
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
            let mut config = template.clone();
            config.lease = name.clone();
            config.seed = template.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut machine = LeaseState::new(config, now)?;
            slots.push(Slot {
                preference: share::preference(&template.holder, name.as_str()),
                name,
                machine: {
                    // Nothing competes before the first survey has told
                    // the node its share.
                    machine.set_contending(now, false);
                    machine
                },
                queued: None,
                sent: None,
                seen: Seen::Unknown,
                stopping: false,
                yielding: false,
                rest_until: None,
            });
        }
        let member = slots.len() - 1;
        if let Some(slot) = slots[..member]
            .iter()
            .find(|s| s.name.as_str().starts_with(MEMBER_PREFIX))
        {
            return Err(ConfigError::ReservedLease {
                name: slot.name.as_str().chars().take(80).collect(),
            });
        }
        // The membership row always competes: nobody else wants it.
        slots[member].machine.set_contending(now, true);
        Ok(LeaseSet {
            template,
            slots,
            index,
            member,
            next_request: 0,
            in_flight: None,
            next_survey: now,
            surveys: 0,
            resurvey: false,
            members: Vec::new(),
            wakeups: Vec::new(),
            ranks_first: Vec::new(),
            ranked_among: Vec::new(),
            shutting_down: false,
            finished: false,
            commands: VecDeque::with_capacity(64),
        })
    }
}

impl LeaseSet {
    /// The configuration every lease of the set runs with (its lease name
    /// is the first lease's).
    pub fn config(&self) -> &Config {
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
        (i != self.member).then(|| self.slots[i].machine.leadership())
    }

    /// The leases this node leads, with their epochs, in set order.
    pub fn held(&self) -> impl Iterator<Item = (&LeaseName, Epoch)> {
        self.slots[..self.member]
            .iter()
            .filter_map(|s| s.machine.leadership().leader_epoch().map(|e| (&s.name, e)))
    }

    /// The live members this node knows of (itself included), by holder
    /// id, as of `now`.
    pub fn members(&self, now: Instant) -> Vec<HolderId> {
        let mut live: Vec<HolderId> = self
            .members
            .iter()
            .filter(|(_, until)| *until > now)
            .map(|(h, _)| h.clone())
            .chain(std::iter::once(self.template.holder.clone()))
            .collect();
        live.sort();
        live.dedup();
        live
    }

    /// How many leases this node aims for as of `now` (its fair share), or
    /// `None` before the second survey. The first survey may miss nodes
    /// that started at the same moment (their membership rows not yet
    /// written); planning from it, the first node of a cluster started
    /// together would take every lease and then give most of them back.
    /// One interval later every node that started with it is visible.
    pub fn target(&self, now: Instant) -> Option<usize> {
        if self.surveys < 2 {
            return None;
        }
        let live = self.members(now);
        let rank = live
            .iter()
            .position(|h| *h == self.template.holder)
            .unwrap_or(0);
        Some(share::target(self.member, live.len(), rank))
    }

    /// Whether the driver should look for other connections' commits as
    /// of `now` (SQLite: watch the file or poll its change counter, then
    /// [`LeaseSet::handle_survey_request`]): only while this node is under
    /// its share is there something a release could give it.
    pub fn wants_changes(&self, now: Instant) -> bool {
        !self.finished && !self.shutting_down && self.deficit(now) > 0
    }

    /// How many more leases this node is after as of `now`: its target
    /// minus what it holds and what it is already trying for. A driver
    /// uses it to look for releases only while there is something to take
    /// (SQLite's change check).
    pub fn deficit(&self, now: Instant) -> usize {
        let Some(target) = self.target(now) else {
            return 0;
        };
        let have = self.slots[..self.member]
            .iter()
            .filter(|s| {
                !s.yielding && (s.machine.leadership().is_leader() || s.machine.is_contending())
            })
            .count();
        target.saturating_sub(have)
    }

    /// While leading, the local instant at which `lease`'s term ends unless
    /// renewed (for the work's deadline).
    pub fn deadline(&self, lease: &str) -> Option<Instant> {
        let &i = self.index.get(lease)?;
        self.slots[i].machine.leader_deadline()
    }

    /// The survey's staleness bound in milliseconds: a lease row with less
    /// time left than this was not renewed for at least an interval, so
    /// the survey lists it (with the free and lapsed ones) and this node
    /// can try it right at its expiry. ttl − 2·interval, at least one
    /// interval.
    pub fn stale_millis(&self) -> i64 {
        let stale = self
            .template
            .ttl
            .saturating_sub(self.template.interval * 2)
            .max(self.template.interval);
        i64::try_from(stale.as_millis()).unwrap_or(i64::MAX)
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

    /// The result of batch `id`; ignored unless it is the batch in flight.
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: BatchReply) {
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        let batch = match self.in_flight.take() {
            Some(batch) if batch.id == id => batch,
            other => {
                self.in_flight = other;
                return;
            }
        };
        match (batch.kind, reply) {
            (_, BatchReply::Failed(failure)) => self.fail_items(now, &batch, failure),
            (BatchKind::Acquire, BatchReply::Acquired(outcomes)) => {
                let mut by_name: HashMap<String, Reply> = outcomes.into_iter().collect();
                for &i in &batch.items {
                    let reply = by_name
                        .remove(self.slots[i].name.as_str())
                        .unwrap_or(Reply::Failed(Failure::Transient));
                    self.answer(now, &batch, i, reply);
                }
            }
            (BatchKind::Renew | BatchKind::Release, BatchReply::Matched(names)) => {
                let matched: HashSet<String> = names.into_iter().collect();
                for &i in &batch.items {
                    let reply = if matched.contains(self.slots[i].name.as_str()) {
                        Reply::Accepted
                    } else {
                        Reply::Rejected
                    };
                    self.answer(now, &batch, i, reply);
                }
            }
            (BatchKind::Survey, BatchReply::Survey(rows)) => {
                self.on_survey(now, batch.sent_at, &rows)
            }
            // A reply of the wrong shape is a driver bug: a failed attempt.
            _ => self.fail_items(now, &batch, Failure::Transient),
        }
        // Every input checks the deadlines: a driver that goes from one
        // batch straight to the next (a database failing fast) must not
        // keep a lapsed term alive.
        self.handle_timeout(now);
    }

    /// Another contender released `lease` (a PostgreSQL notification): if
    /// it is in the set and this node is under its share, it tries at once.
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
            if let Some(holder) = lease.strip_prefix(MEMBER_PREFIX) {
                // A node left cleanly: its share is free now, not at its
                // membership row's expiry.
                self.members.retain(|(h, _)| h.as_str() != holder);
            } else if let Some(&i) = self.index.get(lease) {
                if i != self.member && !self.slots[i].machine.leadership().is_leader() {
                    self.slots[i].seen = Seen::Free;
                    self.slots[i].machine.handle_release_notice(now);
                    self.drain(now, i);
                }
            }
        }
        self.settle(now);
    }

    /// Survey at once: the database changed in a way the driver cannot
    /// attribute to a lease (the SQLite change check), or notices may have
    /// been lost (PostgreSQL's listener reconnected).
    pub fn handle_survey_request(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        if self.shutting_down {
            return;
        }
        self.next_survey = self.next_survey.min(now);
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
        if self.finished {
            return;
        }
        self.step_deadlines(now);
        if self.shutting_down {
            return;
        }
        if let Some(&i) = self.index.get(lease) {
            let slot = &mut self.slots[i];
            if i != self.member && slot.machine.leadership().is_leader() && !slot.yielding {
                slot.yielding = true;
                let until = now + self.template.ttl;
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

    /// Carries one lease's answer to its machine, if the batch still
    /// carries its request.
    fn answer(&mut self, now: Instant, batch: &InFlight, i: usize, reply: Reply) {
        let Some(request) = self.slots[i].sent.take() else {
            return;
        };
        match &reply {
            Reply::Acquired { .. } => self.slots[i].seen = Seen::Free,
            Reply::Held { expires_in, .. } => {
                let until = batch.sent_at + *expires_in;
                let believed_free = match self.slots[i].seen {
                    Seen::Free => true,
                    Seen::Held { until: Some(t) } => t <= batch.sent_at,
                    _ => false,
                };
                let stale = Duration::from_millis(self.stale_millis().unsigned_abs());
                if believed_free && *expires_in >= stale && i != self.member {
                    self.resurvey = true;
                    self.next_survey = self.next_survey.min(now);
                }
                self.slots[i].seen = Seen::Held { until: Some(until) };
                // Tried a little early (a lapsing row still had a few
                // milliseconds left): plan again right at its expiry
                // instead of waiting for the next survey.
                if *expires_in < stale {
                    let at = self.wakeups.partition_point(|&t| t < until);
                    if self.wakeups.get(at) != Some(&until) {
                        self.wakeups.insert(at, until);
                    }
                }
            }
            _ => {}
        }
        let held_elsewhere = matches!(reply, Reply::Held { .. });
        self.slots[i].machine.handle_reply(now, request, reply);
        if held_elsewhere && i != self.member {
            // Held by another node: no stealing, and no retrying at its
            // expiry either unless the survey shows it going stale.
            self.slots[i].machine.set_contending(now, false);
        }
        self.drain(now, i);
    }

    fn fail_items(&mut self, now: Instant, batch: &InFlight, failure: Failure) {
        for &i in &batch.items {
            self.answer(now, batch, i, Reply::Failed(failure));
        }
    }

    fn on_survey(&mut self, now: Instant, sent_at: Instant, rows: &[LeaseRow]) {
        self.surveys = self.surveys.saturating_add(1);
        self.resurvey = false;
        self.next_survey = sent_at + self.template.interval;
        self.members.clear();
        self.wakeups.clear();
        let resting = self
            .slots
            .iter()
            .filter_map(|s| s.rest_until)
            .filter(|&t| t > now);
        self.wakeups.extend(resting);
        let stale = Duration::from_millis(self.stale_millis().unsigned_abs());
        let mut listed = vec![false; self.member];
        for row in rows {
            let left = row.expires_in_ms.unwrap_or(0);
            let until = sent_at + Duration::from_millis(left.max(0).unsigned_abs());
            if let Some(holder) = row.name.strip_prefix(MEMBER_PREFIX) {
                if holder == self.template.holder.as_str() || row.holder.is_none() || left <= 0 {
                    continue;
                }
                if let Ok(holder) = HolderId::new(holder) {
                    self.members.push((holder, until));
                    if until < sent_at + stale {
                        self.wakeups.push(until);
                    }
                }
                continue;
            }
            let Some(&i) = self.index.get(&row.name) else {
                continue;
            };
            if i == self.member {
                continue;
            }
            listed[i] = true;
            let slot = &mut self.slots[i];
            if slot.machine.leadership().is_leader() {
                continue;
            }
            let free = row.holder.is_none() || left <= 0;
            slot.seen = if free {
                Seen::Free
            } else {
                self.wakeups.push(until);
                Seen::Held { until: Some(until) }
            };
            slot.machine.handle_row_seen(now, sent_at, row);
            self.drain(now, i);
        }
        for (i, listed) in listed.into_iter().enumerate() {
            if !listed && self.slots[i].seen != Seen::Unknown {
                // Not free and not stale: someone renews it on time.
                self.slots[i].seen = Seen::Held { until: None };
            }
        }
        self.wakeups.sort_unstable();
        self.wakeups.dedup();
        self.wakeups.retain(|&t| t > now);
    }

    /// Takes one lease machine's commands: statements wait for the next
    /// batch, the rest go to the driver under the lease's name (the
    /// membership row's stay inside).
    fn drain(&mut self, now: Instant, i: usize) {
        while let Some(command) = self.slots[i].machine.poll_command() {
            let name = self.slots[i].name.clone();
            let member = i == self.member;
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
                Command::StopWork { epoch, reason } if !member => {
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
            let mut config = slot.machine.config().clone();
            config.seed = config.seed.wrapping_add(1);
            if let Ok(mut machine) = LeaseState::new(config, now) {
                machine.set_contending(now, false);
                slot.machine = machine;
            }
        } else if !self.shutting_down {
            // A fatal failure (the table is gone or malformed): the whole
            // set stops, as a lone lease would.
            self.handle_shutdown(now);
        }
    }

    /// After every input: plan the share, send the next batch, finish.
    fn settle(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        self.plan(now);
        if self.in_flight.is_none() {
            self.send_next(now);
        }
        if self.shutting_down
            && self.in_flight.is_none()
            && self.slots.iter().all(|s| s.machine.is_finished())
        {
            self.finished = true;
            self.commands.push_back(SetCommand::Finished);
        }
    }

    /// The fair share: give up the surplus, compete for the deficit.
    fn plan(&mut self, now: Instant) {
        if self.shutting_down {
            return;
        }
        let Some(target) = self.target(now) else {
            return;
        };
        let leases = self.member;
        let held: Vec<usize> = (0..leases)
            .filter(|&i| self.slots[i].machine.leadership().is_leader() && !self.slots[i].yielding)
            .collect();
        if held.len() > target {
            let mut surplus = held;
            surplus.sort_by_key(|&i| self.slots[i].preference);
            for &i in &surplus[..surplus.len() - target] {
                self.slots[i].yielding = true;
                self.slots[i].machine.handle_shutdown(now);
                self.drain(now, i);
            }
            return;
        }
        let is_candidate = |s: &Slot| {
            !s.yielding
                && s.rest_until.is_none_or(|t| t <= now)
                && !s.machine.is_finished()
                && !s.machine.leadership().is_leader()
                && !s.machine.is_contending()
        };
        let mut competing: Vec<usize> = (0..leases)
            .filter(|&i| {
                let s = &self.slots[i];
                !s.yielding && !s.machine.leadership().is_leader() && s.machine.is_contending()
            })
            .collect();
        let want = target - held.len();
        if competing.len() > want {
            // Fewer needed (a lease was won, the share shrank): stop the
            // attempts this node prefers least that are not in flight.
            competing.sort_by_key(|&i| self.slots[i].preference);
            let mut extra = competing.len() - want;
            for &i in &competing {
                if extra == 0 {
                    break;
                }
                if !self.slots[i].machine.is_busy() {
                    self.slots[i].machine.set_contending(now, false);
                    self.drain(now, i);
                    extra -= 1;
                }
            }
            return;
        }
        let need = want - competing.len();
        if need == 0 || self.resurvey {
            return;
        }
        self.rank_first_for(now);
        // The leases this node ranks first for, then the others; within
        // each, free or lapsed rows before rows never seen, the most
        // preferred first.
        let mut candidates: Vec<(u8, std::cmp::Reverse<u64>, usize)> = (0..leases)
            .filter(|&i| is_candidate(&self.slots[i]))
            .filter_map(|i| {
                let rank = match self.slots[i].seen {
                    Seen::Free => 0,
                    Seen::Held { until: Some(t) } if t <= now => 0,
                    Seen::Unknown => 1,
                    Seen::Held { .. } => return None,
                };
                let rank = if self.ranks_first.get(i).copied().unwrap_or(false) {
                    rank
                } else {
                    rank + 2
                };
                Some((rank, std::cmp::Reverse(self.slots[i].preference), i))
            })
            .collect();
        // Only the best `need` are wanted: select them in linear time
        // (a set may have 100,000 leases and plans after every input).
        if candidates.len() > need {
            candidates.select_nth_unstable(need);
            candidates.truncate(need);
        }
        candidates.sort_unstable();
        for &(_, _, i) in &candidates {
            self.slots[i].machine.set_contending(now, true);
            self.slots[i].machine.handle_release_notice(now);
            self.drain(now, i);
        }
    }

    /// Recomputes which leases this node ranks first for, when the live
    /// members changed: O(leases × members), once per membership change.
    fn rank_first_for(&mut self, now: Instant) {
        let live = self.members(now);
        if live == self.ranked_among && self.ranks_first.len() == self.member {
            return;
        }
        let me = &self.template.holder;
        self.ranks_first = self.slots[..self.member]
            .iter()
            .map(|slot| {
                live.iter()
                    .filter(|h| *h != me)
                    .all(|h| share::preference(h, slot.name.as_str()) < slot.preference)
            })
            .collect();
        self.ranked_among = live;
    }

    /// Sends the next batch: releases whose work stopped, then renewals,
    /// then acquires, then the survey when due.
    fn send_next(&mut self, now: Instant) {
        // Renewals first: a held lease's term never waits behind a batch
        // of another kind (a release of the surplus, an acquire), however
        // many batches a node holding thousands of leases needs.
        if self.send_due(now, BatchKind::Renew) {
            return;
        }
        let release: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                let s = &self.slots[i];
                !s.stopping && matches!(s.queued, Some((_, Operation::Release { .. })))
            })
            .collect();
        if !release.is_empty() {
            return self.send(now, BatchKind::Release, release);
        }
        if self.resurvey && !self.shutting_down {
            return self.send(now, BatchKind::Survey, Vec::new());
        }
        if self.send_due(now, BatchKind::Acquire) {
            return;
        }
        if !self.shutting_down && now >= self.next_survey {
            self.send(now, BatchKind::Survey, Vec::new());
        }
    }

    /// Sends the renewals (or the acquires) that are due, if any, with
    /// every one due within half an interval brought forward, so the
    /// leases of a node keep renewing (and polling) together.
    fn send_due(&mut self, now: Instant, kind: BatchKind) -> bool {
        let due = |s: &Slot| {
            matches!(
                (kind, s.queued),
                (BatchKind::Renew, Some((_, Operation::Renew { .. })))
                    | (BatchKind::Acquire, Some((_, Operation::Acquire)))
            )
        };
        if !self.slots.iter().any(due) {
            return false;
        }
        let half = self.template.interval / 2;
        for i in 0..self.slots.len() {
            if self.slots[i].queued.is_none() {
                let leading = self.slots[i].machine.leadership().is_leader();
                if leading == (kind == BatchKind::Renew) {
                    self.slots[i].machine.hasten(now, half);
                    self.drain(now, i);
                }
            }
        }
        let items: Vec<usize> = (0..self.slots.len())
            .filter(|&i| due(&self.slots[i]))
            .collect();
        self.send(now, kind, items);
        true
    }

    fn send(&mut self, now: Instant, kind: BatchKind, mut items: Vec<usize>) {
        // Sorted by name, byte-wise: every batch on every node then locks
        // rows in one order (DESIGN §9), so batches never deadlock.
        items.sort_unstable_by(|&a, &b| {
            self.slots[a].name.as_str().cmp(self.slots[b].name.as_str())
        });
        // A renewal or release of at most MAX_BATCH leases (the membership
        // row rides along): the rest stay queued and go in the next batch
        // of their kind, sent as soon as this one is answered. Acquires are
        // not cut: a node short of thousands takes them in one statement
        // (nothing it holds waits on it), and cutting them slowed a
        // cluster's first election from 1.3 to 3.6 intervals (set_scale).
        if kind != BatchKind::Acquire && items.len() > MAX_BATCH {
            let member = self.member;
            let mut leases = 0;
            items.retain(|&i| {
                leases += usize::from(i != member);
                i == member || leases <= MAX_BATCH
            });
        }
        self.next_request += 1;
        let id = RequestId(self.next_request);
        let mut batch = Batch {
            kind,
            items: Vec::with_capacity(items.len()),
        };
        for &i in &items {
            let slot = &mut self.slots[i];
            let (request, operation) = slot.queued.take().expect("only queued leases are batched");
            slot.sent = Some(request);
            batch.items.push((slot.name.clone(), operation.epoch()));
        }
        if kind == BatchKind::Survey {
            // The next survey is planned from this one's send; until its
            // reply, no other is due.
            self.next_survey = now + self.template.interval;
        }
        let give_up = now + self.template.request_timeout;
        let end_by = self
            .slots
            .iter()
            .filter_map(|s| s.machine.leader_deadline())
            .fold(give_up, Instant::min);
        self.in_flight = Some(InFlight {
            id,
            kind,
            items,
            sent_at: now,
            give_up,
        });
        self.commands.push_back(SetCommand::Execute {
            request: id,
            batch,
            end_by,
        });
    }
}
