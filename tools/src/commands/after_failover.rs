//! `picolease release --all --after-failover`: the operators' remedy after
//! a failover or a restore the database could not detect (DESIGN §3
//! "Failover", docs/operations.md §5.4).

use std::process::ExitCode;
use std::time::Duration;

use picolease::TableName;

use crate::backend::Backend;
use crate::duration::show;
use crate::failure::CliError;
use crate::output::line;

/// Puts every lease and membership row of `table` into a grace period of
/// `ttl` (nobody's, at an epoch past anything issued) and lists them. Exit
/// 1 when the table has no row to hold.
pub fn run(backend: &Backend, table: &TableName, ttl: Duration) -> Result<ExitCode, CliError> {
    let rows = backend.release_after_failover(table, ttl)?;
    if rows.is_empty() {
        return Err(CliError::runtime(format!(
            "no lease in table {table} of {}",
            backend.place()
        )));
    }
    for (name, epoch) in &rows {
        line(&format!(
            "lease {name:?}: nobody's for {} at least, epoch now {epoch}",
            show(ttl)
        ));
    }
    line(&format!(
        "{} row(s) held after the failover: a holder of a lost term can neither renew nor re-take its lease; contenders lead again after the grace period",
        rows.len()
    ));
    Ok(ExitCode::SUCCESS)
}
