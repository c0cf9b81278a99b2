//! `picolease handover --name N [--to NODE]`: an operator asks the holder
//! to hand its term over (DESIGN §3 "Planned handover"), then watches the
//! row to say what happened.
//!
//! The request is a row of its own (`picolease.handover:N`) naming the
//! term by its epoch; the holder reads it with its next renewal, stops its
//! work and reserves the lease for the node. The request is withdrawn
//! (deleted if it still names that term) once the holder has acted or
//! has not in time, so no request is left behind to fire later. Nothing here decides who
//! leads: the holder and the successor's acquire do, in the database.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use picolease::sql::{term_to_hand_over, LeaseRow};
use picolease::{HolderId, LeaseName, TableName};

use crate::backend::{Backend, RowWatch};
use crate::duration::show;
use crate::failure::CliError;
use crate::output::line;

/// How often the row is read while waiting (one key lookup on one
/// connection).
const POLL: Duration = Duration::from_millis(20);

/// Slack beyond the row's own time left (and the reservation's): the
/// holder's renewal, and the successor's acquire, take a round trip.
const SLACK: Duration = Duration::from_secs(1);

pub fn run(
    backend: &Backend,
    table: &TableName,
    name: &str,
    to: Option<&str>,
) -> Result<ExitCode, CliError> {
    let lease = LeaseName::new(name).map_err(CliError::usage)?;
    if let Some(node) = to {
        HolderId::reserved_for(node).map_err(CliError::usage)?;
    }
    let place = backend.place();
    // Read as `status` reads (a missing file or table is no lease), then
    // watched on one connection.
    let rows = backend.status(table)?;
    let preferred = super::admin::candidates(&rows)
        .into_iter()
        .find(|(lease, _, _)| lease == name)
        .map(|(_, candidate, _)| candidate);
    let row = rows.into_iter().find(|row| row.name == name);
    let Some(row) = row else {
        return Err(CliError::runtime(format!(
            "no lease named {name:?} in table {table} of {place}"
        )));
    };
    let mut watch = backend.watch_row(table)?;
    let (Some(epoch), Some(holder)) = (term_to_hand_over(&row), row.holder.clone()) else {
        return Err(CliError::runtime(format!(
            "lease {name:?} is not held (free, lapsed or reserved): nothing to hand over"
        )));
    };
    // No --to: the best live candidate, unless it runs on the holder's
    // own node (DESIGN §3 "Preferred holders"); else a plain release.
    let holder_node = HolderId::new(&holder).map(|id| id.node().to_string());
    let holder_node = holder_node.as_deref().unwrap_or("");
    let chosen = match (to, &preferred) {
        (None, Some(candidate)) => candidate.successor_from(holder_node).map(|reserved| {
            line(&format!(
                "no --to: handing lease {name:?} to its preferred candidate {} (priority {}, version {})",
                candidate.holder,
                candidate.rank.priority(),
                candidate.rank.tag().unwrap_or("-")
            ));
            reserved.reserved_node().unwrap_or_default().to_string()
        }),
        _ => None,
    };
    let to = to.or(chosen.as_deref());
    if let (Some(node), Ok(id)) = (to, HolderId::new(&holder)) {
        if id.node() == node {
            return Err(CliError::usage(format!(
                "--to {node:?} is the node that holds lease {name:?} ({holder}): hand it to another node"
            )));
        }
    }
    backend.request_hand_over(table, &lease, epoch, to.unwrap_or(""))?;
    let started = Instant::now();
    // The holder acts at its next renewal, before its row expires.
    let left = Duration::from_millis(row.expires_in_ms.unwrap_or(0).max(0) as u64);
    let acted = |row: &LeaseRow| row.epoch != epoch || row.holder.as_deref() != Some(&holder);
    let waited = wait(&mut watch, &lease, left + SLACK, acted);
    // Whatever happened (the watch failing too), the request is withdrawn:
    // once the term has ended it matches nothing, and a request the holder
    // did not act on must not fire later, at a renewal nobody watches for.
    let withdrawn = backend.withdraw_hand_over(table, &lease, epoch);
    let ended = waited?;
    withdrawn?;
    let ended = match ended {
        Some(row) => Some(row),
        // It may have acted between the last read and the withdrawal.
        None => watch.read(&lease)?.filter(|row| acted(row)),
    };
    let Some(after) = ended else {
        return Err(CliError::runtime(format!(
            "{holder} still holds lease {name:?} at epoch {epoch} after {}: it did not act on the request (an older picolease ignores it); the request is withdrawn",
            show(started.elapsed())
        )));
    };
    match after.reserved_for() {
        Some(node) if after.epoch == epoch => {
            line(&format!(
                "{holder} handed lease {name:?} over at epoch {epoch} after {}; reserved for {node}",
                show(started.elapsed())
            ));
            // The reservation lasts two intervals: the successor takes it
            // within that, or anyone may.
            let reserved = Duration::from_millis(after.expires_in_ms.unwrap_or(0).max(0) as u64);
            let taken = wait(&mut watch, &lease, reserved + SLACK, |row| {
                row.epoch != epoch
            })?;
            report_successor(name, taken.as_ref(), started);
        }
        // Released (no --to): whoever was told takes it within a poll.
        _ if after.holder.is_none() => {
            line(&format!(
                "{holder} released lease {name:?} at epoch {epoch} after {}",
                show(started.elapsed())
            ));
            let taken = wait(&mut watch, &lease, SLACK * 2, |row| row.epoch != epoch)?;
            report_successor(name, taken.as_ref().or(Some(&after)), started);
        }
        _ => report_successor(name, Some(&after), started),
    }
    Ok(ExitCode::SUCCESS)
}

/// Who leads now, as the row says.
fn report_successor(name: &str, row: Option<&LeaseRow>, started: Instant) {
    let after = show(started.elapsed());
    match row {
        Some(LeaseRow {
            holder: Some(holder),
            epoch,
            ..
        }) => line(&format!(
            "lease {name:?} is held by {holder} at epoch {epoch}, {after} after the request"
        )),
        Some(row) => line(&format!(
            "lease {name:?} is free at epoch {}, {after} after the request",
            row.epoch
        )),
        None => line(&format!(
            "nobody took lease {name:?} within its reservation; anyone may now"
        )),
    }
}

/// Reads the row of `lease` until `done` holds or `limit` passes.
fn wait(
    watch: &mut RowWatch,
    lease: &LeaseName,
    limit: Duration,
    done: impl Fn(&LeaseRow) -> bool,
) -> Result<Option<LeaseRow>, CliError> {
    let until = Instant::now() + limit;
    loop {
        if let Some(row) = watch.read(lease)? {
            if done(&row) {
                return Ok(Some(row));
            }
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}
