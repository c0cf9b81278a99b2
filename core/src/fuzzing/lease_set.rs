//! Fuzz body: arbitrary inputs into one [`LeaseSet`], with the contract of
//! DESIGN §9 checked after every step.
//!
//! The harness plays a careless driver of a set of three leases: it
//! answers batches with the right, stale or random id; acquire results
//! that grant, refuse or leave out any lease; renew and release results
//! that match any subset of the names; surveys that list any rows (free,
//! held, lapsed, other members, names outside the set); failed batches;
//! release notices, change notices, health verdicts, confirmations of stopped work (also
//! for work it was never told to stop), give-ups, planned handovers (and
//! renewals that read an operator's request), readings of the
//! database clock and shutdowns, at instants that only move forward. It
//! mirrors what the commands told it and checks the set against that:
//!
//! 1. no input panics;
//! 2. request ids strictly increase and at most one batch is outstanding
//!    (until its reply is delivered or a `Cancel` abandons it); a batch
//!    names distinct leases of the set (or the membership row, or the
//!    unhealthy row), renew and
//!    release items carry an epoch, acquire items none;
//! 3. per lease: `StartWork` only while not working, matched by a
//!    `StopWork` of the same epoch before the next; a published `Leader`
//!    carries this node's id and comes with its `StartWork`; what was
//!    published is what [`LeaseSet::leadership`] reports, and
//!    [`LeaseSet::held`] lists exactly the leases published leader; the
//!    membership row is never published nor worked;
//! 4. a held lease has a deadline later than now; a batch's `end_by` is
//!    no later than its give-up (a request timeout after now) nor than any
//!    held lease's deadline;
//! 5. a renew batch names only leases held (or the membership row), an
//!    acquire batch only leases not held; after shutdown no acquire;
//! 6. after `Finished` nothing more and `poll_timeout` is `None`; until
//!    then it is `Some`, and never in the past after a timeout;
//! 7. a shutdown finishes within a few timeouts, no work left running
//!    (work told to stop may still be stopping: the driver joins it);
//! 8. the same bytes give the same commands (determinism).

use std::collections::BTreeMap;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};

use crate::sql::{LeaseRow, MEMBER_PREFIX};
use crate::{
    BatchKind, BatchReply, Epoch, Failure, HolderId, Instant, LeaseName, LeaseSet, Reply,
    RequestId, Role, SetCommand, SetConfig,
};

/// The set's leases.
const LEASES: [&str; 3] = ["a", "b", "c"];

/// Inputs per run.
const MAX_INPUTS: usize = 256;

/// Runs one fuzz input. Panics when an invariant breaks.
pub fn run(data: &[u8]) {
    super::deterministic(data, execute);
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum When {
    Same,
    /// `ttl · n / 256` later: up to 4 ttls.
    Later(u8),
    Millis(u16),
    AtWakeup,
}

/// Which request id a reply carries: mostly the batch in flight, so that
/// random inputs reach terms at all.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Which {
    InFlight,
    AlsoInFlight,
    StillInFlight,
    Stale(u8),
    Any(u64),
}

/// One lease's outcome in an acquire result.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Outcome {
    Acquired(u8),
    AcquiredToo(u8),
    Held(bool, u8, u16),
    Missing,
}

/// One row of a survey.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Row {
    /// A lease (0..3), a member row (3..6), an unhealthy member row (6), a
    /// name outside the set.
    who: u8,
    holder: Option<bool>,
    epoch: u8,
    expires_in_ms: i16,
}

/// A batch's result.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Answer {
    /// The kind of result the batch in flight expects: for an acquire,
    /// `outcomes` per item; for renew or release, the items in `mask`;
    /// for a survey, the first `rows` of `listed`.
    Fitting {
        outcomes: [Outcome; 4],
        mask: u8,
        listed: [Row; 4],
        rows: u8,
    },
    AlsoFitting {
        outcomes: [Outcome; 4],
        mask: u8,
        listed: [Row; 4],
        rows: u8,
    },
    /// A result of another kind than the batch's.
    Mismatched(u8),
    Transient,
    /// Fatal when the byte is 0 (a fatal failure ends the set: rare, so
    /// that runs go on long enough to reach terms).
    Fatal(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Input {
    Timeout(When),
    Wakeup,
    Reply(When, Which, Answer),
    Answer(Answer),
    ReleaseNotice(When, u8),
    Change(When),
    WorkStopped(When, u8),
    GiveUp(When, u8),
    DbClock(When, i32),
    /// The health probe's verdict (DESIGN §9 "Members' health").
    Health(When, bool),
    /// A shutdown when the byte is 0 (rare, as `Answer::Fatal`), else a
    /// wake-up.
    Shutdown(When, u8),
    /// A planned handover of a lease (to node `n2`, or a release).
    HandOver(When, u8, bool),
}

struct Mirror {
    me: HolderId,
    ttl: Duration,
    timeout: Duration,
    now: Instant,
    outstanding: Option<(RequestId, BatchKind, Vec<String>)>,
    last_request: u64,
    /// Per lease: the epoch whose work runs, and whether it was told to
    /// stop (and not yet confirmed stopped).
    working: BTreeMap<String, (Epoch, bool)>,
    /// Per lease: the last published role and epoch.
    published: BTreeMap<String, (Role, Option<Epoch>)>,
    shutdown: bool,
    finished: bool,
    /// What the set last said of watching for changes.
    watching: bool,
    db_millis: i64,
    trace: Vec<SetCommand>,
}

fn execute(data: &[u8]) -> Vec<SetCommand> {
    let mut u = Unstructured::new(data);
    let ttl = Duration::from_millis(u.int_in_range(40..=60_000).unwrap_or(10_000));
    let me = HolderId::new("me").expect("valid");
    let mut template = SetConfig::with_ttl(me.clone(), ttl);
    template.seed = u.arbitrary().unwrap_or(0);
    if u.ratio(1, 2).unwrap_or(false) {
        template.jitter = Duration::ZERO;
    }
    let leases = LEASES
        .iter()
        .map(|n| LeaseName::new(n).expect("valid"))
        .collect();
    let start = Instant::from_nanos(u.int_in_range(0..=u64::from(u32::MAX)).unwrap_or(0));
    let mut set = LeaseSet::new(template.clone(), leases, start).expect("a valid set");
    assert_eq!(set.poll_command(), None, "a new set has no command");
    let mut m = Mirror {
        me,
        ttl,
        timeout: template.request_timeout,
        now: start,
        outstanding: None,
        last_request: 0,
        working: BTreeMap::new(),
        published: BTreeMap::new(),
        shutdown: false,
        finished: false,
        watching: false,
        db_millis: 1_000_000,
        trace: Vec::new(),
    };
    set.handle_timeout(start);
    m.check(&mut set, true);
    for _ in 0..MAX_INPUTS {
        if u.is_empty() {
            break;
        }
        let Ok(input) = u.arbitrary::<Input>() else {
            break;
        };
        m.step(&mut set, input);
    }
    m.step(&mut set, Input::Shutdown(When::Same, 0));
    for _ in 0..32 {
        if m.finished {
            break;
        }
        // A careful driver from here on: stopped work confirmed, batches
        // answered as failed (the database is gone).
        let stopping: Vec<String> = m
            .working
            .iter()
            .filter(|(_, (_, stop))| *stop)
            .map(|(n, _)| n.clone())
            .collect();
        for lease in stopping {
            m.working.remove(&lease);
            let now = m.now;
            set.handle_work_stopped(now, &lease);
            m.check(&mut set, false);
        }
        if m.outstanding.is_some() {
            m.step(
                &mut set,
                Input::Reply(When::Same, Which::InFlight, Answer::Transient),
            );
        } else {
            m.step(&mut set, Input::Timeout(When::AtWakeup));
        }
    }
    if std::env::var_os("PICOLEASE_FUZZ_VERBOSE").is_some() {
        let leaders = m
            .trace
            .iter()
            .filter(|c| matches!(c, SetCommand::StartWork { .. }))
            .count();
        eprintln!("{} commands, {leaders} terms started", m.trace.len());
    }
    assert!(m.finished, "shutdown did not finish");
    // Work told to stop may still be stopping (the driver joins it at its
    // end); none may be left running.
    assert!(
        m.working.values().all(|(_, stopping)| *stopping),
        "finished with work running: {:?}",
        m.working
    );
    m.trace
}

impl Mirror {
    fn time(&self, set: &LeaseSet, when: When) -> Instant {
        let next = match when {
            When::Same => self.now,
            When::Later(n) => self.now + self.ttl / 256 * u32::from(n),
            When::Millis(n) => self.now + Duration::from_millis(u64::from(n)),
            When::AtWakeup => set.poll_timeout().unwrap_or(self.now),
        };
        next.max(self.now)
    }

    fn lease(n: u8) -> &'static str {
        LEASES[usize::from(n) % LEASES.len()]
    }

    fn step(&mut self, set: &mut LeaseSet, input: Input) {
        if self.finished {
            return;
        }
        let mut timeout = false;
        match input {
            Input::Timeout(when) => {
                self.now = self.time(set, when);
                set.handle_timeout(self.now);
                timeout = true;
            }
            Input::Wakeup => {
                self.now = self.time(set, When::AtWakeup);
                set.handle_timeout(self.now);
                timeout = true;
            }
            Input::Answer(answer) => {
                return self.step(set, Input::Reply(When::Same, Which::InFlight, answer))
            }
            Input::Reply(when, which, answer) => {
                self.now = self.time(set, when);
                let in_flight = self.outstanding.clone();
                let id = match (which, &in_flight) {
                    (
                        Which::InFlight | Which::AlsoInFlight | Which::StillInFlight,
                        Some((id, _, _)),
                    ) => *id,
                    (Which::InFlight | Which::AlsoInFlight | Which::StillInFlight, None) => {
                        RequestId(self.last_request + 1)
                    }
                    (Which::Stale(n), _) => {
                        RequestId(self.last_request.saturating_sub(u64::from(n) + 1))
                    }
                    (Which::Any(n), _) => RequestId(n),
                };
                let reply = self.reply(
                    answer,
                    in_flight
                        .as_ref()
                        .map(|(_, k, items)| (*k, items.as_slice())),
                );
                if in_flight.as_ref().is_some_and(|(i, _, _)| *i == id) {
                    self.outstanding = None;
                }
                set.handle_reply(self.now, id, reply);
            }
            Input::ReleaseNotice(when, n) => {
                self.now = self.time(set, when);
                set.handle_release_notice(self.now, Self::lease(n));
            }
            Input::Change(when) => {
                self.now = self.time(set, when);
                set.handle_survey_request(self.now);
            }
            Input::WorkStopped(when, n) => {
                self.now = self.time(set, when);
                let lease = Self::lease(n);
                // Careless: confirms work it may never have been told to
                // stop; the mirror forgets the work only if it was.
                if self.working.get(lease).is_some_and(|(_, stop)| *stop) {
                    self.working.remove(lease);
                }
                set.handle_work_stopped(self.now, lease);
            }
            Input::GiveUp(when, n) => {
                self.now = self.time(set, when);
                set.handle_give_up(self.now, Self::lease(n));
            }
            Input::HandOver(when, n, named) => {
                self.now = self.time(set, when);
                let to = named.then(|| HolderId::reserved_for("n2").expect("valid"));
                set.handle_hand_over(self.now, Self::lease(n), to);
            }
            Input::DbClock(when, step) => {
                let sent = self.now;
                self.now = self.time(set, when);
                let elapsed = i64::try_from(self.now.saturating_duration_since(sent).as_millis())
                    .unwrap_or(i64::MAX);
                self.db_millis = self
                    .db_millis
                    .saturating_add(elapsed)
                    .saturating_add(i64::from(step));
                set.handle_db_clock(self.now, sent, self.db_millis);
            }
            Input::Health(when, healthy) => {
                self.now = self.time(set, when);
                set.handle_health(self.now, healthy);
            }
            Input::Shutdown(when, 1..) => return self.step(set, Input::Timeout(when)),
            Input::Shutdown(when, 0) => {
                self.now = self.time(set, when);
                set.handle_shutdown(self.now);
                self.shutdown = true;
            }
        }
        self.check(set, timeout);
    }

    fn reply(&self, answer: Answer, batch: Option<(BatchKind, &[String])>) -> BatchReply {
        let (outcomes, mask, listed, rows) = match answer {
            Answer::Fitting {
                outcomes,
                mask,
                listed,
                rows,
            }
            | Answer::AlsoFitting {
                outcomes,
                mask,
                listed,
                rows,
            } => (outcomes, mask, listed, rows),
            Answer::Mismatched(n) => {
                return match (n % 3, batch.map(|(k, _)| k)) {
                    (0, Some(BatchKind::Acquire)) | (1, _) => BatchReply::Matched(vec!["a".into()]),
                    (0, _) => BatchReply::Acquired(vec![(
                        "a".into(),
                        Reply::Acquired {
                            epoch: Epoch::new(1),
                        },
                    )]),
                    _ => BatchReply::Survey(Vec::new()),
                }
            }
            Answer::Transient => return BatchReply::Failed(Failure::Transient),
            Answer::Fatal(0) => return BatchReply::Failed(Failure::Fatal),
            Answer::Fatal(_) => return BatchReply::Failed(Failure::Transient),
        };
        let Some((kind, items)) = batch else {
            return BatchReply::Matched(Vec::new());
        };
        match kind {
            BatchKind::Acquire => BatchReply::Acquired(
                items
                    .iter()
                    .zip(outcomes.iter().cycle())
                    .filter_map(|(name, outcome)| match *outcome {
                        Outcome::Acquired(e) | Outcome::AcquiredToo(e) => Some((
                            name.clone(),
                            Reply::Acquired {
                                epoch: Epoch::new(u64::from(e) + 1),
                            },
                        )),
                        Outcome::Held(mine, e, left) => Some((
                            name.clone(),
                            Reply::Held {
                                // Every third "other" is nobody: a grace
                                // period after a server change.
                                holder: if mine {
                                    Some(self.me.clone())
                                } else if left % 3 == 0 {
                                    None
                                } else {
                                    Some(HolderId::new("other").expect("valid"))
                                },
                                epoch: Epoch::new(u64::from(e)),
                                expires_in: Duration::from_millis(u64::from(left)),
                            },
                        )),
                        Outcome::Missing => None,
                    })
                    .collect(),
            ),
            BatchKind::Renew | BatchKind::Release | BatchKind::HandOver => {
                let matched: Vec<String> = items
                    .iter()
                    .enumerate()
                    // Mostly everything: a zero mask matches all.
                    .filter(|(i, _)| mask == 0 || mask & (1 << (i % 8)) != 0)
                    .map(|(_, n)| n.clone())
                    .collect();
                // Now and then a renewal reads an operator's request, for
                // any name it lists (the membership row's included).
                match (kind, rows % 4, matched.first()) {
                    (BatchKind::Renew, 1, Some(first)) => BatchReply::Renewed {
                        asked: vec![(
                            first.clone(),
                            (mask % 2 == 0).then(|| HolderId::reserved_for("n2").expect("valid")),
                        )],
                        renewed: matched,
                    },
                    _ => BatchReply::Matched(matched),
                }
            }
            BatchKind::Survey => BatchReply::Survey(
                listed
                    .iter()
                    .take(usize::from(rows % 5))
                    .map(|row| LeaseRow {
                        name: match row.who % 8 {
                            w @ 0..=2 => LEASES[usize::from(w)].to_string(),
                            3 => format!("{MEMBER_PREFIX}other"),
                            4 => format!("{MEMBER_PREFIX}me"),
                            // A member that outranks this node: it hands
                            // every lease it leads over (DESIGN §9
                            // "Preferred members").
                            5 => crate::set::member_row_name(
                                &HolderId::new("other").expect("a valid id"),
                                &crate::Rank::new(5, Some("2.0")).expect("a valid rank"),
                            )
                            .expect("fits"),
                            // A member whose probe fails (DESIGN §9
                            // "Members' health"), or this node's own mark.
                            6 => crate::set::unhealthy_row_name(
                                &HolderId::new(if row.epoch % 2 == 0 { "other" } else { "me" })
                                    .expect("a valid id"),
                                &crate::Rank::default(),
                            )
                            .expect("fits"),
                            _ => "outside".to_string(),
                        },
                        holder: row
                            .holder
                            .map(|mine| if mine { "me" } else { "other" }.to_string()),
                        epoch: Epoch::new(u64::from(row.epoch)),
                        expires_in_ms: row.holder.map(|_| i64::from(row.expires_in_ms)),
                    })
                    .collect(),
            ),
        }
    }

    /// Takes every command of the last input and checks it against the
    /// mirror, then the set's own view.
    fn check(&mut self, set: &mut LeaseSet, after_timeout: bool) {
        let member = format!("{MEMBER_PREFIX}{}", self.me);
        let marked = format!("{MEMBER_PREFIX}~{}", self.me);
        while let Some(command) = set.poll_command() {
            assert!(!self.finished, "a command after Finished: {command:?}");
            match &command {
                SetCommand::Execute {
                    request,
                    batch,
                    end_by,
                } => {
                    assert!(request.0 > self.last_request, "request ids increase");
                    self.last_request = request.0;
                    assert!(self.outstanding.is_none(), "two batches outstanding");
                    let names: Vec<String> = batch
                        .items
                        .iter()
                        .map(|(n, _)| n.as_str().to_string())
                        .collect();
                    let mut sorted = names.clone();
                    sorted.sort();
                    sorted.dedup();
                    assert_eq!(sorted.len(), names.len(), "repeated names in {batch:?}");
                    for (name, epoch) in &batch.items {
                        let name = name.as_str();
                        assert!(
                            LEASES.contains(&name) || name == member || name == marked,
                            "{name} is not the set's"
                        );
                        match batch.kind {
                            BatchKind::Acquire => {
                                assert!(epoch.is_none());
                                assert!(!self.shutdown, "an acquire after shutdown");
                                assert!(
                                    set.leadership(name).is_none_or(|l| !l.is_leader()),
                                    "acquiring {name}, which it holds"
                                );
                            }
                            BatchKind::Renew => {
                                assert!(epoch.is_some());
                                assert!(
                                    name == member
                                        || name == marked
                                        || set.leadership(name).is_some_and(|l| l.is_leader()),
                                    "renewing {name}, which it does not hold"
                                );
                            }
                            BatchKind::Release => assert!(epoch.is_some()),
                            BatchKind::HandOver => {
                                assert!(epoch.is_some());
                                assert_eq!(batch.items.len(), 1, "one lease per hand-over");
                                assert_ne!(name, member, "the membership row is never handed");
                                assert_ne!(name, marked, "the unhealthy row is never handed");
                                assert!(
                                    set.leadership(name).is_some_and(|l| !l.is_leader()),
                                    "handing over {name}, whose term has not ended"
                                );
                                assert!(
                                    set.hand_over_in_flight()
                                        .is_some_and(
                                            |(lease, to)| lease.as_str() == name && to.is_some()
                                        ),
                                    "the hand-over in flight names its lease and successor"
                                );
                            }
                            BatchKind::Survey => panic!("a survey names no lease"),
                        }
                    }
                    assert!(
                        *end_by <= self.now + self.timeout,
                        "end_by past the give-up"
                    );
                    for (lease, _) in set.held() {
                        let deadline = set
                            .deadline(lease.as_str())
                            .expect("a held lease has a deadline");
                        assert!(*end_by <= deadline, "end_by past {lease}'s deadline");
                    }
                    self.outstanding = Some((*request, batch.kind, names));
                }
                SetCommand::Cancel { request } => {
                    if self
                        .outstanding
                        .as_ref()
                        .is_some_and(|(id, _, _)| id == request)
                    {
                        self.outstanding = None;
                    }
                }
                SetCommand::StartWork { lease, epoch } => {
                    let lease = lease.as_str();
                    assert_ne!(lease, member, "the membership row is never worked");
                    assert_ne!(lease, marked, "the unhealthy row is never worked");
                    assert!(!self.shutdown, "{lease}: work started after shutdown");
                    assert!(
                        self.working.get(lease).is_none_or(|(_, stop)| *stop),
                        "{lease}: work started while its last term's work runs"
                    );
                    assert_eq!(
                        self.published.get(lease),
                        Some(&(Role::Leader, Some(*epoch))),
                        "{lease}: StartWork without its Leader"
                    );
                    self.working.insert(lease.to_string(), (*epoch, false));
                }
                SetCommand::StopWork { lease, epoch, .. } => {
                    let lease = lease.as_str();
                    let running = self
                        .working
                        .get_mut(lease)
                        .expect("StopWork of work that runs");
                    assert_eq!(running.0, *epoch, "{lease}: StopWork of another epoch");
                    running.1 = true;
                }
                SetCommand::Publish { lease, leadership } => {
                    let lease = lease.as_str();
                    assert_ne!(lease, member, "the membership row is never published");
                    assert_ne!(lease, marked, "the unhealthy row is never published");
                    if leadership.is_leader() {
                        assert_eq!(leadership.holder.as_ref(), Some(&self.me));
                        assert!(leadership.epoch.is_some());
                    }
                    self.published
                        .insert(lease.to_string(), (leadership.role, leadership.epoch));
                }
                SetCommand::WatchChanges(on) => {
                    assert!(!self.finished, "WatchChanges after Finished");
                    assert_ne!(*on, self.watching, "WatchChanges({on}) told twice");
                    assert!(!(*on && self.shutdown), "watching while shutting down");
                    self.watching = *on;
                }
                SetCommand::Finished => {
                    self.finished = true;
                    self.outstanding = None;
                }
            }
            self.trace.push(command);
        }
        for lease in LEASES {
            let reported = set.leadership(lease).expect("a lease of the set");
            // The role is what was published (a lease given back for the
            // share gets a fresh follower machine, which forgets the
            // epoch it left; the leader's epoch is exact).
            if let Some(&(role, epoch)) = self.published.get(lease) {
                assert_eq!(reported.role, role, "{lease}: reported ≠ published");
                if role == Role::Leader {
                    assert_eq!(reported.epoch, epoch, "{lease}: reported ≠ published");
                }
            }
            let held = set.held().any(|(n, _)| n.as_str() == lease);
            assert_eq!(held, reported.is_leader(), "{lease}: held() ≠ leadership()");
            if held {
                let deadline = set.deadline(lease).expect("held: a deadline");
                assert!(deadline > self.now, "{lease}: held past its deadline");
                assert!(
                    self.working
                        .get(lease)
                        .is_some_and(|(e, _)| Some(*e) == reported.epoch),
                    "{lease}: held without its work"
                );
            }
        }
        match set.poll_timeout() {
            None => assert!(self.finished, "no wake-up before Finished"),
            Some(at) => {
                assert!(!self.finished, "a wake-up after Finished");
                if after_timeout {
                    assert!(
                        at > self.now
                            || self.outstanding.is_some()
                            || self.working.values().any(|(_, s)| *s),
                        "a wake-up in the past after a timeout: {at:?} ≤ {:?}",
                        self.now
                    );
                }
            }
        }
    }
}
