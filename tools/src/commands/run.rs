//! `picolease run`: contend for a lease until stopped, printing each
//! transition; optionally run a command while leader.

use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use picolease::{
    random_u64, unique_holder_id, Config, HolderId, Leadership, LeaseName, RecvError, Role,
    Subscription, TableName, Transition,
};
use signal_hook::consts::{SIGINT, SIGTERM};

use super::child::{self, ChildEvent, Gated};
use crate::backend::{Backend, Contender};
use crate::cli::RunArgs;
use crate::failure::CliError;
use crate::output::{line, unix_ms};

/// Why the main loop stops.
enum Stop {
    Signal,
    ChildExited(u8),
    ChildFailed(String),
    DriverFinished,
}

/// Runs until SIGTERM/SIGINT, CMD's own exit, or a fatal driver error.
pub fn run(backend: &Backend, table: &TableName, args: RunArgs) -> Result<ExitCode, CliError> {
    let lease = LeaseName::new(&args.name).map_err(CliError::usage)?;
    let holder = match &args.node {
        Some(node) => HolderId::new(node).map_err(CliError::usage)?,
        None => unique_holder_id(),
    };
    let mut config = Config::with_ttl(lease.clone(), holder.clone(), args.ttl);
    if let Some(interval) = args.interval {
        config = config.interval(interval);
    }
    config.seed = random_u64();
    config.validate().map_err(CliError::usage)?;

    // Signals first, so a SIGTERM during start-up is not lost.
    let signals = install_signals()?;
    let (child_tx, child_rx) = mpsc::channel();
    let gated = (!args.command.is_empty())
        .then(|| Arc::new(Gated::new(args.command.clone(), args.grace, child_tx)));
    let printer = Printer {
        lease: lease.as_str(),
        node: holder.as_str(),
        json: args.json,
    };
    let session = Session {
        signals,
        children: child_rx,
        printer,
    };
    let (driver, transitions) = backend.start(table, config, gated)?;
    session.run(driver, transitions)
}

/// A thread that forwards SIGTERM and SIGINT to the main loop.
fn install_signals() -> Result<mpsc::Receiver<i32>, CliError> {
    let (signal_tx, signal_rx) = mpsc::channel();
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| CliError::runtime(format!("cannot install signal handlers: {e}")))?;
    std::thread::Builder::new()
        .name("picolease-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if signal_tx.send(signal).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| CliError::runtime(format!("cannot start the signal thread: {e}")))?;
    Ok(signal_rx)
}

/// The backend-neutral part of `run`: print every transition, stop on a
/// signal, CMD's own exit or the driver's end, then shut down and exit as
/// the contract says.
struct Session<'a> {
    signals: mpsc::Receiver<i32>,
    children: mpsc::Receiver<ChildEvent>,
    printer: Printer<'a>,
}

impl Session<'_> {
    fn run(
        self,
        driver: Box<dyn Contender>,
        mut transitions: Subscription,
    ) -> Result<ExitCode, CliError> {
        let Session {
            signals,
            children,
            printer,
        } = self;
        if !printer.json {
            line(&format!(
                "{} contending for lease \"{}\"",
                printer.node, printer.lease
            ));
        }
        let stop = loop {
            while let Ok(transition) = transitions.try_recv() {
                printer.print(&transition);
            }
            if signals.try_recv().is_ok() {
                break Stop::Signal;
            }
            match children.try_recv() {
                Ok(ChildEvent::Exited(status)) => {
                    break Stop::ChildExited(child::exit_code(status))
                }
                Ok(ChildEvent::SpawnFailed(message)) => break Stop::ChildFailed(message),
                Err(_) => {}
            }
            if driver.is_finished() {
                break Stop::DriverFinished;
            }
            // Transitions are the thing to react to fast; the rest is polled.
            match transitions.recv_timeout(Duration::from_millis(20)) {
                Ok(transition) => printer.print(&transition),
                Err(RecvError::Lagged(missed)) => lagged(missed),
                Err(_) => {}
            }
        };
        // Stops CMD (the gated work) first, then releases.
        let outcome = driver.shutdown();
        for transition in transitions {
            match transition {
                Ok(transition) => printer.print(&transition),
                Err(RecvError::Lagged(missed)) => lagged(missed),
                Err(_) => {}
            }
        }
        outcome?;
        match stop {
            Stop::Signal => Ok(ExitCode::SUCCESS),
            Stop::ChildExited(code) => Ok(ExitCode::from(code)),
            Stop::ChildFailed(message) => Err(CliError::runtime(message)),
            Stop::DriverFinished => Err(CliError::runtime(format!(
                "the lease driver for \"{}\" stopped unexpectedly",
                printer.lease
            ))),
        }
    }
}

/// Prints transitions as the contract says.
struct Printer<'a> {
    lease: &'a str,
    node: &'a str,
    json: bool,
}

impl Printer<'_> {
    fn print(&self, transition: &Transition) {
        let Leadership {
            role,
            epoch,
            holder,
            reason,
        } = &transition.leadership;
        let epoch = epoch.map(|e| e.get());
        let at = unix_ms(transition.at);
        let text = match (role, reason) {
            (Role::Leader, _) if self.json => serde_json::json!({
                "event": "leader", "name": self.lease, "node": self.node,
                "epoch": epoch, "unix_ms": at,
            })
            .to_string(),
            (Role::Leader, _) => format!(
                "{} leader of \"{}\" at epoch {}",
                self.node,
                self.lease,
                epoch.unwrap_or(0)
            ),
            (Role::Follower, Some(reason)) if self.json => serde_json::json!({
                "event": "follower", "name": self.lease, "node": self.node,
                "epoch": epoch, "reason": reason.as_str(), "unix_ms": at,
            })
            .to_string(),
            (Role::Follower, Some(reason)) => format!(
                "{} follower of \"{}\": left epoch {} ({})",
                self.node,
                self.lease,
                epoch.unwrap_or(0),
                reason.as_str()
            ),
            // A new holder observed: shown to people, not in the JSON stream.
            (Role::Follower, None) if self.json => return,
            (Role::Follower, None) => match holder {
                Some(holder) => format!(
                    "{} follower of \"{}\": held by {holder} at epoch {}",
                    self.node,
                    self.lease,
                    epoch.unwrap_or(0)
                ),
                None => return,
            },
        };
        line(&text);
    }
}

/// The event stream reads promptly, so this never happens in practice;
/// if it does, it is said rather than hidden.
fn lagged(missed: u64) {
    tracing::error!(missed, "the event stream fell behind the driver");
    eprintln!("warning: {missed} transitions were published faster than they could be printed");
}
