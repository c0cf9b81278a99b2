//! One file per subcommand.

mod admin;
mod after_failover;
mod check;
mod handover;
pub mod run;
mod simulate;
mod sql;

use std::process::ExitCode;

use picolease::TableName;

use crate::backend::Backend;
use crate::cli::{Cli, Command};
use crate::failure::CliError;

/// Validates the global options, then runs the subcommand.
pub fn dispatch(cli: Cli) -> Result<ExitCode, CliError> {
    // Commands that need no database come first, so a bad --db does not
    // stop them.
    match cli.command {
        Command::Demo {
            nodes,
            ttl,
            leases: None,
            ref timeline,
        } => return crate::demo::run(usize::from(nodes), ttl, timeline.as_deref()),
        Command::Demo {
            nodes,
            ttl,
            leases: Some(leases),
            ref timeline,
        } => {
            return crate::demo::set::run(
                usize::from(nodes),
                leases as usize,
                ttl,
                timeline.as_deref(),
            )
        }
        Command::Simulate {
            replay: Some(ref trace),
            nodes,
            leases,
            ranked,
            ref timeline,
            ..
        } => {
            return simulate::replay(
                trace,
                nodes.map(usize::from),
                leases,
                ranked,
                timeline.as_deref(),
            )
        }
        Command::Simulate {
            nodes,
            seed,
            ttl,
            ref faults,
            replay: None,
            ref timeline,
            ..
        } => {
            return simulate::run(
                usize::from(nodes.unwrap_or(3)),
                seed,
                ttl,
                faults,
                timeline.as_deref(),
            )
        }
        Command::Check {
            nodes,
            leases,
            depth,
            faults,
            failover,
            failovers,
            handover,
            ranked,
            health,
            json,
            ref timeline,
            memory,
        } => {
            let world = check::World {
                leases,
                failovers: failovers.unwrap_or(u8::from(failover)),
                handover,
                ranked,
                health,
            };
            return check::run(
                nodes,
                world,
                depth,
                faults,
                json,
                timeline.as_deref(),
                memory,
            );
        }
        Command::Timeline {
            ref inputs,
            ref output,
            ttl,
            ref title,
        } => {
            return crate::timeline::run(&crate::timeline::TimelineArgs {
                inputs,
                output,
                ttl,
                title: title.as_deref(),
            })
        }
        Command::Guard {
            grace_ms,
            deadline_ns,
            ref command,
        } => {
            return crate::guard::run(
                std::time::Duration::from_millis(grace_ms),
                std::time::Duration::from_nanos(deadline_ns),
                command,
            )
        }
        Command::Sql {
            ref dialect,
            json,
            by_liveness,
        } => return sql::run(&cli.db, &cli.table, dialect.as_deref(), json, by_liveness),
        _ => {}
    }
    // Validate both before touching any file.
    let table = TableName::new(&cli.table).map_err(CliError::usage)?;
    let backend = Backend::parse(&cli.db)?;
    match cli.command {
        Command::Init => admin::init(&backend, &table),
        Command::Status {
            json,
            members: true,
            ..
        } => admin::members(&backend, &table, json),
        Command::Status {
            json, watch: false, ..
        } => admin::status(&backend, &table, json),
        Command::Status {
            json, watch: true, ..
        } => admin::watch(&backend, &table, json),
        Command::Release {
            name: Some(name),
            force,
            ttl,
            ..
        } => admin::release(&backend, &table, &name, force, ttl),
        Command::Release {
            name: None, ttl, ..
        } => after_failover::run(&backend, &table, ttl),
        Command::Handover { name, to } => handover::run(&backend, &table, &name, to.as_deref()),
        Command::Run(args) => run::run(&backend, &table, *args),
        Command::Bench {
            leases: Some(leases),
            nodes,
            ttl,
            settle,
            window,
            json,
            every_row,
            ..
        } => crate::bench::write_cost::dispatch(
            &cli.db,
            &backend,
            &crate::bench::write_cost::CostOptions {
                leases: leases as usize,
                nodes: usize::from(nodes.unwrap_or(1)),
                ttl: ttl.unwrap_or(std::time::Duration::from_secs(10)),
                settle: settle.unwrap_or(std::time::Duration::from_secs(25)),
                window: window.unwrap_or(std::time::Duration::from_secs(20)),
                json,
                by_liveness: !every_row,
            },
        ),
        Command::Bench { rounds, json, .. } => crate::bench::run(
            &backend,
            crate::bench::Options {
                rounds: usize::from(rounds),
                json,
            },
        ),
        Command::Demo { .. }
        | Command::Simulate { .. }
        | Command::Sql { .. }
        | Command::Check { .. }
        | Command::Timeline { .. }
        | Command::Guard { .. } => unreachable!("handled above"),
    }
}
