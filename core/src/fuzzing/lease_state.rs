//! Fuzz body: arbitrary inputs into one [`LeaseState`], with the contract
//! of DESIGN §4 and §6 checked after every step.
//!
//! The harness plays a careless driver: it delivers replies with the right
//! id, with stale, future and random ids, replies that do not fit the
//! operation, fatal failures, release notices and shutdowns, at instants
//! that either only move forward (the contract) or jump anywhere (a broken
//! clock, where only the structural invariants must hold). It mirrors what
//! the commands told it — the request in flight, the gated work running,
//! the leadership published — and checks the machine against that mirror:
//!
//! 1. no input panics;
//! 2. request ids strictly increase, and at most one `Execute` is
//!    outstanding (until its reply is delivered, a `Cancel` abandons it, or
//!    the machine finishes);
//! 3. a `StartWork { epoch }` comes only from an `Acquired { epoch }` reply
//!    to the acquire in flight, never after shutdown, and is matched by a
//!    `StopWork` for the same epoch before the next `StartWork`; `Finished`
//!    never leaves work running;
//! 4. a published `Leader` carries an epoch and this node's id, comes with
//!    the `StartWork` of that epoch, and the published state is what
//!    [`LeaseState::leadership`] reports; leading, the deadline and running
//!    work go together;
//! 5. renews carry the epoch being led, acquires are sent only by a
//!    follower, and after shutdown only releases are sent;
//! 6. after `Finished` nothing more; `poll_timeout` is `Some` exactly until
//!    then;
//! 7. with a monotone clock: while leader, `now < deadline`; renews are
//!    an interval or more apart (from the previous send) unless a release
//!    notice came since (a leader renews at once on one: its row may have
//!    been taken away); after a timeout the next wake-up is in the future
//!    (no busy loop);
//! 8. shutdown finishes within a few timeouts, with no reply at all;
//!    a planned handover (asked by the driver, or by a renewal's answer)
//!    stops the work before its hand-over (or release) is sent, and
//!    only a leader's term is handed over;
//! 9. the same bytes give the same commands (determinism);
//! 10. health (DESIGN §5): a demotion `unhealthy` comes only from a
//!     probe's verdict or a renewal's answer, `escalated` only from an
//!     escalation, and either stops the work before its hand-over.

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};

use crate::{
    Command, Config, Demotion, Epoch, Failure, HolderId, Instant, Leadership, LeaseName,
    LeaseState, Operation, Reply, RequestId, Role,
};

/// Commands a single input may produce; the machine's queue is allocated
/// once with room for these, so a step that produced more would allocate.
const MAX_COMMANDS_PER_INPUT: usize = 16;

/// Inputs per run: enough for several terms, short enough to stay fast.
const MAX_INPUTS: usize = 256;

/// Runs one fuzz input. Panics when an invariant breaks.
pub fn run(data: &[u8]) {
    super::deterministic(data, execute);
}

/// When an input happens, relative to the previous one.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum When {
    Same,
    /// `ttl · n / 1024` later: up to 64 ttls.
    Later(u16),
    /// A few nanoseconds or milliseconds later.
    Nanos(u32),
    /// Exactly at `poll_timeout()`, as a driver does.
    AtWakeup,
    /// One nanosecond before `poll_timeout()` (not earlier than now).
    JustBeforeWakeup,
    /// Back in time (non-monotone mode only; `Same` otherwise).
    Back(u32),
    /// Anywhere at all (non-monotone mode only; `Same` otherwise).
    Anywhere(u64),
}

/// Which request id a reply carries.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Which {
    InFlight,
    /// An older id: abandoned, answered, or never sent.
    Stale(u8),
    /// An id not issued yet.
    Future(u8),
    Any(u64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum EpochPick {
    /// One more than the largest epoch seen.
    Next,
    /// The largest epoch seen.
    Seen,
    Small(u8),
    Any(u64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum HolderPick {
    Me,
    Other(bool),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum ReplyPick {
    /// The success that fits the request in flight (acquired / accepted).
    Success(EpochPick),
    /// The refusal that fits it (held by another / rejected).
    Refusal(EpochPick, u32),
    Acquired(EpochPick),
    Held(HolderPick, EpochPick, u64),
    Accepted,
    Rejected,
    Transient,
    Fatal,
    /// A renewal accepted with an operator's handover request (to a
    /// node, or to anyone).
    HandOverAsked(bool),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Input {
    Timeout(When),
    Reply(When, Which, ReplyPick),
    ReleaseNotice(When),
    Shutdown(When),
    /// The driver asks for a planned handover (to a node, or to anyone).
    HandOver(When, bool),
    /// The health probe's verdict (DESIGN §5 "Work that fails").
    Health(When, bool),
    /// The work escalated: of the term led now (`true`), or of no term.
    Escalate(When, bool),
}

/// What the input being checked was, for the commands it produced.
#[derive(Debug, Clone, Copy)]
enum Cause {
    Timeout,
    /// A reply consumed by the machine as the answer to its request in
    /// flight; `acquired` is the epoch when it was an `Acquired` reply to
    /// an acquire.
    Answer {
        acquired: Option<Epoch>,
        renew_rejected: bool,
    },
    /// A reply the machine must ignore (wrong id).
    Ignored,
    ReleaseNotice,
    Shutdown,
    HandOver,
    Health,
    Escalate,
}

/// What the commands have told the harness so far.
struct Mirror {
    me: HolderId,
    ttl: Duration,
    interval: Duration,
    /// When the last statement was sent.
    last_sent: Option<Instant>,
    /// A release notice came since the last send (a leader may renew
    /// early on one).
    noticed: bool,
    monotone: bool,
    now: Instant,
    outstanding: Option<(RequestId, Operation)>,
    last_request: u64,
    working: Option<Epoch>,
    published: Leadership,
    shutdown: bool,
    finished: bool,
    /// What the machine last said of watching for changes.
    watching: bool,
    /// A planned handover stopped the work; its statement is still to be
    /// answered.
    handing_over: bool,
    max_epoch: u64,
    trace: Vec<Command>,
    /// Print every input and command (`PICOLEASE_FUZZ_VERBOSE=1`).
    verbose: bool,
}

/// The reservation a fuzzed handover hands to.
fn successor() -> HolderId {
    HolderId::reserved_for("other-1").expect("a valid node name")
}

fn config(u: &mut Unstructured<'_>) -> arbitrary::Result<Config> {
    let lease = LeaseName::new("fuzz").expect("valid");
    let holder = HolderId::new("me").expect("valid");
    let mut config = match u.int_in_range(0u8..=7)? {
        // Any durations at all: mostly rejected by validation.
        0 => {
            let mut c = Config::new(lease, holder);
            c.ttl = Duration::from_nanos(u.arbitrary()?);
            c.interval = Duration::from_nanos(u.arbitrary()?);
            c.request_timeout = Duration::from_nanos(u.arbitrary()?);
            c.drift = Duration::from_nanos(u.arbitrary()?);
            c.jitter = Duration::from_nanos(u.arbitrary()?);
            c
        }
        // The defaults derived from a ttl.
        1 | 2 => {
            let ttl = Duration::from_millis(u.int_in_range(10..=86_400_000)?);
            Config::with_ttl(lease, holder, ttl)
        }
        // Each timing an arbitrary fraction of the ttl.
        _ => {
            let ttl = Duration::from_millis(u.int_in_range(10..=600_000)?);
            let part = |u: &mut Unstructured<'_>, of: Duration, max: u32| {
                u.int_in_range(0..=max).map(|n| of / 256 * n)
            };
            let mut c = Config::with_ttl(lease, holder, ttl);
            c.interval = part(u, ttl, 130)?;
            c.request_timeout = part(u, ttl, 260)?;
            c.drift = part(u, ttl, 130)?;
            c.jitter = part(u, c.interval, 130)?;
            c
        }
    };
    config.seed = u.arbitrary()?;
    Ok(config)
}

fn execute(data: &[u8]) -> Vec<Command> {
    let mut u = Unstructured::new(data);
    let Ok(config) = config(&mut u) else {
        return Vec::new();
    };
    let monotone = !u.ratio(1, 4).unwrap_or(false);
    let start = Instant::from_nanos(if monotone {
        u.int_in_range(0..=u64::from(u32::MAX)).unwrap_or(0)
    } else {
        u.arbitrary().unwrap_or(0)
    });
    let me = config.holder.clone();
    let ttl = config.ttl;
    let mut lease = match LeaseState::new(config.clone(), start) {
        Ok(lease) => lease,
        Err(err) => {
            assert_eq!(Err(err.clone()), config.validate());
            assert!(!err.to_string().is_empty());
            return Vec::new();
        }
    };
    // A new machine is a running follower: it says it watches, nothing else.
    assert_eq!(lease.poll_command(), Some(Command::WatchChanges(true)));
    assert_eq!(
        lease.poll_command(),
        None,
        "a new machine has no other command"
    );
    assert_eq!(
        lease.poll_timeout(),
        Some(start),
        "a new machine acts at once"
    );
    assert_eq!(lease.leadership(), &Leadership::unknown());
    let mut m = Mirror {
        me,
        ttl,
        interval: config.interval,
        last_sent: None,
        noticed: false,
        monotone,
        now: start,
        outstanding: None,
        last_request: 0,
        working: None,
        published: Leadership::unknown(),
        shutdown: false,
        finished: false,
        watching: true,
        handing_over: false,
        max_epoch: 0,
        trace: Vec::new(),
        verbose: std::env::var_os("PICOLEASE_FUZZ_VERBOSE").is_some(),
    };
    if m.verbose {
        eprintln!("{config:?} monotone={monotone} start={start:?}");
    }
    for _ in 0..MAX_INPUTS {
        if u.is_empty() {
            break;
        }
        let Ok(input) = u.arbitrary::<Input>() else {
            break;
        };
        m.apply(&mut lease, input);
    }
    // Whatever happened, a shutdown finishes within a few timeouts even if
    // no reply ever comes.
    m.step(&mut lease, Input::Shutdown(When::Same));
    for _ in 0..4 {
        if m.finished {
            break;
        }
        m.step(&mut lease, Input::Timeout(When::AtWakeup));
    }
    assert!(m.finished, "shutdown did not finish within four timeouts");
    m.trace
}

impl Mirror {
    fn apply(&mut self, lease: &mut LeaseState, input: Input) {
        self.step(lease, input);
    }

    fn time(&self, lease: &LeaseState, when: When) -> Instant {
        let now = self.now;
        let wakeup = lease.poll_timeout().unwrap_or(now);
        let next = match when {
            When::Same => now,
            When::Later(n) => now + self.ttl / 1024 * u32::from(n),
            When::Nanos(n) => now + Duration::from_nanos(u64::from(n)),
            When::AtWakeup => wakeup,
            When::JustBeforeWakeup => wakeup - Duration::from_nanos(1),
            When::Back(n) if !self.monotone => now - Duration::from_micros(u64::from(n)),
            When::Anywhere(t) if !self.monotone => Instant::from_nanos(t),
            When::Back(_) | When::Anywhere(_) => now,
        };
        if self.monotone {
            next.max(now)
        } else {
            next
        }
    }

    fn epoch(&self, pick: EpochPick) -> Epoch {
        Epoch::new(match pick {
            EpochPick::Next => self.max_epoch.saturating_add(1),
            EpochPick::Seen => self.max_epoch,
            EpochPick::Small(n) => u64::from(n),
            EpochPick::Any(n) => n,
        })
    }

    fn holder(&self, pick: HolderPick) -> HolderId {
        match pick {
            HolderPick::Me => self.me.clone(),
            HolderPick::Other(false) => HolderId::new("other-1").expect("valid"),
            HolderPick::Other(true) => HolderId::new("other-2").expect("valid"),
        }
    }

    fn reply(&self, pick: ReplyPick, operation: Option<Operation>) -> Reply {
        let acquire = matches!(operation, Some(Operation::Acquire) | None);
        match pick {
            ReplyPick::Success(e) if acquire => Reply::Acquired {
                epoch: self.epoch(e),
            },
            ReplyPick::Success(_) => Reply::Accepted,
            ReplyPick::Refusal(e, ms) if acquire => Reply::Held {
                // Every third is nobody's: a grace period after a
                // server change.
                holder: (ms % 3 != 0).then(|| self.holder(HolderPick::Other(ms % 2 == 0))),
                epoch: self.epoch(e),
                expires_in: Duration::from_millis(u64::from(ms)),
            },
            ReplyPick::Refusal(..) => Reply::Rejected,
            ReplyPick::Acquired(e) => Reply::Acquired {
                epoch: self.epoch(e),
            },
            ReplyPick::Held(h, e, ns) => Reply::Held {
                holder: Some(self.holder(h)),
                epoch: self.epoch(e),
                expires_in: Duration::from_nanos(ns),
            },
            ReplyPick::Accepted => Reply::Accepted,
            ReplyPick::Rejected => Reply::Rejected,
            ReplyPick::Transient => Reply::Failed(Failure::Transient),
            ReplyPick::Fatal => Reply::Failed(Failure::Fatal),
            ReplyPick::HandOverAsked(to_node) => Reply::HandOverAsked {
                to: to_node.then(successor),
            },
        }
    }

    fn request_id(&self, which: Which) -> RequestId {
        let in_flight = self.outstanding.map(|(id, _)| id);
        let last = self.last_request;
        RequestId(match which {
            Which::InFlight => in_flight.map_or(last, |id| id.0),
            Which::Stale(k) => last.saturating_sub(1 + u64::from(k)),
            Which::Future(k) => last.saturating_add(1 + u64::from(k)),
            Which::Any(id) => id,
        })
    }

    /// Feeds one input, drains its commands and checks everything.
    fn step(&mut self, lease: &mut LeaseState, input: Input) {
        if self.verbose {
            eprintln!("input {input:?}");
        }
        let cause = match input {
            Input::Timeout(when) => {
                self.now = self.time(lease, when);
                lease.handle_timeout(self.now);
                Cause::Timeout
            }
            Input::ReleaseNotice(when) => {
                self.now = self.time(lease, when);
                lease.handle_release_notice(self.now);
                self.noticed = true;
                Cause::ReleaseNotice
            }
            Input::Shutdown(when) => {
                self.now = self.time(lease, when);
                lease.handle_shutdown(self.now);
                self.shutdown = true;
                Cause::Shutdown
            }
            Input::HandOver(when, to_node) => {
                self.now = self.time(lease, when);
                let led = self.working.is_some() || self.published.is_leader();
                let handed = lease.handle_hand_over(self.now, to_node.then(successor));
                assert!(!handed || led, "a handover by a node that did not lead");
                Cause::HandOver
            }
            Input::Health(when, healthy) => {
                self.now = self.time(lease, when);
                lease.handle_health(self.now, healthy);
                Cause::Health
            }
            Input::Escalate(when, of_the_term) => {
                self.now = self.time(lease, when);
                let term = of_the_term.then_some(self.working).flatten();
                lease.handle_work_escalated(self.now, term, Duration::from_secs(60));
                Cause::Escalate
            }
            Input::Reply(when, which, pick) => {
                self.now = self.time(lease, when);
                let id = self.request_id(which);
                let operation = self.outstanding.map(|(_, op)| op);
                let reply = self.reply(pick, operation);
                if let Reply::Acquired { epoch } | Reply::Held { epoch, .. } = reply {
                    self.max_epoch = self.max_epoch.max(epoch.get());
                }
                let answered = !self.finished && self.outstanding.is_some_and(|(out, _)| out == id);
                let cause = if answered {
                    self.outstanding = None;
                    if matches!(
                        operation,
                        Some(Operation::HandOver { .. } | Operation::Release { .. })
                    ) {
                        self.handing_over = false;
                    }
                    Cause::Answer {
                        acquired: match (operation, &reply) {
                            (Some(Operation::Acquire), Reply::Acquired { epoch }) => Some(*epoch),
                            _ => None,
                        },
                        renew_rejected: matches!(
                            (operation, &reply),
                            (Some(Operation::Renew { .. }), Reply::Rejected)
                        ),
                    }
                } else {
                    Cause::Ignored
                };
                lease.handle_reply(self.now, id, reply);
                cause
            }
        };
        self.drain(lease, cause);
        self.check_state(lease, cause);
    }

    fn drain(&mut self, lease: &mut LeaseState, cause: Cause) {
        let mut count = 0;
        let mut started = None;
        let mut published_leader = None;
        while let Some(command) = lease.poll_command() {
            count += 1;
            assert!(
                count <= MAX_COMMANDS_PER_INPUT,
                "more than {MAX_COMMANDS_PER_INPUT} commands for one input"
            );
            assert!(!self.finished, "{command:?} after Finished");
            if self.verbose {
                eprintln!("  at {:?}: {command:?}", self.now);
            }
            self.trace.push(command.clone());
            match command {
                Command::Execute { request, operation } => {
                    assert!(
                        self.outstanding.is_none(),
                        "{request:?} sent while {:?} is outstanding",
                        self.outstanding
                    );
                    assert!(
                        request.0 > self.last_request,
                        "request id {request:?} not above {}",
                        self.last_request
                    );
                    self.last_request = request.0;
                    let previous_send = self.last_sent.replace(self.now);
                    let noticed = std::mem::take(&mut self.noticed);
                    self.outstanding = Some((request, operation));
                    match operation {
                        Operation::Acquire => {
                            assert!(!self.shutdown, "acquire sent after shutdown");
                            assert_eq!(self.working, None, "acquire sent while leading");
                        }
                        Operation::Renew { epoch } => {
                            // A leader renews every interval, counted from
                            // the send of the previous statement.
                            if let (true, false, Some(last)) =
                                (self.monotone, noticed, previous_send)
                            {
                                assert!(
                                    self.now >= last + self.interval,
                                    "renew at {:?}, less than an interval after {last:?}",
                                    self.now
                                );
                            }
                            assert!(!self.shutdown, "renew sent after shutdown");
                            assert_eq!(self.working, Some(epoch), "renew of a term not led");
                        }
                        Operation::Release { .. } => {
                            assert!(
                                self.shutdown || self.handing_over,
                                "release sent without shutdown or handover"
                            );
                            assert_eq!(self.working, None, "release sent with work running");
                        }
                        Operation::HandOver { .. } => {
                            assert!(self.handing_over, "hand-over sent without a handover");
                            assert_eq!(self.working, None, "hand-over sent with work running");
                        }
                        Operation::Announce => {
                            assert!(!self.shutdown, "announce sent after shutdown");
                            assert_eq!(self.working, None, "announce sent while leading");
                        }
                    }
                }
                Command::Cancel { request } => {
                    assert!(matches!(cause, Cause::Timeout), "cancel outside a timeout");
                    assert_eq!(
                        self.outstanding.map(|(id, _)| id),
                        Some(request),
                        "cancel of a request not in flight"
                    );
                    if matches!(
                        self.outstanding,
                        Some((_, Operation::HandOver { .. } | Operation::Release { .. }))
                    ) {
                        self.handing_over = false;
                    }
                    self.outstanding = None;
                }
                Command::StartWork { epoch } => {
                    let Cause::Answer {
                        acquired: Some(acquired),
                        ..
                    } = cause
                    else {
                        panic!("StartWork({epoch}) without an Acquired reply to the acquire in flight ({cause:?})");
                    };
                    assert_eq!(acquired, epoch, "StartWork at an epoch not acquired");
                    assert!(!self.shutdown, "StartWork after shutdown");
                    assert_eq!(self.working, None, "StartWork while work runs");
                    assert!(started.is_none(), "two StartWork for one input");
                    self.working = Some(epoch);
                    started = Some(epoch);
                }
                Command::StopWork { epoch, reason } => {
                    assert_eq!(
                        self.working,
                        Some(epoch),
                        "StopWork({epoch}) of a term not running"
                    );
                    self.working = None;
                    match reason {
                        Demotion::Released => {
                            assert!(
                                matches!(cause, Cause::Shutdown),
                                "released outside shutdown"
                            )
                        }
                        Demotion::Lost => assert!(
                            matches!(
                                cause,
                                Cause::Answer {
                                    renew_rejected: true,
                                    ..
                                }
                            ),
                            "lost without a rejected renew"
                        ),
                        Demotion::Error => {
                            assert!(
                                matches!(cause, Cause::Answer { .. }),
                                "error without a reply"
                            )
                        }
                        Demotion::Expired => {}
                        Demotion::HandedOver => {
                            assert!(
                                matches!(cause, Cause::HandOver | Cause::Answer { .. }),
                                "handed over without being asked"
                            );
                            self.handing_over = true;
                        }
                        // Health (DESIGN §5): a probe's verdict, or a
                        // renewal's candidate read while unhealthy.
                        Demotion::Unhealthy => {
                            assert!(
                                matches!(cause, Cause::Health | Cause::Answer { .. }),
                                "unhealthy without a verdict or a candidate"
                            );
                            self.handing_over = true;
                        }
                        Demotion::Escalated => {
                            assert!(
                                matches!(cause, Cause::Escalate),
                                "escalated without an escalation"
                            );
                            self.handing_over = true;
                        }
                        other => panic!("no input here demotes with {other:?}"),
                    }
                }
                Command::Publish(leadership) => {
                    if leadership.role == Role::Leader {
                        let epoch = leadership
                            .epoch
                            .expect("a published leader carries its epoch");
                        assert_eq!(
                            leadership.holder.as_ref(),
                            Some(&self.me),
                            "leader is not me"
                        );
                        assert_eq!(leadership.reason, None, "leader with a demotion reason");
                        published_leader = Some(epoch);
                    } else if let Some(reason) = leadership.reason {
                        assert!(
                            leadership.epoch.is_some(),
                            "demotion ({reason:?}) without its epoch"
                        );
                    }
                    self.published = leadership;
                }
                Command::WatchChanges(on) => {
                    assert!(!self.finished, "WatchChanges after Finished");
                    assert_ne!(on, self.watching, "WatchChanges({on}) told twice");
                    assert!(
                        !(on && (self.published.is_leader() || self.shutdown)),
                        "watching while leading or shutting down"
                    );
                    self.watching = on;
                }
                Command::Finished => {
                    assert_eq!(self.working, None, "finished with work running");
                    self.finished = true;
                    self.outstanding = None;
                    self.handing_over = false;
                }
            }
        }
        assert_eq!(
            published_leader, started,
            "leadership published without its StartWork, or the reverse"
        );
    }

    fn check_state(&self, lease: &LeaseState, cause: Cause) {
        assert_eq!(lease.is_finished(), self.finished);
        assert!(
            self.finished || lease.wants_changes() == self.watching,
            "the driver was last told watching = {}, the machine wants {}",
            self.watching,
            lease.wants_changes()
        );
        assert_eq!(
            lease.poll_timeout().is_none(),
            self.finished,
            "poll_timeout vs finished"
        );
        assert_eq!(
            lease.leadership(),
            &self.published,
            "leadership differs from the last Publish"
        );
        let leading = lease.leadership().is_leader();
        assert_eq!(
            leading,
            lease.leader_deadline().is_some(),
            "published leader vs deadline"
        );
        assert_eq!(
            leading,
            self.working.is_some(),
            "published leader vs running work"
        );
        if let Some(epoch) = self.working {
            assert_eq!(lease.leadership().leader_epoch(), Some(epoch));
        }
        if self.finished {
            assert_eq!(self.outstanding, None);
        }
        if !self.monotone || self.now.as_nanos() > u64::MAX / 2 {
            return;
        }
        if let Some(deadline) = lease.leader_deadline() {
            assert!(
                self.now < deadline,
                "leading at {:?}, past the deadline {deadline:?}",
                self.now
            );
        }
        if matches!(cause, Cause::Timeout) {
            if let Some(wakeup) = lease.poll_timeout() {
                assert!(
                    wakeup > self.now,
                    "busy loop: wake-up {wakeup:?} not after {:?}",
                    self.now
                );
            }
        }
    }
}
