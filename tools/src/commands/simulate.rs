//! `picolease simulate`: the core's deterministic simulator.

use std::process::ExitCode;
use std::time::Duration;

use crate::failure::CliError;

/// Not available yet: see the report.
pub fn run(_nodes: usize, _seed: u64, _ttl: Duration, _faults: &str) -> Result<ExitCode, CliError> {
    Err(CliError::runtime(
        "simulate is not available yet in this build (the core's simulator is being written)",
    ))
}
