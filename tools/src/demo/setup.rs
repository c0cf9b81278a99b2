//! What both demos (one lease, `--leases N`) set up alike: the checked
//! timings and a scratch database.

use std::time::Duration;

use picolease::sqlite::Database;
use picolease::{Config, HolderId, LeaseName, TableName};

use crate::duration::show;
use crate::failure::CliError;

/// Checks a demo's `--ttl` (valid, and short enough to finish in seconds);
/// returns the interval it implies.
pub(super) fn interval_for(ttl: Duration) -> Result<Duration, CliError> {
    let probe = Config::with_ttl(
        LeaseName::new("probe").map_err(CliError::usage)?,
        HolderId::new("probe").map_err(CliError::usage)?,
        ttl,
    );
    probe.validate().map_err(CliError::usage)?;
    if ttl > Duration::from_secs(20) {
        return Err(CliError::usage(format!(
            "--ttl {} is too long for a demo that should finish in seconds: use at most 20s",
            show(ttl)
        )));
    }
    Ok(probe.interval)
}

/// A fresh temporary folder holding the demo's database file (removed
/// when the folder is dropped).
pub(super) fn scratch_database(
) -> Result<(tempfile::TempDir, std::path::PathBuf, Database), CliError> {
    let dir = tempfile::tempdir()
        .map_err(|e| CliError::runtime(format!("cannot create a temporary folder: {e}")))?;
    let path = dir.path().join("demo.db");
    let database = Database::file(&path).table(TableName::default());
    Ok((dir, path, database))
}
