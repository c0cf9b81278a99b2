//! `LeaseState`: the deterministic election state machine of DESIGN §4.

use std::collections::VecDeque;
use std::time::Duration;

use crate::config::Config;
use crate::error::ConfigError;
use crate::names::{Epoch, HolderId};
use crate::protocol::{Command, Demotion, Failure, Leadership, Operation, Reply, RequestId, Role};
use crate::sql::LeaseRow;
use crate::time::{nanos, Instant};

mod health;

/// The statement in flight (at most one per lease).
#[derive(Clone, Copy, Debug)]
struct InFlight {
    id: RequestId,
    operation: Operation,
    sent_at: Instant,
    /// When it is abandoned: `sent_at` plus the request timeout, or for
    /// the release of a shutdown, no earlier than the ended term's deadline.
    give_up: Instant,
}

/// Where this node stands in the election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    Follower,
    /// Leading at `epoch` until the local `deadline`: the send time of the
    /// last successful acquire or renew plus `Config::local_validity`.
    /// `working` is false once the work was stopped early, at
    /// `deadline − stop_lead` (always true with `stop_lead = 0`).
    Leader {
        epoch: Epoch,
        deadline: Instant,
        working: bool,
    },
}

/// A planned handover under way (DESIGN §3 "Planned handover"): the work
/// was stopped; the row goes to `to` (a reservation) or, with `None`, is
/// released, once nothing else is in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HandOver {
    epoch: Epoch,
    to: Option<HolderId>,
}

/// Shutdown progress: stop the work, release, finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Electing: competing or leading, until a shutdown.
    Electing,
    /// Shutting down; `release` is the epoch still to give up, if any.
    ShuttingDown {
        release: Option<Epoch>,
    },
    Finished,
}

/// The lease election for one contender and one lease, as a pure state
/// machine: no clock, no socket, no thread, no randomness but a seed.
///
/// # Contract
///
/// - Every input carries `now`, the caller's monotonic time.
/// - **After every input, drain [`LeaseState::poll_command`] until it
///   returns `None`, carrying the commands out in order; then sleep until
///   [`LeaseState::poll_timeout`] (or until the next input) and call
///   [`LeaseState::handle_timeout`].**
/// - Feed every statement result back with [`LeaseState::handle_reply`],
///   tagged with the request id it was issued under. Replies to abandoned or
///   older requests are ignored, so a driver may deliver them carelessly.
///
/// The same inputs give the same commands, bit for bit. In steady state
/// (renewing, polling) a step allocates nothing: commands sit in a queue
/// allocated once.
///
/// ```
/// use picolease_core::{Command, Config, HolderId, Instant, LeaseName, LeaseState, Operation, Reply, Epoch};
///
/// let config = Config::new(LeaseName::new("maintenance")?, HolderId::new("node-a")?);
/// let mut lease = LeaseState::new(config, Instant::ZERO)?;
/// // The first tick sends an acquire.
/// lease.handle_timeout(Instant::ZERO);
/// let Some(Command::Execute { request, operation: Operation::Acquire }) = lease.poll_command() else {
///     panic!("expected an acquire");
/// };
/// // The database answers: the row is ours at epoch 1.
/// lease.handle_reply(Instant::from_nanos(2_000_000), request, Reply::Acquired { epoch: Epoch::new(1) });
/// let commands: Vec<Command> = std::iter::from_fn(|| lease.poll_command()).collect();
/// assert!(commands.contains(&Command::StartWork { epoch: Epoch::new(1) }));
/// assert!(lease.leadership().is_leader());
/// # Ok::<(), picolease_core::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct LeaseState {
    config: Config,
    validity: Duration,
    rng: u64,
    next_request: u64,
    in_flight: Option<InFlight>,
    standing: Standing,
    /// When to send the next acquire (follower) or renew (leader).
    next_attempt: Instant,
    /// A release was announced while a request was in flight: poll as soon
    /// as it completes.
    notice_pending: bool,
    /// While shutting down from leadership: the ended term's deadline. The
    /// release may wait that long for it, because the driver sends it only
    /// once the gated work has stopped, and work that stops within the
    /// lease must not cost the successor a whole ttl (DESIGN §4b).
    release_by: Option<Instant>,
    /// A planned handover decided and not yet answered.
    hand_over: Option<HandOver>,
    /// A lease of a set renewing by liveness (DESIGN §9 "Renewal by liveness"): a term that
    /// ends at its deadline is released (`Release { epoch }`) before the
    /// machine tries again. Its row stays linked to the node's liveness,
    /// which the node's other renewals keep extending, so nobody else
    /// could take it while the node lives (`LeaseState::release_lapsed_terms`).
    releases_lapsed_terms: bool,
    /// After a handover, until when release notices are ignored
    /// (`stepped_aside`).
    aside_until: Option<Instant>,
    /// This holder's reservation (`<node>#`, [`HolderId::reservation`]):
    /// a row reserved for it is as good as its own.
    reservation: String,
    /// This contender's announcement as a candidate (DESIGN §3
    /// "Preferred holders"), `None` with the lowest rank (which outranks
    /// nobody and so announces nothing).
    announcement: Option<String>,
    /// When a follower with an announcement next sends it.
    next_announce: Instant,
    /// What this node's health probe last said (DESIGN §5 "Work that
    /// fails"): `None` until a probe reports, and then a node that is
    /// healthy announces itself as a candidate whatever its rank.
    probe: Option<bool>,
    /// After its work escalated: until when the node stands aside.
    cool_down_until: Option<Instant>,
    /// The live candidate the leader's last renewal read, whatever its
    /// rank: where [`LeaseState::handle_hand_over_to_preferred`] sends
    /// the lease.
    preferred: Option<crate::Candidate>,
    /// The last reading of the database clock: (sent, replied, database
    /// milliseconds). Only drivers whose database clock is the host's wall
    /// clock (SQLite) feed it; the model checker never does.
    db_clock: Option<(Instant, Instant, i64)>,
    /// Whether a follower sends acquires. Always true for a lone lease; a
    /// lease set (`LeaseSet`) turns it off for the leases outside its fair
    /// share, so the rules of a term stay these, whoever decides to
    /// compete.
    contending: bool,
    phase: Phase,
    published: Leadership,
    /// What the driver was last told of watching for changes
    /// ([`Command::WatchChanges`]).
    watching: bool,
    commands: VecDeque<Command>,
    /// A planted bug for the model checker's own tests (feature `mutants`).
    #[cfg(feature = "mutants")]
    mutation: Mutation,
}

/// Commands one input can produce at most (demote, publish, cancel,
/// execute, publish, start, finish), with room to spare.
const COMMAND_CAPACITY: usize = 16;

impl LeaseState {
    /// A follower that will try to acquire at `now`. Rejects a configuration
    /// that cannot work.
    pub fn new(config: Config, now: Instant) -> Result<Self, ConfigError> {
        if crate::config::is_reserved(&config.lease) {
            return Err(ConfigError::ReservedLease {
                name: config.lease.as_str().chars().take(80).collect(),
            });
        }
        Self::own_row(config, now)
    }

    /// [`LeaseState::new`] without the reserved-name check: for a lease
    /// set's own membership row, the one machine allowed a name in
    /// picolease's namespaces.
    pub(crate) fn own_row(config: Config, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        let reservation = config.holder.reservation();
        // Built whatever the rank: a node at the lowest rank announces it
        // only while a health probe says it is healthy (`announces`).
        let announcement = config.candidate().announcement();
        Ok(LeaseState {
            validity: config.local_validity(),
            rng: config.seed ^ 0x9e37_79b9_7f4a_7c15,
            config,
            next_request: 0,
            in_flight: None,
            standing: Standing::Follower,
            next_attempt: now,
            notice_pending: false,
            release_by: None,
            hand_over: None,
            releases_lapsed_terms: false,
            aside_until: None,
            reservation,
            announcement,
            next_announce: now,
            probe: None,
            cool_down_until: None,
            preferred: None,
            db_clock: None,
            contending: true,
            phase: Phase::Electing,
            published: Leadership::unknown(),
            watching: false,
            commands: VecDeque::with_capacity(COMMAND_CAPACITY),
            #[cfg(feature = "mutants")]
            mutation: Mutation::None,
        })
    }

    /// Plants a bug (feature `mutants`, for the model checker's tests).
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn set_mutation(&mut self, mutation: Mutation) {
        self.mutation = mutation;
    }

    /// The configuration this machine runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The reservation an [`Operation::HandOver`] in flight (or about to
    /// be sent) writes into the row: what the driver binds as its
    /// successor.
    pub fn successor(&self) -> Option<&HolderId> {
        self.hand_over.as_ref()?.to.as_ref()
    }

    /// True from a handover's start until its statement is answered.
    pub fn is_handing_over(&self) -> bool {
        self.hand_over.is_some()
    }

    /// This contender's announcement as a candidate
    /// ([`crate::Candidate::announcement`]), what the driver binds to an
    /// [`Operation::Announce`], whether or not it announces now: with the
    /// lowest rank it announces only while a health probe says it is
    /// healthy (DESIGN §5 "Work that fails"), and a driver binds the text
    /// once, at its start. `None` only when the text would not fit.
    pub fn announcement(&self) -> Option<&str> {
        self.announcement.as_deref()
    }

    /// The leadership state as last published.
    pub fn leadership(&self) -> &Leadership {
        &self.published
    }

    /// While leading, the local instant at which this node will demote
    /// itself unless a renewal succeeds first.
    pub fn leader_deadline(&self) -> Option<Instant> {
        match self.standing {
            Standing::Leader { deadline, .. } => Some(deadline),
            Standing::Follower => None,
        }
    }

    /// Whether the driver should look for other connections' commits
    /// (SQLite, which has no NOTIFY: watch the file or poll its change
    /// counter, then hand the row to [`LeaseState::handle_row_observed`]):
    /// while electing, a follower can use a release and a leader must hear
    /// its row taken away (an operator's forced release or handover, an
    /// adoption). The core's decision, so that no driver asks about roles.
    pub fn wants_changes(&self) -> bool {
        self.phase == Phase::Electing
    }

    /// True once the machine has finished (shutdown done, or a fatal
    /// failure); it then ignores every input.
    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    /// The next command for the driver, in order. Drain until `None` after
    /// every input. Once the input's commands are out, a change of
    /// [`LeaseState::wants_changes`] since the driver was last told comes
    /// as [`Command::WatchChanges`] (never after [`Command::Finished`]).
    pub fn poll_command(&mut self) -> Option<Command> {
        if let Some(command) = self.commands.pop_front() {
            return Some(command);
        }
        let wants = self.wants_changes();
        if wants == self.watching || self.phase == Phase::Finished {
            return None;
        }
        self.watching = wants;
        Some(Command::WatchChanges(wants))
    }

    /// When the machine next needs [`LeaseState::handle_timeout`]: the
    /// earliest of the leader's deadline (or `deadline − stop_lead` while
    /// the work runs), the in-flight request's timeout and the next acquire
    /// or renew. `None` once finished.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Finished {
            return None;
        }
        let deadline = match self.standing {
            Standing::Leader {
                deadline,
                working: true,
                ..
            } => Some(deadline - self.config.stop_lead),
            Standing::Leader { deadline, .. } => Some(deadline),
            Standing::Follower => None,
        };
        let request = match self.in_flight {
            Some(req) => Some(req.give_up),
            // A follower left out of a set's share sends nothing.
            None if self.idle() => None,
            // While shutting down something is always in flight (the
            // release, or the request it waits for) until `Finished`.
            None => Some(match self.announce_due_at() {
                Some(at) => self.next_attempt.min(at),
                None => self.next_attempt,
            }),
        };
        // A cool-down's end is a change of health the machine acts on.
        let deadline = match (deadline, self.cool_down_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (deadline, request) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time passed: demote at the deadline, abandon a request past its
    /// timeout, send the next acquire or renew when it is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Finished {
            return;
        }
        self.check_deadline(now);
        if let Some(req) = self.in_flight {
            if now >= req.give_up {
                self.in_flight = None;
                self.commands.push_back(Command::Cancel { request: req.id });
                self.after_failure(now, req);
            }
        }
        self.advance(now);
    }

    /// The outcome of request `id`. Ignored unless `id` is the request in
    /// flight, so stale and abandoned replies can never make a node leader.
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        if self.phase == Phase::Finished {
            return;
        }
        // The deadline is checked first: a reply that arrives after it
        // cannot resurrect the term that just ran out.
        self.check_deadline(now);
        let req = match self.in_flight {
            Some(req) if req.id == id || self.accepts_any_reply() => req,
            _ => {
                self.advance(now);
                return;
            }
        };
        self.in_flight = None;
        // Each renewal's answer says afresh whether a candidate is live.
        if matches!(req.operation, Operation::Renew { .. }) {
            self.preferred = None;
        }
        // An operator's request rides on a renewal's answer: the renewal
        // counts as accepted, then the handover begins.
        // So does a better candidate (DESIGN §3 "Preferred holders"): the
        // node yields to it, to the candidate's node, by its own handover.
        // A yield for health says so (DESIGN §5 "Work that fails").
        let mut yield_reason = Demotion::HandedOver;
        let (reply, asked) = match reply {
            Reply::HandOverAsked { to } if matches!(req.operation, Operation::Renew { .. }) => {
                (Reply::Accepted, Some(to))
            }
            Reply::CandidateSeen { candidate }
                if matches!(req.operation, Operation::Renew { .. }) =>
            {
                let to = self.yield_to(now, &candidate);
                if to.is_some()
                    && !self.is_healthy(now)
                    && !crate::rank::yields_to(&self.config.rank, &candidate.rank)
                {
                    yield_reason = Demotion::Unhealthy;
                }
                self.preferred = Some(candidate);
                (Reply::Accepted, to.map(Some))
            }
            reply => (reply, None),
        };
        match (req.operation, reply) {
            (_, Reply::Failed(Failure::Fatal)) => {
                self.demote(Demotion::Error);
                self.finish();
                return;
            }
            (Operation::Acquire, Reply::Acquired { epoch }) => self.on_acquired(now, req, epoch),
            (
                Operation::Acquire,
                Reply::Held {
                    holder,
                    epoch,
                    expires_in,
                },
            ) => {
                self.observe(holder, epoch);
                let poll = req.sent_at + self.poll_delay();
                let expiry = Self::expiry_seen(req.sent_at, expires_in);
                self.next_attempt = match self.degraded_wait(now) {
                    // An unhealthy follower leaves the lapsed row to the
                    // healthy ones for a while (DESIGN §5).
                    Some(wait) => expiry + wait,
                    None => poll.min(expiry),
                };
            }
            // A renew is only sent while leading at its epoch, and with one
            // request in flight the standing can only have changed since by
            // demotion: no need to compare epochs.
            (Operation::Renew { epoch }, Reply::Accepted) => match self.standing {
                Standing::Leader { working, .. } => {
                    let deadline = self.term_deadline(req, now);
                    // Work stopped early (stop lead) starts again when a
                    // renewal succeeds in time: the term goes on.
                    let restart = !working && now < deadline - self.config.stop_lead;
                    self.standing = Standing::Leader {
                        epoch,
                        deadline,
                        working: working || restart,
                    };
                    self.next_attempt = req.sent_at + self.config.interval;
                    if restart {
                        self.commands.push_back(Command::StartWork { epoch });
                    }
                }
                // We demoted (deadline) while the renew was in flight. The
                // row may still be ours: acquire takes it back at once.
                _ => self.next_attempt = now,
            },
            // An announcement's answer changes nothing; a failed one is
            // sent again when the next is due.
            (Operation::Announce, _) => {}
            (Operation::Renew { .. }, Reply::Rejected) => {
                self.demote(Demotion::Lost);
                self.next_attempt = now;
            }
            // A planned handover's statement ends it whatever the outcome:
            // handed over (the row names the reservation now), refused (the
            // term was lost meanwhile) or failed (the row lapses by its
            // ttl). This node follows; it tries again after a poll, by
            // which time the successor (or, after a plain release, whoever
            // was told) has taken the row.
            (Operation::HandOver { .. } | Operation::Release { .. }, reply)
                if self.hand_over.is_some() =>
            {
                self.release_by = None;
                let released = matches!(req.operation, Operation::Release { .. });
                // Handed over: published once more, now naming the
                // reservation (what `run` prints as its `handover` event).
                if let (Some(handed), Reply::Accepted) = (self.hand_over.take(), &reply) {
                    if let Some(to) = handed.to {
                        self.publish(Leadership {
                            role: Role::Follower,
                            epoch: Some(handed.epoch),
                            holder: Some(to),
                            reason: Some(Demotion::HandedOver),
                        });
                    }
                }
                self.next_attempt = (req.sent_at + self.poll_delay()).max(now);
                if let Some(wait) = self.degraded_wait(now) {
                    self.next_attempt = self.next_attempt.max(now + wait);
                }
                // After a plain release the others get the first try; a
                // reservation keeps this node out by itself, and must not
                // make it miss a handover back to it.
                self.aside_until = released.then_some(self.next_attempt);
                self.notice_pending = false;
            }
            // A release ends the shutdown whatever its outcome (accepted,
            // rejected, failed): `after_failure` handles all three. Anything
            // else here is a transient failure or a reply that does not fit
            // the operation (a driver bug): a failed attempt.
            _ => self.after_failure(now, req),
        }
        if let Some(to) = asked {
            self.hand_over_because(now, to, yield_reason);
        }
        // A notice heard before the node turned unhealthy is dropped: an
        // unhealthy follower ignores notices.
        if self.notice_pending
            && self.standing == Standing::Follower
            && self.degraded_wait(now).is_some()
        {
            self.notice_pending = false;
        }
        if self.notice_pending && self.hand_over.is_none() {
            self.notice_pending = false;
            self.next_attempt = self.next_attempt.min(now);
        }
        self.advance(now);
    }

    /// Hand the lease over (DESIGN §3 "Planned handover"): while leading,
    /// stop the work (`StopWork`, reason [`Demotion::HandedOver`]), then,
    /// with nothing else in flight and the work stopped (the driver runs
    /// a lone lease's statement only after its ended term's work has
    /// returned), give the row to `to`, a reservation
    /// ([`HolderId::reserved_for`]), or with `None` release it. The node
    /// stays a follower. Returns whether it led, and so hands over.
    pub fn handle_hand_over(&mut self, now: Instant, to: Option<HolderId>) -> bool {
        self.hand_over_because(now, to, Demotion::HandedOver)
    }

    /// [`LeaseState::handle_hand_over`], published with `reason`.
    pub(crate) fn hand_over_because(
        &mut self,
        now: Instant,
        to: Option<HolderId>,
        reason: Demotion,
    ) -> bool {
        if self.phase != Phase::Electing {
            return false;
        }
        self.check_deadline(now);
        let Standing::Leader {
            epoch, deadline, ..
        } = self.standing
        else {
            return false;
        };
        // Like a shutdown's release, the statement may take until the
        // ended term's deadline: work that stops within the lease must
        // not cost the successor a ttl.
        self.release_by = Some(deadline);
        self.demote(reason);
        self.hand_over = Some(HandOver { epoch, to });
        self.advance(now);
        true
    }

    /// Hand the lease over ([`LeaseState::handle_hand_over`]) to the
    /// preferred candidate the last renewal read (DESIGN §3 "Preferred
    /// holders"), whatever its rank, if it runs on another node; else
    /// release it. What a deploy tool asks for as "hand over, then exit"
    /// (`run`'s SIGUSR1): the lease goes to the node most likely to keep
    /// it. Returns whether it led, and so hands over.
    pub fn handle_hand_over_to_preferred(&mut self, now: Instant) -> bool {
        let to = self
            .preferred
            .as_ref()
            .and_then(|candidate| candidate.successor_from(self.config.holder.node()));
        self.handle_hand_over(now, to)
    }

    /// The live candidate the leader's last renewal read (DESIGN §3
    /// "Preferred holders"), if any.
    pub fn preferred(&self) -> Option<&crate::Candidate> {
        self.preferred.as_ref()
    }

    /// The lease's row was read outside the protocol (the SQLite driver's
    /// change check, after another connection committed). A follower:
    /// when the row shows the lease free, lapsed, or held by this very
    /// holder (a lost acquire reply), it counts as a release notice and
    /// the follower tries at once; a row held by another holder with time
    /// left changes nothing, so a busy database costs a read, never an
    /// acquire. A leader: a row that is not its own at its epoch (taken
    /// away by an operator or an adoption) counts as a release notice,
    /// which renews at once, so the refused renewal demotes it (`lost`)
    /// now rather than an interval later; its own row changes nothing.
    /// The row of another lease is ignored.
    pub fn handle_row_observed(&mut self, now: Instant, row: &LeaseRow) {
        if row.name != self.config.lease.as_str() {
            return;
        }
        if let Standing::Leader { epoch, .. } = self.standing {
            let ours =
                row.holder.as_deref() == Some(self.config.holder.as_str()) && row.epoch == epoch;
            if !ours {
                self.handle_release_notice(now);
            }
            return;
        }
        // A row without a holder but with time left is in a grace period
        // (DESIGN §3 "Failover"): not free yet.
        let free = row.holder.is_none() && row.expires_in_ms.is_none_or(|left| left <= 0);
        let lapsed = row.expires_in_ms.is_some_and(|left| left <= 0);
        let mine = self.is_mine(row.holder.as_deref());
        if free || lapsed || mine {
            self.handle_release_notice(now);
        }
    }

    /// The lease's row read with a statement sent at `sent_at` (a lease
    /// set's survey). A follower: a free, lapsed or own row counts as a
    /// release notice, as in [`LeaseState::handle_row_observed`]; a row
    /// held by another holder with time left schedules the next attempt at
    /// its expiry, the same rule as an acquire answered "held". A leader:
    /// as [`LeaseState::handle_row_observed`].
    pub fn handle_row_seen(&mut self, now: Instant, sent_at: Instant, row: &LeaseRow) {
        if row.name != self.config.lease.as_str() || self.phase != Phase::Electing {
            return;
        }
        if matches!(self.standing, Standing::Leader { .. }) {
            // A leader reads it as a change of the row: its own row at its
            // epoch changes nothing; any other renews at once.
            self.handle_row_observed(now, row);
            return;
        }
        let left = row.expires_in_ms.unwrap_or(0);
        let mine = self.is_mine(row.holder.as_deref());
        // A row without a holder but with time left is in a grace period
        // (DESIGN §3 "Failover"): followed like a held one.
        if left <= 0 || mine {
            self.handle_release_notice(now);
            return;
        }
        self.check_deadline(now);
        if self.standing != Standing::Follower {
            return;
        }
        match row.holder.as_deref().map(crate::names::HolderId::new) {
            Some(Ok(holder)) => self.observe(Some(holder), row.epoch),
            None => self.observe(None, row.epoch),
            Some(Err(_)) => {}
        }
        let expiry = Self::expiry_seen(sent_at, Duration::from_millis(left.unsigned_abs()));
        if self.in_flight.is_none() {
            self.next_attempt = self.next_attempt.min(expiry);
        }
        self.advance(now);
    }

    /// A row's holder names this holder, or reserves the row for its node.
    fn is_mine(&self, holder: Option<&str>) -> bool {
        holder.is_some_and(|h| h == self.config.holder.as_str() || h == self.reservation)
    }

    /// With `on`, makes a term that ends at its deadline end with a
    /// release of its epoch, sent before the machine's next acquire (each
    /// lease of a set renewing by liveness, DESIGN §9 "Renewal by liveness"; set on every
    /// machine a set makes for a lease). Such a lease's row is linked to
    /// its node's membership row: when its own renewals failed for a ttl
    /// while the node's others went through, the row stays linked to a
    /// liveness that lives on, which no survey lists and no other node
    /// takes. Without the release, a node that then stopped trying for it
    /// (its share shrank) kept it from everyone for as long as it lived.
    /// The release is conditioned on the holder and the epoch, as every
    /// release is: a row taken meanwhile is left alone.
    pub(crate) fn release_lapsed_terms(&mut self, on: bool) {
        self.releases_lapsed_terms = on;
    }

    /// Turns a follower's acquires on or off (a lease set's fair share). A
    /// leader is not affected: a set gives a lease up through
    /// [`LeaseState::handle_shutdown`], the normal stop → release path.
    /// Turned on, the follower tries when its next attempt is due (at once
    /// if that passed while it was off).
    pub fn set_contending(&mut self, now: Instant, contending: bool) {
        if self.contending == contending {
            return;
        }
        self.contending = contending;
        if self.phase == Phase::Electing {
            self.check_deadline(now);
            self.advance(now);
        }
    }

    /// Whether a follower sends acquires (see [`LeaseState::set_contending`]).
    pub fn is_contending(&self) -> bool {
        self.contending
    }

    /// True while a statement of this machine is in flight.
    pub fn is_busy(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Sends now the acquire or renew that is due within `within`, so a
    /// lease set can carry many leases in one batch. Renewing or polling
    /// early is always safe: a term's deadline counts from the send of the
    /// statement that renewed it.
    pub fn hasten(&mut self, now: Instant, within: Duration) {
        if self.phase != Phase::Electing || self.in_flight.is_some() || self.idle() {
            return;
        }
        if self.next_attempt <= now + within {
            self.next_attempt = self.next_attempt.min(now);
            self.check_deadline(now);
            self.advance(now);
        }
    }

    /// The lease's row was released, handed over or taken (a PostgreSQL
    /// notification): a follower tries at once instead of waiting for its
    /// next poll. A leader renews at once: the notice may be of its own
    /// row taken away (an operator's `release --force` or handover, an
    /// adoption), and a refused renewal demotes it (`lost`) now, not at
    /// its next interval; a renewal that is accepted only renewed early,
    /// which is always safe.
    pub fn handle_release_notice(&mut self, now: Instant) {
        if self.phase != Phase::Electing {
            return;
        }
        // Every input checks the deadline first, this one included.
        self.check_deadline(now);
        if self.stepped_aside(now) {
            return;
        }
        if self.in_flight.is_some() {
            self.notice_pending = true;
        } else {
            self.next_attempt = now;
        }
        self.advance(now);
    }

    /// True while a node that just handed its lease over lets the others
    /// take it: while its statement is pending, and after a plain release
    /// (a handover with no successor) until its next poll, a release
    /// notice (its own release's, above all, which SQLite's file watch and
    /// PostgreSQL's LISTEN report too) does not make it try at once.
    fn stepped_aside(&self, now: Instant) -> bool {
        self.hand_over.is_some()
            || self.aside_until.is_some_and(|until| now < until)
            || (self.standing == Standing::Follower && self.degraded_wait(now).is_some())
    }

    /// A reading of the database clock, `db_millis`, taken by a statement
    /// sent at `sent_at` whose reply came at `now` (SQLite, where the
    /// database clock is the host's wall clock, shared with every process
    /// on the host). Between two readings the database clock must advance
    /// by what the local clock allows: at least from the earlier reply to
    /// the later send, at most from the earlier send to the later reply,
    /// widened by its 1 ms resolution and by ρ·ttl. A statement that waited
    /// in a busy handler only widens that window, so it never looks like a
    /// step. Outside it, the wall clock stepped: every expiry in the table
    /// moved, so a leader demotes with [`Demotion::Clock`] and tries again
    /// at once (a new term, measured afresh). Returns whether it stepped,
    /// for the driver to log.
    pub fn handle_db_clock(&mut self, now: Instant, sent_at: Instant, db_millis: i64) -> bool {
        if self.phase == Phase::Finished {
            return false;
        }
        let previous = self.db_clock.replace((sent_at, now, db_millis));
        let Some((prev_sent, prev_reply, prev_db)) = previous else {
            return false;
        };
        let millis = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let slack = millis(self.config.drift) + 1;
        let least = millis(sent_at.saturating_duration_since(prev_reply)).saturating_sub(slack);
        let most = millis(now.saturating_duration_since(prev_sent))
            .saturating_add(1)
            .saturating_add(slack);
        let advance = db_millis.saturating_sub(prev_db);
        if (least..=most).contains(&advance) {
            return false;
        }
        self.check_deadline(now);
        if matches!(self.standing, Standing::Leader { .. }) {
            self.demote(Demotion::Clock);
            self.next_attempt = now;
            self.advance(now);
        }
        true
    }

    /// Stop: the gated work first, then release the lease if held, then
    /// `Finished`. A request in flight is waited for (up to its timeout) so
    /// an acquire that succeeds meanwhile is released too.
    pub fn handle_shutdown(&mut self, now: Instant) {
        if self.phase != Phase::Electing {
            return;
        }
        self.check_deadline(now);
        let release = match self.standing {
            Standing::Leader {
                epoch, deadline, ..
            } => {
                self.release_by = Some(deadline);
                self.demote(Demotion::Released);
                Some(epoch)
            }
            Standing::Follower => None,
        };
        self.phase = Phase::ShuttingDown { release };
        self.advance(now);
    }

    fn on_acquired(&mut self, now: Instant, req: InFlight, epoch: Epoch) {
        if let Phase::ShuttingDown { .. } = self.phase {
            // Won while shutting down: never lead, just give it back.
            self.phase = Phase::ShuttingDown {
                release: Some(epoch),
            };
            return;
        }
        let deadline = self.term_deadline(req, now);
        if now >= deadline - self.config.stop_lead {
            // The reply took so long the lease may already have lapsed (or
            // be too close to its end to start the work): leading on it
            // could overlap a successor. Acquire again at once (the row is
            // ours, so that succeeds without waiting).
            self.next_attempt = now;
            return;
        }
        self.standing = Standing::Leader {
            epoch,
            deadline,
            working: true,
        };
        // A notice heard while this acquire was in flight asked a
        // follower to try: the acquire did, and won.
        self.notice_pending = false;
        self.next_attempt = req.sent_at + self.config.interval;
        self.publish(Leadership {
            role: Role::Leader,
            epoch: Some(epoch),
            holder: Some(self.config.holder.clone()),
            reason: None,
        });
        self.commands.push_back(Command::StartWork { epoch });
    }

    fn after_failure(&mut self, now: Instant, req: InFlight) {
        // A planned handover's statement is tried once, as a shutdown's
        // release is: without it the row lapses by its ttl.
        let handing_over = matches!(
            req.operation,
            Operation::HandOver { .. } | Operation::Release { .. }
        );
        if handing_over && self.hand_over.take().is_some() {
            self.release_by = None;
            self.next_attempt = (req.sent_at + self.config.interval).max(now);
            self.notice_pending = false;
            return;
        }
        match self.phase {
            Phase::ShuttingDown { .. } => {
                if let Operation::Release { .. } = req.operation {
                    // Released, refused, or could not release (then the
                    // row lapses by its ttl): nothing more to give up.
                    self.phase = Phase::ShuttingDown { release: None };
                }
            }
            _ => {
                self.next_attempt = (req.sent_at + self.config.interval).max(now);
            }
        }
    }

    fn check_deadline(&mut self, now: Instant) {
        // The stop lead: renewals kept failing, so the work stops at
        // `deadline − g`; the node still leads (and may renew) until the
        // deadline. With g = 0 the deadline below does it all.
        if let Standing::Leader {
            epoch,
            deadline,
            working: true,
        } = self.standing
        {
            let g = self.config.stop_lead;
            if !g.is_zero() && now >= deadline - g && now < deadline {
                self.standing = Standing::Leader {
                    epoch,
                    deadline,
                    working: false,
                };
                self.commands.push_back(Command::StopWork {
                    epoch,
                    reason: Demotion::Expired,
                });
            }
        }
        if let Standing::Leader {
            epoch, deadline, ..
        } = self.standing
        {
            if now >= deadline {
                self.demote(Demotion::Expired);
                self.next_attempt = self.next_attempt.min(now);
                if self.releases_lapsed_terms
                    && self.phase == Phase::Electing
                    && self.hand_over.is_none()
                {
                    // Sent before any acquire (`advance`), answered like a
                    // plain release: the others get the first try.
                    self.hand_over = Some(HandOver { epoch, to: None });
                }
            }
        }
    }

    fn demote(&mut self, reason: Demotion) {
        if let Standing::Leader { epoch, working, .. } = self.standing {
            self.standing = Standing::Follower;
            if working && !self.keeps_work_on_demotion() {
                self.commands.push_back(Command::StopWork { epoch, reason });
            }
            self.publish(Leadership {
                role: Role::Follower,
                epoch: Some(epoch),
                holder: None,
                reason: Some(reason),
            });
        }
    }

    fn observe(&mut self, holder: Option<crate::names::HolderId>, epoch: Epoch) {
        let changed = self.published.epoch != Some(epoch)
            || self.published.holder != holder
            || self.published.role != Role::Follower;
        if changed {
            self.publish(Leadership {
                role: Role::Follower,
                epoch: Some(epoch),
                holder,
                reason: None,
            });
        }
    }

    fn publish(&mut self, leadership: Leadership) {
        self.published = leadership.clone();
        self.commands.push_back(Command::Publish(leadership));
    }

    fn finish(&mut self) {
        self.phase = Phase::Finished;
        self.in_flight = None;
        self.hand_over = None;
        self.commands.push_back(Command::Finished);
    }

    /// Sends whatever is due, if nothing is in flight.
    fn advance(&mut self, now: Instant) {
        self.end_cool_down(now);
        if self.in_flight.is_some() {
            return;
        }
        if let Some(HandOver { epoch, to }) = &self.hand_over {
            if self.phase != Phase::Finished {
                let operation = match to {
                    Some(_) => Operation::HandOver { epoch: *epoch },
                    None => Operation::Release { epoch: *epoch },
                };
                self.send(now, operation);
                return;
            }
        }
        match self.phase {
            Phase::Finished => {}
            Phase::ShuttingDown {
                release: Some(epoch),
            } => {
                self.send(now, Operation::Release { epoch });
            }
            Phase::ShuttingDown { release: None } => self.finish(),
            Phase::Electing if self.idle() => {}
            Phase::Electing if now >= self.next_attempt => {
                let operation = match self.standing {
                    Standing::Leader { epoch, .. } => Operation::Renew { epoch },
                    Standing::Follower => Operation::Acquire,
                };
                self.send(now, operation);
            }
            Phase::Electing if self.announce_due_at().is_some_and(|at| now >= at) => {
                self.next_announce = now + self.config.interval;
                self.send(now, Operation::Announce);
            }
            Phase::Electing => {}
        }
    }

    /// When a follower with an announcement sends it next (DESIGN §3
    /// "Preferred holders"): once an interval, right after its acquire is
    /// answered; `None` for a leader, a node without one, and a follower
    /// that does not contend.
    fn announce_due_at(&self) -> Option<Instant> {
        let announces = self.announcement.is_some()
            && self.announces()
            && self.contending
            && self.standing == Standing::Follower
            && self.hand_over.is_none();
        announces.then_some(self.next_announce)
    }

    /// The reservation to hand the lease to when a leader sees `candidate`:
    /// its node's, if it outranks this node ([`crate::rank::yields_to`])
    /// or this node is unhealthy (a candidate announces only while
    /// healthy), and runs on another ([`crate::Candidate::successor_from`]).
    fn yield_to(&self, now: Instant, candidate: &crate::Candidate) -> Option<HolderId> {
        let outranks = crate::rank::yields_to(&self.config.rank, &candidate.rank)
            || self.yields_to_anyone()
            || self.yields_for_health(now);
        outranks
            .then(|| candidate.successor_from(self.config.holder.node()))
            .flatten()
    }

    /// A running follower left out of its set's share: nothing to send.
    fn idle(&self) -> bool {
        !self.contending && self.phase == Phase::Electing && self.standing == Standing::Follower
    }

    /// When a row seen by a statement sent at `sent_at` with `expires_in`
    /// left may be tried. The statement read its clock between its send
    /// and its reply, and the next attempt reaches the database about as
    /// long after it is sent as this one did: sent at `sent_at +
    /// expires_in`, it arrives at the expiry, where `reply + expires_in`
    /// would add the reply's commit and return trip. Arriving a little
    /// early only costs one more attempt (answered with the few
    /// milliseconds left).
    fn expiry_seen(sent_at: Instant, expires_in: Duration) -> Instant {
        sent_at + expires_in
    }

    /// The local deadline of a term won or renewed by `req`: its send time
    /// plus the validity (DESIGN §4: the send, not the reply).
    fn term_deadline(&self, req: InFlight, now: Instant) -> Instant {
        #[cfg(feature = "mutants")]
        match self.mutation {
            Mutation::DeadlineFromReply => return now + self.validity,
            Mutation::NoDeadline => return Instant::from_nanos(u64::MAX),
            _ => {}
        }
        let _ = now;
        req.sent_at + self.validity
    }

    /// False: a reply must match the request in flight.
    fn accepts_any_reply(&self) -> bool {
        #[cfg(feature = "mutants")]
        if self.mutation == Mutation::StaleReplyAccepted {
            return true;
        }
        false
    }

    /// False: a leader yields only to a candidate that outranks it.
    fn yields_to_anyone(&self) -> bool {
        #[cfg(feature = "mutants")]
        if self.mutation == Mutation::YieldToAnyCandidate {
            return true;
        }
        false
    }

    /// False: an unhealthy leader does not ignore its health.
    fn ignores_own_health(&self) -> bool {
        #[cfg(feature = "mutants")]
        if self.mutation == Mutation::IgnoresOwnHealth {
            return true;
        }
        false
    }

    /// False: every demotion stops the gated work.
    fn keeps_work_on_demotion(&self) -> bool {
        #[cfg(feature = "mutants")]
        if self.mutation == Mutation::WorkKeptOnDemotion {
            return true;
        }
        false
    }

    fn send(&mut self, now: Instant, operation: Operation) {
        self.next_request += 1;
        let id = RequestId(self.next_request);
        let mut give_up = now + self.config.request_timeout;
        if let (Operation::Release { .. } | Operation::HandOver { .. }, Some(by)) =
            (operation, self.release_by)
        {
            give_up = give_up.max(by);
        }
        self.in_flight = Some(InFlight {
            id,
            operation,
            sent_at: now,
            give_up,
        });
        self.commands.push_back(Command::Execute {
            request: id,
            operation,
        });
    }

    /// A follower's poll delay: `interval − U(0, jitter)` from a seeded
    /// splitmix64 generator.
    fn poll_delay(&mut self) -> Duration {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let jitter = nanos(self.config.jitter);
        let cut = if jitter == 0 { 0 } else { z % (jitter + 1) };
        self.config
            .interval
            .saturating_sub(Duration::from_nanos(cut))
    }
}

/// A bug planted on purpose so the model checker's tests can show it finds
/// it (feature `mutants`, never in a normal build).
#[cfg(feature = "mutants")]
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The real machine.
    #[default]
    None,
    /// (a) The deadline counted from the reply instead of the send.
    DeadlineFromReply,
    /// (b) No deadline: a leader only demotes on a rejected renew.
    NoDeadline,
    /// (c) A reply is taken for the request in flight whatever its id.
    StaleReplyAccepted,
    /// (d) The model database renews on the holder alone, ignoring the
    /// epoch (consulted by `sim::ModelDb`, not by `LeaseState`).
    RenewIgnoresEpoch,
    /// (e) A demotion does not stop the gated work.
    WorkKeptOnDemotion,
    /// (f) A lease set giving a lease up for the share (surplus) swallows
    /// its `StopWork`, so the release goes out with the work still running
    /// (consulted by `LeaseSet`, not by `LeaseState`).
    SetYieldKeepsWork,
    /// (g) The model database's batch acquire takes every named row, held
    /// or not (consulted by `sim::ModelDb::acquire_batch`): a set steals.
    AcquireBatchTakesHeld,
    /// (h) A lease set's fair share rounded down for every member (the
    /// `N mod n` first-ranked members not given their extra lease;
    /// consulted by `LeaseSet::target`): with 1 lease and 2 nodes each
    /// aims for none, so once both plan nobody competes for it. Nothing is
    /// held twice, nothing stolen: only liveness can tell.
    SetShareRoundsDown,
    /// (i) The model database ignores the server incarnation (consulted by
    /// `sim::ModelDb`): a row that outlived a failover is taken, renewed
    /// and fenced as if nothing had been lost.
    IncarnationIgnored,
    /// (j) A leader yields to any live candidate, whatever its rank
    /// (consulted by `LeaseState::yield_to`): the lease moves down as well
    /// as up, and two candidates can pass it back and forth.
    YieldToAnyCandidate,
    /// (k) A lease set handing a lease over swallows its `StopWork`, so
    /// the hand-over statement goes out with the work still running and
    /// the successor's term starts beside it (consulted by `LeaseSet`).
    SetHandOverKeepsWork,
    /// (l) The model database adopts a row from another server
    /// incarnation at `epoch + 2^32`, the constant jump of old, instead of
    /// `sql::adopted_epoch` (consulted by `sim::ModelDb`): two lossy
    /// failovers in a row give one epoch to two terms.
    ConstantEpochJump,
    /// (n) A fresh row is the caller's at epoch 1 whatever the table's
    /// marker says (consulted by `sim::ModelDb`): a lease whose first row
    /// a failover lost leads at once on the new server, while the lost
    /// term's holder still runs.
    FirstRowUnguarded,
    /// (o) A leader ignores its own health (consulted by `LeaseState`):
    /// unhealthy, it neither yields to a healthy candidate nor hands over
    /// when its work escalates, so the work stays where it cannot run.
    IgnoresOwnHealth,
    /// (p) A set that renews by liveness (DESIGN §9 "Renewal by liveness"): the model
    /// database's acquire takes a linked row whatever its holder's
    /// liveness (consulted by `sim::ModelDb`): a lease is taken while its
    /// holder's membership row is live and it still leads.
    LinkedTakenWhileLive,
}

/// What the model checker reads of a machine to tell states apart (feature
/// `sim`): every field that can change what the machine does next. The
/// jitter generator is left out: the checker runs with jitter 0, where it
/// has no effect.
#[cfg(feature = "sim")]
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    pub(crate) next_request: u64,
    /// The request in flight: id, statement, send time.
    pub(crate) in_flight: Option<(RequestId, Operation, Instant)>,
    /// While leading: the epoch and the local deadline.
    pub(crate) leading: Option<(Epoch, Instant)>,
    pub(crate) next_attempt: Instant,
    pub(crate) notice_pending: bool,
    /// While shutting down from leadership: how long the release may take.
    pub(crate) release_by: Option<Instant>,
    /// `None` while running; `Some(release)` while shutting down.
    pub(crate) shutting_down: Option<Option<Epoch>>,
    pub(crate) finished: bool,
    pub(crate) published: Leadership,
    /// A planned handover under way: its epoch and reservation.
    pub(crate) hand_over: Option<(Epoch, Option<HolderId>)>,
    /// After a handover: until when release notices are ignored.
    pub(crate) aside_until: Option<Instant>,
    /// When a follower's next announcement is due, if it announces.
    pub(crate) next_announce: Option<Instant>,
    /// The candidate the last renewal read.
    pub(crate) preferred: Option<HolderId>,
    /// What the health probe last said, and the end of a cool-down.
    pub(crate) health: (Option<bool>, Option<Instant>),
}

#[cfg(feature = "sim")]
impl LeaseState {
    /// The machine's state for the model checker's fingerprints.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            next_request: self.next_request,
            in_flight: self.in_flight.map(|r| (r.id, r.operation, r.sent_at)),
            leading: match self.standing {
                Standing::Leader {
                    epoch, deadline, ..
                } => Some((epoch, deadline)),
                Standing::Follower => None,
            },
            next_attempt: self.next_attempt,
            notice_pending: self.notice_pending,
            release_by: self.release_by,
            shutting_down: match self.phase {
                Phase::ShuttingDown { release } => Some(release),
                _ => None,
            },
            finished: self.phase == Phase::Finished,
            published: self.published.clone(),
            hand_over: self.hand_over.as_ref().map(|h| (h.epoch, h.to.clone())),
            aside_until: self.aside_until,
            next_announce: self.announce_due_at(),
            preferred: self.preferred.as_ref().map(|c| c.holder.clone()),
            health: (self.probe, self.cool_down_until),
        }
    }
}
