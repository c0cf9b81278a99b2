//! `init`, `status` and `release --force`: one statement each.

use std::process::ExitCode;

use picolease::{LeaseName, TableName};

use crate::backend::Backend;
use crate::duration::show;
use crate::failure::CliError;
use crate::output::line;

/// `picolease init`: creates the table (and, on SQLite, the file) if
/// missing.
pub fn init(backend: &Backend, table: &TableName) -> Result<ExitCode, CliError> {
    backend.init(table)?;
    line(&format!("table {table} is ready in {}", backend.place()));
    Ok(ExitCode::SUCCESS)
}

/// `picolease status [--json]`: reads every lease without writing anything
/// (a missing file or table reads as no leases).
pub fn status(backend: &Backend, table: &TableName, json: bool) -> Result<ExitCode, CliError> {
    let rows = backend.status(table)?;
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
        line(&format!(
            "no leases in table {table} of {}",
            backend.place()
        ));
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
    let released = backend.force_release(table, &lease)?;
    match released {
        Some(epoch) => {
            line(&format!(
                "released lease {name:?}; its epoch is now {epoch}, so the old holder is fenced out"
            ));
            Ok(ExitCode::SUCCESS)
        }
        None => Err(CliError::runtime(format!(
            "no lease named {name:?} in table {table} of {}",
            backend.place()
        ))),
    }
}
