//! One file per subcommand.

mod admin;
pub mod child;
pub mod run;
mod simulate;

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
        Command::Demo { nodes, ttl } => return crate::demo::run(usize::from(nodes), ttl),
        Command::Simulate {
            nodes,
            seed,
            ttl,
            ref faults,
        } => return simulate::run(usize::from(nodes), seed, ttl, faults),
        _ => {}
    }
    // Validate both before touching any file.
    let table = TableName::new(&cli.table).map_err(CliError::usage)?;
    let backend = Backend::parse(&cli.db)?;
    match cli.command {
        Command::Init => admin::init(&backend, &table),
        Command::Status { json } => admin::status(&backend, &table, json),
        Command::Release { name, force } => admin::release(&backend, &table, &name, force),
        Command::Run(args) => run::run(&backend, &table, args),
        Command::Demo { .. } | Command::Simulate { .. } => unreachable!("handled above"),
    }
}
