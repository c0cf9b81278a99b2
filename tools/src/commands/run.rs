//! `picolease run`: contend for a lease until stopped, printing each event;
//! optionally run a command while leader.
//!
//! The loop is event-driven: the driver's transitions, signals and the
//! command's start and end all arrive on one channel, and the loop sleeps
//! until one does (no polling), so a transition is printed as soon as the
//! driver publishes it and a SIGTERM starts the release at once.

use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use picolease::{
    random_u64, unique_holder_id, Config, HolderId, LeaseName, Rank, RecvError, Subscription,
    TableName, Transition,
};

use super::run_loop::{install_signals_with, print_during, wedge_for_tests, IsDriverEnd};
use crate::backend::{Backend, Contender};
use crate::cli::RunArgs;
use crate::duration::show;
use crate::failure::CliError;
use crate::term::child::{ChildEvent, Gated};
use crate::term::events::{Printed, Printer};

/// The default grace: at most this, and at most half the bound.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Everything the loop waits for.
enum Event {
    Transition(Transition),
    Lagged(u64),
    /// The driver stopped and published everything.
    DriverEnded,
    Signal,
    /// SIGUSR1 (or, with --handover-on-term, any stopping signal): hand
    /// over, then exit.
    HandOverSignal,
    Child(ChildEvent),
}

/// Why the loop stopped.
enum Stop {
    Signal,
    HandOver,
    ChildExited(u8),
    ChildFailed(String),
    DriverFinished,
}

/// Runs until SIGTERM, SIGINT or SIGHUP, CMD's own exit, or a fatal driver
/// error.
pub fn run(backend: &Backend, table: &TableName, args: RunArgs) -> Result<ExitCode, CliError> {
    let names =
        crate::name_spec::expand_names(&args.name).map_err(|e| CliError::usage(e.to_string()))?;
    let names = names
        .iter()
        .map(|name| LeaseName::new(name).map_err(CliError::usage))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(reserved) = names.iter().find(|n| {
        n.as_str().starts_with(picolease::sql::MEMBER_PREFIX)
            || n.as_str().starts_with(picolease::sql::HANDOVER_PREFIX)
            || n.as_str().starts_with(picolease::sql::PREFERRED_PREFIX)
    }) {
        return Err(CliError::usage(format!(
            "--name {:?}: names starting with {:?} (the lease sets' membership rows), {:?} (handover requests) or {:?} (preferred candidates) are reserved",
            reserved.as_str(),
            picolease::sql::MEMBER_PREFIX,
            picolease::sql::HANDOVER_PREFIX,
            picolease::sql::PREFERRED_PREFIX
        )));
    }
    let rank = Rank::new(args.priority, args.version_tag.as_deref()).map_err(CliError::usage)?;
    let lease = names[0].clone();
    // A `--node` is a stable name two processes may share: the stored id
    // adds this process's incarnation (DESIGN §3).
    let (node, holder) = match &args.node {
        Some(node) => (
            node.clone(),
            HolderId::incarnation(node, random_u64()).map_err(CliError::usage)?,
        ),
        None => {
            let holder = unique_holder_id();
            (holder.as_str().to_string(), holder)
        }
    };
    let mut config = Config::with_ttl(lease.clone(), holder.clone(), args.ttl);
    if let Some(interval) = args.interval {
        config = config.interval(interval);
    }
    config.seed = random_u64();
    config.rank = rank;
    config.validate().map_err(CliError::usage)?;
    let grace = grace(&config, args.grace, !args.command.is_empty())?;
    if !args.command.is_empty() {
        // CMD's guard needs the parent-death signal (Linux): refused
        // elsewhere before anything starts, for a lone lease and a set.
        crate::pdeathsig::check_available()?;
        // The core stops CMD at deadline − grace when renewals keep failing;
        // the guard enforces the same instant on its own.
        config.stop_lead = grace;
        config.validate().map_err(CliError::usage)?;
    }
    // A malformed address is refused before anything starts (exit 2), a
    // taken one when binding (exit 1); the recorder is installed before
    // the lease starts, so every series is registered at zero.
    let listener = match &args.listen {
        Some(value) => Some(crate::http::Listener::bind(crate::http::parse_listen(
            value,
        )?)?),
        None => None,
    };

    if names.len() > 1 {
        // The membership row's name carries the rank: refused here if it
        // would not fit (DESIGN §9 "Preferred members").
        let template = config.without_lease();
        template.validate().map_err(CliError::usage)?;
        let prepared = super::run_set::Prepared {
            node,
            holder,
            template,
            grace,
            listener,
        };
        return super::run_set::run(backend, table, args, names, prepared);
    }

    // Signals first, so a SIGTERM during start-up is not lost.
    let (tx, events) = mpsc::channel();
    let stop_signal = if args.handover_on_term {
        || Event::HandOverSignal
    } else {
        || Event::Signal
    };
    install_signals_with(tx.clone(), stop_signal, || Event::HandOverSignal)?;
    // Gated work even without CMD: a term's end waits for its `follower`
    // line, and the release for the work.
    let printed = Arc::new(Printed::default());
    let child_tx = tx.clone();
    let gated = Some(Arc::new(Gated::new(
        args.command.clone(),
        grace,
        node.clone(),
        Some(Arc::clone(&printed)),
        move |_: &LeaseName, event| {
            let _ = child_tx.send(Event::Child(event));
        },
    )));
    let printer = Printer {
        lease: lease.as_str().to_string(),
        node,
        holder,
        json: args.json,
        printed,
    };
    let (driver, transitions) = backend.start(table, config, gated)?;
    let snapshots = crate::backend::lease_snapshots(&transitions)?;
    if let Some(listener) = listener {
        tracing::info!(addr = %listener.addr(), "serving /metrics, /leader and /healthz");
        listener.serve(snapshots.clone())?;
    }
    wedge_for_tests(move || snapshots.wedge_loop_for_tests());
    forward_transitions(transitions, tx);
    session(&printer, driver, events)
}

/// The grace between SIGTERM and SIGKILL when a term ends. It is the core's
/// stop lead (`Config::stop_lead`): one rule for the library and the CLI,
/// checked against the same bound, `ttl·(1 − ρ) − interval − request
/// timeout` (less the database clock's millisecond), so renewals that
/// succeed never reach it. Checked only with `-- CMD`.
fn grace(config: &Config, asked: Option<Duration>, command: bool) -> Result<Duration, CliError> {
    let bound = config.stop_lead_bound();
    match asked {
        None => Ok((bound / 2).min(DEFAULT_GRACE)),
        Some(grace) if grace.is_zero() || !command => Ok(grace),
        Some(grace) if grace < bound => Ok(grace),
        Some(grace) => Err(CliError::usage(format!(
            "--grace {} must be below ttl·(1 − ρ) − 1ms − interval − request timeout = {} (ttl {}, ρ·ttl {}, interval {}, timeout {}); use --grace 0 to kill at the deadline",
            show(grace),
            show(bound),
            show(config.ttl),
            show(config.drift),
            show(config.interval),
            show(config.request_timeout)
        ))),
    }
}

/// Prints events until a reason to stop, then shuts the driver down (CMD
/// first, then the release) while printing what that publishes as it is
/// published.
fn session(
    printer: &Printer,
    driver: Box<dyn Contender>,
    events: mpsc::Receiver<Event>,
) -> Result<ExitCode, CliError> {
    printer.start();
    let stop = loop {
        let Ok(event) = events.recv() else {
            break Stop::DriverFinished;
        };
        if let Some(stop) = handle(printer, event) {
            break stop;
        }
    };
    let printing = !matches!(stop, Stop::DriverFinished);
    let hand_over = matches!(stop, Stop::HandOver);
    let outcome = print_during(
        printing,
        events,
        |event| {
            handle(printer, event);
        },
        || {
            if hand_over {
                driver.hand_over_then_shutdown()
            } else {
                driver.shutdown()
            }
        },
    );
    outcome?;
    match stop {
        Stop::Signal | Stop::HandOver => Ok(ExitCode::SUCCESS),
        Stop::ChildExited(code) => Ok(ExitCode::from(code)),
        Stop::ChildFailed(message) => Err(CliError::runtime(message)),
        Stop::DriverFinished => Err(CliError::runtime(format!(
            "the lease driver for \"{}\" stopped unexpectedly",
            printer.lease
        ))),
    }
}

/// Prints one event; says whether it is a reason to stop.
fn handle(printer: &Printer, event: Event) -> Option<Stop> {
    match event {
        Event::Transition(transition) => printer.transition(&transition),
        Event::Lagged(missed) => {
            // The loop reads promptly; if it ever fell behind, say so.
            tracing::error!(missed, "the event stream fell behind the driver");
            eprintln!(
                "warning: {missed} transitions were published faster than they could be printed"
            );
        }
        Event::Child(ChildEvent::Started { pid, epoch }) => printer.child(pid, epoch),
        Event::Child(ChildEvent::Ended {
            pid,
            epoch,
            status,
            by_itself,
        }) => {
            printer.child_exit(pid, epoch, &status);
            // A CMD stopped at its term's end (by the core, or by the
            // guard's SIGTERM just before it) is no reason to stop: the
            // core ends the term and `run` contends on.
            if by_itself {
                return Some(Stop::ChildExited(status.exit_code()));
            }
        }
        Event::Child(ChildEvent::SpawnFailed(message)) => return Some(Stop::ChildFailed(message)),
        Event::Signal => return Some(Stop::Signal),
        Event::HandOverSignal => return Some(Stop::HandOver),
        Event::DriverEnded => return Some(Stop::DriverFinished),
    }
    None
}

impl IsDriverEnd for Event {
    fn is_driver_end(&self) -> bool {
        matches!(self, Event::DriverEnded)
    }
}

/// Feeds the driver's transitions to the loop, then `DriverEnded`.
fn forward_transitions(transitions: Subscription, events: mpsc::Sender<Event>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use picolease::HolderId;

    fn config(ttl_ms: u64) -> Config {
        Config::with_ttl(
            LeaseName::new("l").unwrap(),
            HolderId::new("h").unwrap(),
            Duration::from_millis(ttl_ms),
        )
    }

    #[test]
    fn the_grace_must_fit_inside_the_lease() {
        let ms = Duration::from_millis;
        // ttl 1 s: bound = 1000 − 10 − 1 − 250 − 250 = 489 ms.
        let c = config(1_000);
        assert_eq!(
            grace(&c, None, true).unwrap(),
            Duration::from_micros(244_500)
        );
        assert_eq!(grace(&c, Some(ms(488)), true).unwrap(), ms(488));
        assert_eq!(grace(&c, Some(Duration::ZERO), true).unwrap(), ms(0));
        let err = grace(&c, Some(ms(489)), true).unwrap_err().to_string();
        assert!(err.contains("--grace") && err.contains("489ms"), "{err}");
        // Without CMD the grace is unused and not checked.
        assert_eq!(grace(&c, Some(ms(5_000)), false).unwrap(), ms(5_000));
        // ttl 10 s: bound 4.899 s, default half; 60 s: capped at 5 s.
        assert_eq!(
            grace(&config(10_000), None, true).unwrap(),
            Duration::from_micros(2_449_500)
        );
        assert_eq!(grace(&config(60_000), None, true).unwrap(), ms(5_000));
        // A bound that is not positive: the default is 0.
        let mut tight = config(1_000);
        tight.interval = ms(400);
        tight.request_timeout = ms(600);
        assert_eq!(grace(&tight, None, true).unwrap(), Duration::ZERO);
        assert!(grace(&tight, Some(ms(1)), true).is_err());
    }
}
