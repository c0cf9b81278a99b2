//! `run -- CMD`: the command runs only while this node leads.
//!
//! It is gated work like any other: started at the start of a term (after
//! the leadership is published), with the term in its environment, and
//! stopped when the term ends. CMD does not run under `run` directly but
//! under a guard process (`crate::guard`) that holds the term's deadline
//! and kills CMD's process group by it even if `run` is killed, stopped or
//! hung. This side starts the guard, forwards each new deadline after a
//! renewal, asks it to stop CMD when the term ends, and reports CMD's start
//! and end. The same code serves both backends.
//!
//! The guard's SIGTERM at `deadline − grace` and the core's stop of the
//! work at the same instant race. CMD's end counts as its own exit
//! (`by_itself`, after which a lone lease's `run` releases and exits with
//! CMD's status) only when the guard says it had not signalled CMD and the
//! term had not ended: whichever acts first, a CMD stopped at the term's
//! planned end is never taken for one that exited by itself.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use picolease::supervise::RestartPolicy;
use picolease::{LeaseName, Term};

use super::events::Printed;
use super::guard_link::{Guard, Report};
use super::restart::Restarts;
use super::status::ChildStatus;
use crate::guard::message;

/// What the supervisor reports to the main loop.
#[derive(Debug)]
pub enum ChildEvent {
    /// CMD started with this pid (its process group too).
    Started {
        /// CMD's pid.
        pid: u32,
        /// The term it runs in.
        epoch: u64,
    },
    /// CMD ended.
    Ended {
        /// CMD's pid.
        pid: u32,
        /// The term it ran in.
        epoch: u64,
        /// How.
        status: ChildStatus,
        /// True when CMD exited by itself: the guard had not signalled it
        /// and its term still ran. False when it was stopped at the term's
        /// end, by the core's stop or by the guard's own SIGTERM at the
        /// same instant, whichever came first, and whatever its status.
        by_itself: bool,
        /// True when it failed by itself under `--restart on-failure`: the
        /// supervisor restarts it or escalates ([`ChildEvent::Failed`]
        /// follows), so it is no reason for `run` to stop.
        supervised: bool,
    },
    /// CMD failed by itself under `--restart on-failure` (after its
    /// [`ChildEvent::Ended`]).
    Failed {
        /// The term it ran in.
        epoch: u64,
        /// How it ended.
        status: ChildStatus,
        /// Restarts within the period, this failure's included.
        restarts: u32,
        /// `Some(cool_down)` when the failures escalated: `run` hands the
        /// lease over and stands aside that long; `None` when CMD starts
        /// again after its backoff.
        escalated: Option<Duration>,
    },
    /// CMD could not be started.
    SpawnFailed(String),
}

/// How often the supervisor forwards a renewed deadline to the guard. The
/// guard kills CMD at the last deadline it got, and a renewal moves the
/// deadline an interval ahead of a deadline that is still ttl·(1 − ρ) −
/// interval away: forwarding within this is not late unless the grace is
/// within this of its bound (then the guard stops CMD early, and
/// [`Gated::after_guard_stop`] starts it again once the deadline is
/// forwarded).
const FORWARD: Duration = Duration::from_millis(100);

/// Where a supervisor sends its events, with the term's lease.
pub(super) type EventSink = dyn Fn(&LeaseName, ChildEvent) + Send + Sync;

/// Test seam (hidden; for `tools/tests/cli_term_race.rs`, never for
/// production): `PICOLEASE_TEST_GUARD_EARLY_MS=N` makes every guard that
/// `run` starts send its SIGTERM N ms before `deadline − grace` (the guard
/// is handed the grace plus N), so that at a term's planned end the guard,
/// not the core, is always the first to stop CMD. Read once, when `run`
/// builds its [`Gated`].
const GUARD_EARLY_FOR_TESTS: &str = "PICOLEASE_TEST_GUARD_EARLY_MS";

/// The grace the guard is handed: `grace`, plus the test seam's
/// [`GUARD_EARLY_FOR_TESTS`] when it is set.
fn guard_grace(grace: Duration) -> Duration {
    let early = std::env::var(GUARD_EARLY_FOR_TESTS)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    grace + early
}

/// How long an ended term's work waits for its `follower` line to be
/// printed: the printer runs on another thread and needs microseconds;
/// the bound only keeps a stuck stdout from holding the release.
const PRINT_WAIT: Duration = Duration::from_millis(200);

/// `-- CMD`, as gated work of either backend: [`Gated::run_term`] runs it
/// for one term. With no CMD it only holds the term's end until the term's
/// `follower` line is printed (a lone lease's `run`: the release waits for
/// the work, so no successor's `leader` line can come first).
pub struct Gated {
    command: Vec<String>,
    printed: Option<Arc<Printed>>,
    grace: Duration,
    /// The grace handed to the guard: `grace`, unless a test moved the
    /// guard's SIGTERM earlier ([`GUARD_EARLY_FOR_TESTS`]).
    guard_grace: Duration,
    node: String,
    /// Where events go, with the lease of the term: straight into `run`'s
    /// one queue, so a child's end is queued before the driver (which
    /// waits for it) can report its own.
    events: Box<EventSink>,
    /// `--restart on-failure`: each lease's supervisor (the core's
    /// restart intensity, DESIGN §5 "Work that fails"), by lease name.
    restart: Option<Restarts>,
    /// `--health-cmd` will report: the node counts as unhealthy until its
    /// first verdict.
    awaits_health: bool,
}

impl std::fmt::Debug for Gated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gated")
            .field("command", &self.command)
            .field("grace", &self.grace)
            .field("guard_grace", &self.guard_grace)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// What one term's supervision needs from the driver's context.
pub trait TermView {
    /// The term (lease, holder, epoch).
    fn term(&self) -> &Term;
    /// The leader's deadline (boottime), if still leading.
    fn deadline(&self) -> Option<Duration>;
    /// Sleeps up to `timeout`, waking when the term ends; true if it has.
    fn ended(&self, timeout: Duration) -> bool;
}

impl Gated {
    /// CMD with its arguments, the grace between SIGTERM and SIGKILL, the
    /// `--node` value, and where to report (with the term's lease: one
    /// `Gated` serves every lease of a set).
    pub fn new(
        command: Vec<String>,
        grace: Duration,
        node: String,
        printed: Option<Arc<Printed>>,
        events: impl Fn(&LeaseName, ChildEvent) + Send + Sync + 'static,
    ) -> Self {
        Gated {
            command,
            printed,
            grace,
            guard_grace: guard_grace(grace),
            node,
            events: Box::new(events),
            restart: None,
            awaits_health: false,
        }
    }

    /// `--restart on-failure` under `policy`: a CMD that fails by itself
    /// starts again after its backoff, and past the policy's intensity
    /// the failure escalates.
    pub fn restart_on_failure(mut self, policy: RestartPolicy) -> Self {
        self.restart = Some(Restarts::new(policy));
        self
    }

    /// `--health-cmd` will report through the handle's `report_health`:
    /// the backends start the handle unhealthy until the first verdict
    /// (`awaits_health_reports`, DESIGN §5 "Work that fails").
    pub fn awaiting_health(mut self) -> Self {
        self.awaits_health = true;
        self
    }

    /// Whether the node waits for its probe's first verdict.
    pub fn awaits_health(&self) -> bool {
        self.awaits_health
    }

    /// What follows CMD failing by itself at the end of a pass
    /// ([`Restarts::after_failure`]); `None` without `--restart`.
    fn after_failure(&self, view: &impl TermView, status: &ChildStatus) -> Option<Pass> {
        self.restart
            .as_ref()?
            .after_failure(view, status, &*self.events)
    }

    /// Runs CMD for one term until it exits by itself or the term ends,
    /// then has the guard stop it; returns once CMD is gone and, if the
    /// term has ended, its `follower` line is printed. A CMD the guard
    /// stopped on its own holds the return until the core ends the term,
    /// or starts again if the term goes on ([`Gated::after_guard_stop`]).
    pub fn run_term(&self, view: &impl TermView) {
        if self.command.is_empty() {
            while !view.ended(FORWARD) {}
        } else {
            self.supervise(view);
        }
        if view.ended(Duration::ZERO) {
            self.wait_printed(view.term());
        }
    }

    /// True when there is a CMD to run; without one a term's work only
    /// holds its end back until its `follower` line is printed.
    pub fn runs_command(&self) -> bool {
        !self.command.is_empty()
    }

    /// Waits (at most [`PRINT_WAIT`]) for the `follower` line of the ended
    /// `term`, so that its release, which comes after its work returns,
    /// comes after the line: a successor's `leader` line cannot precede it.
    pub fn wait_printed(&self, term: &Term) {
        if let Some(printed) = &self.printed {
            printed.wait_left(term.lease().as_str(), term.epoch().get(), PRINT_WAIT);
        }
    }

    /// Runs CMD under a guard until it ends, once, or again when the guard
    /// stopped it on a deadline that a renewal has since moved (see
    /// [`Gated::after_guard_stop`]).
    fn supervise(&self, view: &impl TermView) {
        while let Pass::Again = self.run_once(view) {}
    }

    /// One CMD under one guard, from its start to its end.
    fn run_once(&self, view: &impl TermView) -> Pass {
        let send = |event| (self.events)(view.term().lease(), event);
        let Some(deadline) = view.deadline() else {
            return Pass::Done; // The term was over before its work started.
        };
        if view.ended(Duration::ZERO) {
            return Pass::Done;
        }
        let mut guard = match Guard::start(
            &self.command,
            self.guard_grace,
            deadline,
            view.term(),
            &self.node,
        ) {
            Ok(guard) => guard,
            Err(message) => {
                send(ChildEvent::SpawnFailed(message));
                return Pass::Done;
            }
        };
        let pid = match guard.reports.recv() {
            Ok(Report::Pid(pid)) => pid,
            Ok(Report::Error(message)) => {
                send(ChildEvent::SpawnFailed(message));
                return Pass::Done;
            }
            _ => {
                send(ChildEvent::SpawnFailed(format!(
                    "the guard of {:?} ended before starting it",
                    self.command[0]
                )));
                return Pass::Done;
            }
        };
        let epoch = view.term().epoch().get();
        // The term's `leader` line reaches the printer by another thread:
        // the `child` line waits for it (bounded), so stdout keeps the
        // order of what happened.
        if let Some(printed) = &self.printed {
            printed.wait_led(view.term().lease().as_str(), epoch, PRINT_WAIT);
        }
        send(ChildEvent::Started { pid, epoch });
        let mut forwarded = deadline;
        // Whether the guard had signalled CMD on its own (its deadline, or
        // a signal to the guard), not on this side's `stop`.
        let mut stopped_by_guard = false;
        let mut by_itself = true;
        let status = loop {
            match guard.reports.try_recv() {
                Ok(Report::Ended(ended)) => {
                    // CMD ended after the guard signalled it (at
                    // `deadline − grace`, possibly before the core's stop
                    // at the same instant), or after the term ended (say
                    // `run` was stopped meanwhile): not by itself, even
                    // with an exit code of its own (143 from a shell's
                    // trap, 0 from a graceful handler).
                    stopped_by_guard = ended.stopped;
                    by_itself = !ended.stopped && !view.ended(Duration::ZERO);
                    break ended.status;
                }
                Ok(_) => {}
                // The guard died without reporting: the kernel killed CMD
                // with it (parent-death signal).
                Err(mpsc::TryRecvError::Disconnected) => {
                    break ChildStatus::Signal("SIGKILL".into())
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
            if view.ended(FORWARD) {
                by_itself = false;
                guard.send(message::STOP);
                break guard.wait_status();
            }
            if let Some(now) = view.deadline().filter(|d| *d != forwarded) {
                forwarded = now;
                guard.send(&format!("{} {}", message::DEADLINE, now.as_nanos()));
            }
        };
        guard.reap();
        let supervised = by_itself && self.restart.is_some() && status != ChildStatus::Code(0);
        send(ChildEvent::Ended {
            pid,
            epoch,
            status: status.clone(),
            by_itself,
            supervised,
        });
        if stopped_by_guard && !view.ended(Duration::ZERO) {
            return self.after_guard_stop(view, forwarded);
        }
        if supervised {
            return self.after_failure(view, &status).unwrap_or(Pass::Done);
        }
        Pass::Done
    }

    /// The guard stopped CMD on its own while the core still leads: its
    /// SIGTERM at `deadline − grace` came first (the core stops the work at
    /// the same instant), its deadline `acted_on` was stale, or the guard
    /// was signalled. The term's work waits for the core, which decides:
    ///
    /// - it ends the term (renewals stalled: its stop at `deadline −
    ///   grace`, its demotion, `expired` or `lost`, at the deadline): the
    ///   work returns, and `run` contends on;
    /// - a renewal moves the deadline past `acted_on`, far enough that the
    ///   guard would not stop CMD again at once: the term goes on, and CMD
    ///   starts again in it, as the core's `StartWork` starts the work
    ///   again when a renewal follows its early stop (DESIGN §4b).
    fn after_guard_stop(&self, view: &impl TermView, acted_on: Duration) -> Pass {
        loop {
            if view.ended(FORWARD) {
                return Pass::Done;
            }
            match view.deadline() {
                None => return Pass::Done,
                Some(deadline)
                    if deadline > acted_on
                        && deadline.saturating_sub(self.guard_grace) > picolease::boottime() =>
                {
                    return Pass::Again
                }
                Some(_) => {}
            }
        }
    }
}

/// What one pass of the supervisor leads to.
pub(super) enum Pass {
    /// The term's CMD is done with: the term ended, or CMD exited by
    /// itself, or could not start.
    Done,
    /// Start CMD again in the same term.
    Again,
}
