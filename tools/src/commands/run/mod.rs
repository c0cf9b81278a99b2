//! `picolease run`: contend for one lease or many until stopped, printing
//! each event; optionally run a command while leader (one per held lease).
//!
//! One path for one name or many: the arguments become [`Leases`] (one
//! name: the driver's lone-lease handle; several: its set handle, with a
//! fair share between the processes, DESIGN §9), which every backend
//! starts; one event loop (`session.rs`) prints and stops either. With
//! several names one CMD runs per held lease (each under its own guard,
//! with that lease's PICOLEASE_NAME, PICOLEASE_HOLDER and
//! PICOLEASE_EPOCH); a CMD that exits by itself gives its lease up and the
//! process goes on contending, where a lone lease's ends `run`.

mod session;
mod signals;

use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use picolease::supervise::RestartPolicy;
use picolease::{random_u64, unique_holder_id, Config, HolderId, LeaseName, Rank, TableName};

use crate::backend::{Backend, Leases};
use crate::cli::RunArgs;
use crate::duration::show;
use crate::failure::CliError;
use crate::term::child::Gated;
use crate::term::events::{Printed, Printer};
use session::{forward_transitions, Event, Session};
use signals::{install_signals, wedge_for_tests};

/// The default grace: at most this, and at most half the bound.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Runs until SIGTERM, SIGINT or SIGHUP, a lone lease's CMD's own exit,
/// or a fatal driver error.
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
            || n.as_str() == picolease::sql::TABLE_MARKER
    }) {
        return Err(CliError::usage(format!(
            "--name {:?}: names starting with {:?} (the lease sets' membership rows), {:?} (handover requests) or {:?} (preferred candidates), and {:?} (the table's marker row), are reserved",
            reserved.as_str(),
            picolease::sql::MEMBER_PREFIX,
            picolease::sql::HANDOVER_PREFIX,
            picolease::sql::PREFERRED_PREFIX,
            picolease::sql::TABLE_MARKER
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

    let restart = restart_policy(&args, !args.command.is_empty())?;
    let probe = health_probe(&args, &config)?;
    // The `leader` line says the term's timings, for `picolease timeline`.
    let timing_ms = (millis(config.ttl), millis(config.interval));
    let leases = Leases::new(config, names)?.renewing_every_row(args.every_row);
    let names = leases.names();

    // Signals first, so a SIGTERM during start-up is not lost.
    let (tx, events) = mpsc::channel();
    install_signals(tx.clone(), args.handover_on_term)?;
    // Gated work even without CMD: each term's end waits for its
    // `follower` line, so a lease is released only after the line is out.
    // With CMD the supervisor waits; without, on PostgreSQL and MySQL a
    // task per held lease waits, and on SQLite the lone lease's work or,
    // in a set, a thread started when the term ends (`when_term_ends`: its
    // work would be a thread per held lease for the whole term).
    let printed = Arc::new(Printed::default());
    let child_tx = tx.clone();
    let mut gated = Gated::new(
        args.command.clone(),
        grace,
        node.clone(),
        Some(Arc::clone(&printed)),
        move |lease: &LeaseName, event| {
            let _ = child_tx.send(Event::Child(lease.clone(), event));
        },
    );
    if let Some(policy) = restart {
        gated = gated.restart_on_failure(policy);
    }
    if probe.is_some() {
        gated = gated.awaiting_health();
    }
    let started = backend.start(table, leases, Some(Arc::new(gated)))?;
    if let Some(probe) = probe {
        let health_tx = tx.clone();
        crate::term::probe::start(probe, move |healthy, reason| {
            health_tx.send(Event::Health { healthy, reason }).is_ok()
        })
        .map_err(|e| CliError::runtime(format!("cannot start the health probe: {e}")))?;
    }
    let work = Arc::new(crate::term::probe::WorkHealth::default());
    work.register(&names);
    let wedge = started.view.clone();
    wedge_for_tests(move || wedge.wedge_loop_for_tests());
    if let Some(listener) = listener {
        tracing::info!(addr = %listener.addr(), "serving /metrics, /leader and /healthz");
        listener
            .serve(crate::http::Source::new(started.view, &names).with_work(Arc::clone(&work)))?;
    }
    forward_transitions(started.transitions, tx);
    let session = Session {
        printer: Printer {
            node,
            holder,
            json: args.json,
            printed,
            epochs: Default::default(),
            timing_ms,
        },
        leases: names,
        work,
    };
    session.run(started.contender, events)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `--restart on-failure`'s policy (DESIGN §5 "Work that fails"), `None`
/// with `--restart no`; refused without a CMD to restart.
fn restart_policy(args: &RunArgs, command: bool) -> Result<Option<RestartPolicy>, CliError> {
    if args.restart != "on-failure" {
        if args.restart_limit.is_some()
            || args.restart_backoff.is_some()
            || args.cool_down.is_some()
        {
            return Err(CliError::usage(
                "--restart-limit, --restart-backoff and --cool-down go with --restart on-failure",
            ));
        }
        return Ok(None);
    }
    if !command {
        return Err(CliError::usage(
            "--restart on-failure restarts CMD: give one after --",
        ));
    }
    let defaults = RestartPolicy::default();
    let backoff = args.restart_backoff.unwrap_or(defaults.backoff);
    let policy = RestartPolicy {
        intensity: args
            .restart_limit
            .map_or(defaults.intensity, |limit| limit.restarts),
        period: args
            .restart_limit
            .map_or(defaults.period, |limit| limit.period),
        backoff,
        max_backoff: defaults.max_backoff.max(backoff),
        cool_down: args.cool_down.unwrap_or(defaults.cool_down),
    };
    policy.validate().map_err(CliError::usage)?;
    Ok(Some(policy))
}

/// `--health-cmd` with its interval (default: the lease's) and timeout
/// (default: the interval). With several names it says the health of the
/// set's member (DESIGN §9 "Members' health").
fn health_probe(
    args: &RunArgs,
    config: &Config,
) -> Result<Option<crate::term::probe::ProbeSpec>, CliError> {
    let Some(command) = &args.health_cmd else {
        if args.health_interval.is_some() || args.health_timeout.is_some() {
            return Err(CliError::usage(
                "--health-interval and --health-timeout go with --health-cmd",
            ));
        }
        return Ok(None);
    };
    if command.trim().is_empty() {
        return Err(CliError::usage("--health-cmd is empty"));
    }
    let every = args.health_interval.unwrap_or(config.interval);
    let timeout = args.health_timeout.unwrap_or(every);
    if every.is_zero() || timeout.is_zero() {
        return Err(CliError::usage(
            "--health-interval and --health-timeout must be above zero",
        ));
    }
    Ok(Some(crate::term::probe::ProbeSpec {
        command: command.clone(),
        every,
        timeout,
    }))
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
