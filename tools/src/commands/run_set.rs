//! `picolease run` with several names: one process contends for a set of
//! leases with a fair share between the processes (DESIGN §9).
//!
//! Same loop as the single-lease `run`: transitions, signals and CMD's
//! start and end arrive on one channel. Every event names its lease. One
//! CMD runs per held lease (each under its own guard, with that lease's
//! PICOLEASE_NAME, PICOLEASE_HOLDER and PICOLEASE_EPOCH); a CMD that exits
//! by itself gives its lease up and the process goes on contending. Only a
//! signal ends `run` (exit 0), or a fatal driver error (exit 1).

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use picolease::{HolderId, LeaseName, RecvError, SetConfig, TableName, Transition};

use super::run_loop::{install_signals_with, print_during, wedge_for_tests, IsDriverEnd};
use crate::backend::{Backend, SetContender};
use crate::cli::RunArgs;
use crate::failure::CliError;
use crate::term::child::{ChildEvent, Gated};
use crate::term::events::{Printed, Printer};

/// Everything the loop waits for.
enum Event {
    Transition(Transition),
    DriverEnded,
    Signal,
    /// SIGUSR1, or with --handover-on-term any stopping signal.
    HandOverSignal,
    Child(LeaseName, ChildEvent),
}

/// What the single-lease `run` has already settled: the identity, the
/// timings, the HTTP listener.
pub struct Prepared {
    /// The `--node` value (or the holder id).
    pub node: String,
    /// This process's holder id.
    pub holder: HolderId,
    /// Timings and holder for every lease.
    pub template: SetConfig,
    /// CMD's grace.
    pub grace: Duration,
    /// `--listen`, bound.
    pub listener: Option<crate::http::Listener>,
}

/// Runs the set until a signal (exit 0) or a fatal driver error.
pub fn run(
    backend: &Backend,
    table: &TableName,
    args: RunArgs,
    names: Vec<LeaseName>,
    prepared: Prepared,
) -> Result<ExitCode, CliError> {
    let Prepared {
        node,
        holder,
        template,
        grace,
        listener,
    } = prepared;
    let (tx, events) = mpsc::channel();
    // SIGUSR1 is "hand over, then exit": every held lease goes to the
    // member that ranks first for it (DESIGN §3 "Planned handover").
    let stop_signal = if args.handover_on_term {
        || Event::HandOverSignal
    } else {
        || Event::Signal
    };
    install_signals_with(tx.clone(), stop_signal, || Event::HandOverSignal)?;
    // Each term's end waits for its `follower` line, so a lease is
    // released only after the line is out. With CMD the supervisor waits;
    // without, on PostgreSQL and MySQL a task per held lease waits, and on
    // SQLite a thread started when the term ends (`when_term_ends`: its
    // work would be a thread per held lease for the whole term).
    let printed = Arc::new(Printed::default());
    let child_tx = tx.clone();
    let gated = Some(Arc::new(Gated::new(
        args.command.clone(),
        grace,
        node.clone(),
        Some(Arc::clone(&printed)),
        move |lease: &LeaseName, event| {
            let _ = child_tx.send(Event::Child(lease.clone(), event));
        },
    )));
    let all: BTreeSet<String> = names.iter().map(|n| n.as_str().to_string()).collect();
    let count = names.len();
    let (set, transitions, view) = backend.start_set(table, template, names, gated)?;
    let wedge = view.clone();
    wedge_for_tests(move || wedge.wedge_loop_for_tests());
    if let Some(listener) = listener {
        tracing::info!(addr = %listener.addr(), "serving /metrics, /leader and /healthz");
        listener.serve_set(crate::http::SetSource {
            status: view,
            names: Arc::new(all),
        })?;
    }
    let forward = tx;
    std::thread::spawn(move || {
        for received in transitions {
            match received {
                Ok(transition) => {
                    if forward.send(Event::Transition(transition)).is_err() {
                        return;
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "the event printer fell behind; transitions were dropped"
                    )
                }
                Err(_) => break,
            }
        }
        let _ = forward.send(Event::DriverEnded);
    });
    if !args.json {
        crate::output::line(&format!(
            "{node} contending for {count} leases as {holder} (fair share between the live members)"
        ));
    }
    let printers = Printers {
        node,
        holder,
        json: args.json,
        printed,
    };
    session(&printers, set, events)
}

impl IsDriverEnd for Event {
    fn is_driver_end(&self) -> bool {
        matches!(self, Event::DriverEnded)
    }
}

struct Printers {
    node: String,
    holder: HolderId,
    json: bool,
    printed: Arc<Printed>,
}

impl Printers {
    fn for_lease(&self, lease: &LeaseName) -> Printer {
        Printer {
            lease: lease.as_str().to_string(),
            node: self.node.clone(),
            holder: self.holder.clone(),
            json: self.json,
            printed: Arc::clone(&self.printed),
        }
    }
}

enum Stop {
    Signal,
    HandOverSignal,
    ChildFailed(String),
    DriverFinished,
}

fn session(
    printers: &Printers,
    set: Box<dyn SetContender>,
    events: mpsc::Receiver<Event>,
) -> Result<ExitCode, CliError> {
    let stop = loop {
        let Ok(event) = events.recv() else {
            break Stop::DriverFinished;
        };
        if let Some(stop) = handle(printers, Some(set.as_ref()), event) {
            break stop;
        }
    };
    // Printed as published, not after the shutdown's linger.
    let printing = !matches!(stop, Stop::DriverFinished);
    let outcome = print_during(
        printing,
        events,
        |event| {
            handle(printers, None, event);
        },
        || match stop {
            Stop::HandOverSignal => set.hand_over_then_shutdown(),
            _ => set.shutdown(),
        },
    );
    outcome?;
    match stop {
        Stop::Signal | Stop::HandOverSignal => Ok(ExitCode::SUCCESS),
        Stop::ChildFailed(message) => Err(CliError::runtime(message)),
        Stop::DriverFinished => Err(CliError::runtime(
            "the lease set's driver stopped unexpectedly".to_string(),
        )),
    }
}

/// Prints one event; says whether it is a reason to stop. `set` is `None`
/// once the set is shutting down (nothing to give up any more).
fn handle(printers: &Printers, set: Option<&dyn SetContender>, event: Event) -> Option<Stop> {
    match event {
        Event::Transition(transition) => {
            printers
                .for_lease(&transition.lease)
                .transition(&transition);
        }
        Event::Child(lease, ChildEvent::Started { pid, epoch }) => {
            printers.for_lease(&lease).child(pid, epoch);
        }
        Event::Child(
            lease,
            ChildEvent::Ended {
                pid,
                epoch,
                status,
                by_itself,
            },
        ) => {
            printers.for_lease(&lease).child_exit(pid, epoch, &status);
            // A CMD stopped at its term's end (by the core, or by the
            // guard's SIGTERM just before it) keeps its lease: the core
            // ends the term.
            if by_itself {
                // Its work is done: give the lease up; the set goes on.
                if let Some(set) = set {
                    set.give_up(&lease);
                }
            }
        }
        Event::Child(_, ChildEvent::SpawnFailed(message)) => {
            return Some(Stop::ChildFailed(message))
        }
        Event::Signal => return Some(Stop::Signal),
        Event::HandOverSignal => return Some(Stop::HandOverSignal),
        Event::DriverEnded => return Some(Stop::DriverFinished),
    }
    None
}
