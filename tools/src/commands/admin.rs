//! `init`, `status` and `release --force`: one statement each.

use std::process::ExitCode;

use picolease::sql::LeaseRow;
use picolease::sqlite::{LeaseTable, Location};
use picolease::{LeaseName, TableName};

use crate::backend::{self, Backend};
use crate::duration::show;
use crate::failure::CliError;
use crate::output::line;

/// `picolease init`: creates the table (and, on SQLite, the file) if
/// missing.
pub fn init(backend: &Backend, table: &TableName) -> Result<ExitCode, CliError> {
    let place = match backend {
        Backend::Sqlite(location) => LeaseTable::open(&backend::sqlite(location, table))?
            .path()
            .to_string(),
        #[cfg(feature = "postgres")]
        Backend::Postgres(target) => {
            crate::postgres::init(target, table)?;
            target.to_string()
        }
    };
    line(&format!("table {table} is ready in {place}"));
    Ok(ExitCode::SUCCESS)
}

/// Every lease in the table, and where the table is (for messages).
fn read_rows(backend: &Backend, table: &TableName) -> Result<(Vec<LeaseRow>, String), CliError> {
    match backend {
        Backend::Sqlite(location) => {
            let database = backend::sqlite(location, table);
            let rows = match location {
                Location::File(path) if !path.exists() => Vec::new(),
                _ => LeaseTable::open_existing(&database)?.status()?,
            };
            Ok((rows, location.to_string()))
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres(target) => {
            Ok((crate::postgres::status(target, table)?, target.to_string()))
        }
    }
}

/// `picolease status [--json]`: reads every lease without writing anything
/// (a missing file or table reads as no leases).
pub fn status(backend: &Backend, table: &TableName, json: bool) -> Result<ExitCode, CliError> {
    let (rows, place) = read_rows(backend, table)?;
    if json {
        let array: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                serde_json::json!({
                    "name": row.name,
                    "holder": row.holder,
                    "epoch": row.epoch.get(),
                    "expires_in_ms": row.expires_in_ms,
                })
            })
            .collect();
        line(&serde_json::Value::Array(array).to_string());
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        line(&format!("no leases in table {table} of {place}"));
        return Ok(ExitCode::SUCCESS);
    }
    let name_width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let holder_width = rows
        .iter()
        .map(|r| r.holder.as_deref().map_or(1, str::len))
        .max()
        .unwrap_or(6)
        .max(6);
    line(&format!(
        "{:name_width$}  {:holder_width$}  {:>6}  STATE",
        "NAME", "HOLDER", "EPOCH"
    ));
    for row in rows {
        let state = match (row.holder.is_some(), row.expires_in_ms) {
            (false, _) | (_, None) => "free".to_string(),
            (true, Some(ms)) if ms > 0 => {
                format!(
                    "held, {} left",
                    show(std::time::Duration::from_millis(ms as u64))
                )
            }
            (true, Some(ms)) => format!(
                "expired {} ago",
                show(std::time::Duration::from_millis(ms.unsigned_abs()))
            ),
        };
        line(&format!(
            "{:name_width$}  {:holder_width$}  {:>6}  {state}",
            row.name,
            row.holder.as_deref().unwrap_or("-"),
            row.epoch.get()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// `picolease release --name N --force`: frees the lease and bumps its
/// epoch, so the old holder's renewals and fenced writes are rejected.
pub fn release(
    backend: &Backend,
    table: &TableName,
    name: &str,
    force: bool,
) -> Result<ExitCode, CliError> {
    let lease = LeaseName::new(name).map_err(CliError::usage)?;
    if !force {
        return Err(CliError::usage(format!(
            "release of lease {name:?} needs --force: it takes the lease from whoever holds it"
        )));
    }
    let (released, place) = match backend {
        Backend::Sqlite(location) => {
            let database = backend::sqlite(location, table).auto_create(false);
            let leases = LeaseTable::open(&database)?;
            (force_release_sqlite(&leases, &lease)?, location.to_string())
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres(target) => (
            crate::postgres::force_release(target, table, &lease)?,
            target.to_string(),
        ),
    };
    match released {
        Some(epoch) => {
            line(&format!(
                "released lease {name:?}; its epoch is now {epoch}, so the old holder is fenced out"
            ));
            Ok(ExitCode::SUCCESS)
        }
        None => Err(CliError::runtime(format!(
            "no lease named {name:?} in table {table} of {place}"
        ))),
    }
}

/// The driver's force release in a transaction: its statement rewrites the
/// row before the reply is decoded, so a malformed row (a NULL epoch)
/// would be changed and only then reported; the rollback keeps it as it was.
fn force_release_sqlite(
    leases: &LeaseTable,
    lease: &LeaseName,
) -> Result<Option<picolease::Epoch>, CliError> {
    let sql_error =
        |e: rusqlite::Error| CliError::runtime(format!("SQLite error on {}: {e}", leases.path()));
    leases
        .connection()
        .execute_batch("BEGIN IMMEDIATE")
        .map_err(sql_error)?;
    match leases.force_release(lease) {
        Ok(epoch) => {
            leases
                .connection()
                .execute_batch("COMMIT")
                .map_err(sql_error)?;
            Ok(epoch)
        }
        Err(e) => {
            let _ = leases.connection().execute_batch("ROLLBACK");
            Err(e.into())
        }
    }
}
