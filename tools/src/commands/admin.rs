//! `init`, `status` and `release --force`: one statement each.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use picolease::sql::{read_member_row, LeaseRow, HANDOVER_PREFIX, MEMBER_PREFIX, PREFERRED_PREFIX};
use picolease::sqlite::Location;
use picolease::{Candidate, Rank};
use picolease::{LeaseName, TableName};
use signal_hook::consts::{SIGINT, SIGTERM};

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
    let all = backend.status(table)?;
    let candidates = candidates(&all);
    let rows = leases_only(all);
    if json {
        let array: Vec<serde_json::Value> = rows.iter().map(row_json).collect();
        line(&serde_json::Value::Array(array).to_string());
    } else {
        print_table(backend, table, &rows);
        // Below the table, each lease's live preferred candidate (DESIGN
        // §3 "Preferred holders"; `status --members` lists them too).
        for (lease, c, left) in &candidates {
            line(&format!(
                "preferred candidate of {lease}: {} (priority {}, version {}), {} left",
                c.holder,
                c.rank.priority(),
                c.rank.tag().unwrap_or("-"),
                show(Duration::from_millis(left.unsigned_abs()))
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The lease rows, without the lease sets' membership rows, the
/// operators' handover requests and the preferred candidates.
fn leases_only(rows: Vec<LeaseRow>) -> Vec<LeaseRow> {
    rows.into_iter()
        .filter(|row| {
            ![MEMBER_PREFIX, HANDOVER_PREFIX, PREFERRED_PREFIX]
                .iter()
                .any(|prefix| row.name.starts_with(prefix))
        })
        .collect()
}

/// The live preferred candidate of each lease that has one (DESIGN §3
/// "Preferred holders"): lease, candidate, time left.
pub(crate) fn candidates(rows: &[LeaseRow]) -> Vec<(String, Candidate, i64)> {
    rows.iter()
        .filter_map(|row| {
            let lease = row.name.strip_prefix(PREFERRED_PREFIX)?;
            let left = row.expires_in_ms.filter(|&left| left > 0)?;
            let candidate = Candidate::parse(row.holder.as_deref()?)?;
            Some((lease.to_string(), candidate, left))
        })
        .collect()
}

/// `picolease status --members [--json]`: the live members of lease sets
/// (membership rows held and unexpired), by holder id, with the rank a
/// ranked member's row carries (DESIGN §9 "Preferred members") and
/// whether it is healthy (§9 "Members' health").
pub fn members(backend: &Backend, table: &TableName, json: bool) -> Result<ExitCode, CliError> {
    let rows = backend.status(table)?;
    let candidates = candidates(&rows);
    let mut members: Vec<(String, Rank, i64, bool)> = rows
        .into_iter()
        .filter_map(|row| {
            let read = read_member_row(&row.name, row.holder.as_deref())?;
            let left = row.expires_in_ms.filter(|&left| left > 0)?;
            Some((
                read.holder.as_str().to_string(),
                read.rank,
                left,
                read.healthy,
            ))
        })
        .collect();
    // A member switching between its membership row and its unhealthy
    // row (DESIGN §9 "Members' health") holds both for a moment: listed
    // once, unhealthy.
    members.sort_by(|a, b| a.0.cmp(&b.0).then(a.3.cmp(&b.3)));
    members.dedup_by(|a, b| a.0 == b.0);
    if json {
        // A ranked member also carries "priority" and "version_tag".
        let members = members.iter().map(|(holder, rank, left, healthy)| {
            let mut member = serde_json::json!({
                "holder": holder,
                "expires_in_ms": left,
                "healthy": healthy,
            });
            if !rank.is_lowest() {
                member["priority"] = rank.priority().into();
                member["version_tag"] = rank.tag().into();
            }
            member
        });
        let candidates = candidates.iter().map(|(lease, c, left)| {
            serde_json::json!({
                "holder": c.holder.as_str(),
                "expires_in_ms": left,
                "lease": lease,
                "priority": c.rank.priority(),
                "version_tag": c.rank.tag(),
            })
        });
        let array: Vec<serde_json::Value> = members.chain(candidates).collect();
        line(&serde_json::Value::Array(array).to_string());
        return Ok(ExitCode::SUCCESS);
    }
    if members.is_empty() && candidates.is_empty() {
        line(&format!(
            "no live members or candidates in table {table} of {}",
            backend.place()
        ));
    }
    if !members.is_empty() {
        let width = members
            .iter()
            .map(|(h, _, _, _)| h.len())
            .max()
            .unwrap_or(6)
            .max(6);
        line(&format!("{:width$}  LEFT", "MEMBER"));
        for (holder, rank, left, healthy) in &members {
            let rank = match rank.is_lowest() {
                true => String::new(),
                false => format!("  ({rank})"),
            };
            let health = if *healthy { "" } else { "  unhealthy" };
            line(&format!("{holder:width$}  {left}ms{rank}{health}"));
        }
    }
    if !candidates.is_empty() {
        let width = candidates
            .iter()
            .map(|(_, c, _)| c.holder.as_str().len())
            .max()
            .unwrap_or(9)
            .max(9);
        line(&format!(
            "{:width$}  PRIORITY  VERSION  LEFT  LEASE",
            "CANDIDATE"
        ));
        for (lease, c, left) in &candidates {
            line(&format!(
                "{:width$}  {:>8}  {:7}  {left}ms  {lease}",
                c.holder.as_str(),
                c.rank.priority(),
                c.rank.tag().unwrap_or("-"),
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One row as `status --json` shows it.
fn row_json(row: &LeaseRow) -> serde_json::Value {
    serde_json::json!({
        "name": row.name,
        "holder": row.holder,
        "epoch": row.epoch.get(),
        "expires_in_ms": row.expires_in_ms,
    })
}

/// The status table.
fn print_table(backend: &Backend, table: &TableName, rows: &[LeaseRow]) {
    if rows.is_empty() {
        line(&format!(
            "no leases in table {table} of {}",
            backend.place()
        ));
        return;
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
            // No holder, time left: adopted after a server change
            // (DESIGN §3 "Failover"), nobody's until then.
            (false, Some(ms)) if ms > 0 => format!(
                "grace after failover, {} left",
                show(std::time::Duration::from_millis(ms as u64))
            ),
            (false, _) | (_, None) => "free".to_string(),
            // Reserved for a node by a planned handover (DESIGN §3).
            (true, Some(ms)) if ms > 0 && row.reserved_for().is_some() => format!(
                "reserved for {}, {} left",
                row.reserved_for().unwrap_or_default(),
                show(std::time::Duration::from_millis(ms as u64))
            ),
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
}

/// What `status --watch` compares: holder, epoch, and held (a holder whose
/// row has not expired) or free.
type RowKey = (Option<String>, u64, bool);

fn row_key(row: &LeaseRow) -> RowKey {
    let held = row.holder.is_some() && row.expires_in_ms.is_some_and(|ms| ms > 0);
    (row.holder.clone(), row.epoch.get(), held)
}

/// How often `status --watch` checks for a change.
const WATCH_TICK: Duration = Duration::from_millis(20);

/// `picolease status --watch [--json]`: the table (or each row, as one
/// JSON object per line) at start and again whenever a row changes, until
/// SIGINT or SIGTERM (exit 0).
///
/// Change detection: on SQLite, `PRAGMA data_version` on a connection of
/// its own every 20 ms (rows are read only when another connection has
/// committed), plus a read every second to see a held row expire with no
/// write; on PostgreSQL, a read every 200 ms.
pub fn watch(backend: &Backend, table: &TableName, json: bool) -> Result<ExitCode, CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| CliError::runtime(format!("cannot install signal handlers: {e}")))?;
    }
    let mut probe = Probe::new(backend);
    let mut shown: Option<BTreeMap<String, RowKey>> = None;
    let mut last_read: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        let changed = probe.changed();
        if changed || last_read.is_none_or(|at| at.elapsed() >= probe.reread) {
            last_read = Some(Instant::now());
            let rows = match backend.status(table).map(leases_only) {
                Ok(rows) => rows,
                Err(e @ CliError::Usage(_)) => return Err(e),
                Err(e) => {
                    eprintln!("warning: {e}; retrying");
                    std::thread::sleep(probe.reread);
                    continue;
                }
            };
            let keys: BTreeMap<String, RowKey> =
                rows.iter().map(|r| (r.name.clone(), row_key(r))).collect();
            if json {
                for row in &rows {
                    let before = shown.as_ref().and_then(|s| s.get(&row.name));
                    if before != Some(&row_key(row)) {
                        line(&row_json(row).to_string());
                    }
                }
            } else if shown.as_ref() != Some(&keys) {
                if shown.is_some() {
                    line("");
                }
                print_table(backend, table, &rows);
            }
            shown = Some(keys);
        }
        std::thread::sleep(probe.tick);
    }
    Ok(ExitCode::SUCCESS)
}

/// A cheap "did anything change?" for `watch`.
struct Probe {
    /// SQLite: the file, and a connection of our own once it opens.
    file: Option<(std::path::PathBuf, Option<rusqlite::Connection>, i64)>,
    tick: Duration,
    reread: Duration,
}

impl Probe {
    fn new(backend: &Backend) -> Self {
        match backend {
            Backend::Sqlite(Location::File(path)) => Probe {
                file: Some((path.clone(), None, -1)),
                tick: WATCH_TICK,
                reread: Duration::from_secs(1),
            },
            _ => Probe {
                file: None,
                tick: Duration::from_millis(200),
                reread: Duration::from_millis(200),
            },
        }
    }

    /// True when another connection committed since the last call (SQLite's
    /// `data_version`); false when unknown (the periodic read covers it).
    fn changed(&mut self) -> bool {
        let Some((path, connection, seen)) = &mut self.file else {
            return false;
        };
        if connection.is_none() {
            *connection = rusqlite::Connection::open_with_flags(
                &*path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .ok();
        }
        let Some(open) = connection else {
            return false;
        };
        match open.query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0)) {
            Ok(version) => {
                let changed = version != *seen;
                *seen = version;
                changed
            }
            Err(_) => {
                *connection = None;
                false
            }
        }
    }
}

/// `picolease release --name N --force`: frees the lease and bumps its
/// epoch, so the old holder's renewals and fenced writes are rejected.
pub fn release(
    backend: &Backend,
    table: &TableName,
    name: &str,
    force: bool,
    ttl: Duration,
) -> Result<ExitCode, CliError> {
    let lease = LeaseName::new(name).map_err(CliError::usage)?;
    if !force {
        return Err(CliError::usage(format!(
            "release of lease {name:?} needs --force: it takes the lease from whoever holds it"
        )));
    }
    let released = backend.force_release(table, &lease, ttl)?;
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
