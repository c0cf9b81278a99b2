//! `run`'s event loop, for one lease or many: the driver's transitions,
//! signals and CMD's start and end arrive on one channel ([`Event`]), and
//! the loop sleeps until one does (no polling), so a transition is printed
//! as soon as the driver publishes it and a SIGTERM starts the release at
//! once.
//!
//! A lone lease and a set run the same loop; the contract (README) differs
//! in two places only, both decided in [`Session::handle`]: a lone lease's
//! CMD exiting by itself ends `run` with CMD's status (a set's gives that
//! lease up and goes on), and a lone lease's lagging event stream is also
//! said on stderr (a set's only in the log).

use std::process::ExitCode;
use std::sync::mpsc;

use picolease::{LeaseName, RecvError, Subscription, Transition};

use crate::backend::Contender;
use crate::failure::CliError;
use crate::term::child::ChildEvent;
use crate::term::events::Printer;

/// Everything the loop waits for.
pub enum Event {
    Transition(Transition),
    /// The subscription fell this many transitions behind the driver.
    Lagged(u64),
    /// The driver stopped and published everything.
    DriverEnded,
    /// SIGTERM, SIGINT or SIGHUP: stop, releasing.
    Signal,
    /// SIGUSR1 (or, with --handover-on-term, any stopping signal): hand
    /// over, then exit.
    HandOver,
    /// CMD's start or end in a term of this lease.
    Child(LeaseName, ChildEvent),
    /// The health probe's verdict (the first, then each change).
    Health {
        /// True when it passed.
        healthy: bool,
        /// Why.
        reason: String,
    },
}

/// Why the loop stopped.
enum Stop {
    Signal,
    HandOver,
    /// A lone lease's CMD exited by itself, with this status.
    ChildExited(u8),
    ChildFailed(String),
    DriverFinished,
}

/// One `run`: its printer and its leases.
pub struct Session {
    /// Prints every event line.
    pub printer: Printer,
    /// The leases contended for, in the order given.
    pub leases: Vec<LeaseName>,
    /// What `/healthz` reports of the work.
    pub work: std::sync::Arc<crate::term::probe::WorkHealth>,
}

impl Session {
    /// A lone lease keeps its own exit semantics (README): one name is
    /// the driver's lone-lease handle ([`crate::backend::Leases::new`]).
    fn lone(&self) -> Option<&LeaseName> {
        match self.leases.as_slice() {
            [lease] => Some(lease),
            _ => None,
        }
    }

    /// Prints events until a reason to stop, then shuts the contender down
    /// (CMD first, then the release) while printing what that publishes as
    /// it is published.
    pub fn run(
        &self,
        contender: Box<dyn Contender>,
        events: mpsc::Receiver<Event>,
    ) -> Result<ExitCode, CliError> {
        self.printer.start(&self.leases);
        let stop = loop {
            let Ok(event) = events.recv() else {
                break Stop::DriverFinished;
            };
            if let Some(stop) = self.handle(Some(contender.as_ref()), event) {
                break stop;
            }
        };
        let printing = !matches!(stop, Stop::DriverFinished);
        let hand_over = matches!(stop, Stop::HandOver);
        let outcome = print_during(
            printing,
            events,
            |event| {
                self.handle(None, event);
            },
            || {
                if hand_over {
                    contender.hand_over_then_shutdown()
                } else {
                    contender.shutdown()
                }
            },
        );
        outcome?;
        match stop {
            Stop::Signal | Stop::HandOver => Ok(ExitCode::SUCCESS),
            Stop::ChildExited(code) => Ok(ExitCode::from(code)),
            Stop::ChildFailed(message) => Err(CliError::runtime(message)),
            Stop::DriverFinished => Err(CliError::runtime(match self.lone() {
                Some(lease) => format!(
                    "the lease driver for \"{}\" stopped unexpectedly",
                    lease.as_str()
                ),
                None => "the lease set's driver stopped unexpectedly".to_string(),
            })),
        }
    }

    /// Prints one event; says whether it is a reason to stop. `contender`
    /// is `None` once it is shutting down (nothing to give up any more).
    fn handle(&self, contender: Option<&dyn Contender>, event: Event) -> Option<Stop> {
        let printer = &self.printer;
        match event {
            Event::Transition(transition) => printer.transition(&transition),
            Event::Lagged(missed) if self.lone().is_some() => {
                // The loop reads promptly; if it ever fell behind, say so.
                tracing::error!(missed, "the event stream fell behind the driver");
                eprintln!(
                    "warning: {missed} transitions were published faster than they could be printed"
                );
            }
            Event::Lagged(missed) => {
                tracing::warn!(
                    missed,
                    "the event printer fell behind; transitions were dropped"
                )
            }
            Event::Child(lease, ChildEvent::Started { pid, epoch }) => {
                printer.child(&lease, pid, epoch)
            }
            Event::Child(
                lease,
                ChildEvent::Ended {
                    pid,
                    epoch,
                    status,
                    by_itself,
                    supervised,
                },
            ) => {
                printer.child_exit(&lease, pid, epoch, &status);
                // A failure under `--restart on-failure` is the
                // supervisor's: it restarts CMD or escalates.
                if supervised {
                    return None;
                }
                // A CMD stopped at its term's end (by the core, or by the
                // guard's SIGTERM just before it) is no reason to stop: the
                // core ends the term and `run` contends on. One that exited
                // by itself ends a lone lease's `run`; in a set its work is
                // done: its lease is given up and the set goes on.
                if by_itself {
                    if self.lone().is_some() {
                        return Some(Stop::ChildExited(status.exit_code()));
                    }
                    if let Some(contender) = contender {
                        contender.give_up(&lease);
                    }
                }
            }
            Event::Child(_, ChildEvent::SpawnFailed(message)) => {
                return Some(Stop::ChildFailed(message))
            }
            Event::Child(
                lease,
                ChildEvent::Failed {
                    epoch,
                    status,
                    restarts,
                    escalated,
                },
            ) => {
                self.work.failed(lease.as_str());
                printer.work_failed(&lease, epoch, &status, restarts, escalated);
                if let (Some(cool_down), Some(contender)) = (escalated, contender) {
                    contender.escalate(&lease, picolease::Epoch::new(epoch), cool_down);
                }
            }
            Event::Health { healthy, reason } => {
                for lease in &self.leases {
                    self.work.heard(lease.as_str(), healthy, &reason);
                    printer.health(lease, healthy, &reason);
                }
                if let Some(contender) = contender {
                    contender.report_health(healthy);
                }
            }
            Event::Signal => return Some(Stop::Signal),
            Event::HandOver => return Some(Stop::HandOver),
            Event::DriverEnded => return Some(Stop::DriverFinished),
        }
        None
    }
}

/// Feeds the driver's transitions to the loop, then `DriverEnded`.
pub fn forward_transitions(transitions: Subscription, events: mpsc::Sender<Event>) {
    std::thread::spawn(move || {
        for received in transitions {
            let event = match received {
                Ok(transition) => Event::Transition(transition),
                Err(RecvError::Lagged(missed)) => Event::Lagged(missed),
                Err(_) => break,
            };
            if events.send(event).is_err() {
                return;
            }
        }
        let _ = events.send(Event::DriverEnded);
    });
}

/// Runs `shutdown` while another thread hands every event it publishes to
/// `print` as it arrives, up to the driver's end (`DriverEnded`), when
/// `printing`. A shutdown returns only after the driver has finished,
/// which on PostgreSQL is a linger after the release
/// (`picolease::postgres::DEFAULT_LINGER`): printing the release's
/// `follower` only then would put it after the successor's `leader` line.
fn print_during<T>(
    printing: bool,
    events: mpsc::Receiver<Event>,
    print: impl FnMut(Event) + Send,
    shutdown: impl FnOnce() -> T,
) -> T {
    if !printing {
        return shutdown();
    }
    let mut print = print;
    std::thread::scope(|scope| {
        let printer = scope.spawn(move || {
            while let Ok(event) = events.recv() {
                if matches!(event, Event::DriverEnded) {
                    break;
                }
                print(event);
            }
        });
        let outcome = shutdown();
        let _ = printer.join();
        outcome
    })
}
