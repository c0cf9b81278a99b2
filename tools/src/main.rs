//! `picolease`: the command-line tool. Its flags, events and exit codes
//! are a contract exercised from outside (see `tools/tests/`).
//!
//! Exit codes: 0 success, 2 bad usage or configuration, 1 failure at run
//! time. Every error is one line on stderr; no panic reaches the user (a
//! bug still ends in one line and exit 1).

mod backend;
mod bench;
mod cli;
mod commands;
mod demo;
mod duration;
mod failure;
mod guard;
mod http;
mod memory;
mod name_spec;
mod output;
mod pdeathsig;
mod term;
mod timeline;

use std::process::ExitCode;

use clap::Parser;

use crate::failure::CliError;

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "error: internal error (a bug in picolease){at}: {}",
            failure::one_line(&message)
        );
    }));
    match std::panic::catch_unwind(run) {
        Ok(Ok(code)) => code,
        Ok(Err(error)) => {
            eprintln!("error: {error}");
            error.exit_code()
        }
        Err(_) => ExitCode::from(1),
    }
}

fn run() -> Result<ExitCode, CliError> {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return Ok(clap_error(e)),
    };
    init_logging();
    commands::dispatch(cli)
}

/// Help and version go to stdout with exit 0; a usage error is reduced to
/// its first line (which names the flag or value) and exits 2.
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprintln!(
                "error: a subcommand is required: demo, init, status, run, release, bench, simulate, check, timeline or sql (see --help)"
            );
            ExitCode::from(2)
        }
        _ => {
            // The first line names the problem; when it ends with a colon
            // the value follows on the next lines.
            let rendered = e.render().to_string();
            let mut lines = rendered
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty());
            let first = lines.next().unwrap_or("error: bad usage");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            let mut message = first.to_string();
            if message.ends_with(':') {
                let rest: Vec<&str> = lines.collect();
                message = format!("{message} {}", rest.join(", "));
            }
            eprintln!("error: {} (see --help)", failure::one_line(&message));
            ExitCode::from(2)
        }
    }
}

/// Driver logs go to stderr when `PICOLEASE_LOG` (or `RUST_LOG`) asks for
/// them, e.g. `PICOLEASE_LOG=picolease=debug`; silent otherwise.
fn init_logging() {
    let filter = std::env::var("PICOLEASE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "off".into());
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
