//! The SQLite backend: `--db sqlite://PATH` (the blocking driver).

use std::sync::Arc;

use picolease::sql::LeaseRow;
use picolease::sqlite::{
    self, Database, LeaderContext, LeaseTable, Location, SqliteLease, SqliteLeaseSet,
};
use picolease::{Epoch, LeaseName, TableName, Term};

use super::{Contender, Leases, ScopeView, Started};
use crate::failure::CliError;
use crate::term::child::{Gated, TermView};

/// The SQLite database at `location` with `table`.
pub fn database(location: &Location, table: &TableName) -> Database {
    Database::new(location.clone()).table(table.clone())
}

/// Creates the file and the table if missing.
pub fn init(location: &Location, table: &TableName) -> Result<(), CliError> {
    LeaseTable::open(&database(location, table))?;
    Ok(())
}

/// Every lease; a missing file or table reads as none, and nothing is
/// created. A file whose directory does not exist is an error (a mistyped
/// path, not an empty database).
pub fn status(location: &Location, table: &TableName) -> Result<Vec<LeaseRow>, CliError> {
    match location {
        Location::File(path) if !path.exists() => {
            let dir = path
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            if dir.is_dir() {
                Ok(Vec::new())
            } else {
                Err(CliError::usage(format!(
                    "database {}: directory {} does not exist",
                    path.display(),
                    dir.display()
                )))
            }
        }
        _ => Ok(LeaseTable::open_existing(&database(location, table))?.status()?),
    }
}

/// The existing table, opened (for a watch of one row).
pub fn open_table(location: &Location, table: &TableName) -> Result<LeaseTable, CliError> {
    Ok(LeaseTable::open_existing(&database(location, table))?)
}

/// Frees `lease` and bumps its epoch; the statement leaves a malformed row
/// as it is (and the driver reports it).
pub fn force_release(
    location: &Location,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<Epoch>, CliError> {
    let leases = LeaseTable::open(&database(location, table).auto_create(false))?;
    Ok(leases.force_release(lease)?)
}

/// Puts every lease and membership row into a grace period of `ttl`.
pub fn release_after_failover(
    location: &Location,
    table: &TableName,
    ttl: std::time::Duration,
) -> Result<Vec<(String, Epoch)>, CliError> {
    let leases = LeaseTable::open(&database(location, table).auto_create(false))?;
    Ok(leases.release_after_failover(ttl)?)
}

/// Asks the holder of term `epoch` of `lease` to hand it over to `to`.
pub fn request_hand_over(
    location: &Location,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
    to: &str,
) -> Result<(), CliError> {
    let leases = LeaseTable::open(&database(location, table).auto_create(false))?;
    Ok(leases.request_hand_over(lease, epoch, to)?)
}

/// Withdraws the request naming term `epoch` of `lease`.
pub fn withdraw_hand_over(
    location: &Location,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
) -> Result<(), CliError> {
    let leases = LeaseTable::open(&database(location, table).auto_create(false))?;
    Ok(leases.withdraw_hand_over(lease, epoch)?)
}

/// Starts the blocking driver for `leases`: one name on a lone lease's
/// handle, several on a set's, each with CMD as each term's work (the lone
/// lease's `LeaderContext`, so the same supervision).
pub fn start(
    location: &Location,
    table: &TableName,
    leases: Leases,
    gated: Option<Arc<Gated>>,
) -> Result<Started, CliError> {
    let database = database(location, table);
    match leases {
        Leases::One(config) => {
            let mut builder = SqliteLease::builder(config, database);
            let transitions = builder.subscribe();
            if gated.as_ref().is_some_and(|g| g.awaits_health()) {
                builder = builder.awaits_health_reports();
            }
            if let Some(gated) = gated {
                builder = builder.while_leader(move |ctx: LeaderContext| gated.run_term(&ctx));
            }
            started(builder.start()?, transitions)
        }
        Leases::Many { template, names } => {
            let mut builder = SqliteLeaseSet::builder(template, names, database);
            let transitions = builder.subscribe();
            // Without CMD no work runs (on this driver a term's work is a
            // thread, and a set may hold thousands of leases); a term's
            // end waits, on a thread started then, for its `follower`
            // line, so the release comes after the line.
            match gated {
                Some(gated) if gated.runs_command() => {
                    builder = builder.while_leader(move |ctx: LeaderContext| gated.run_term(&ctx));
                }
                Some(gated) => {
                    builder = builder.when_term_ends(move |term| gated.wait_printed(&term))
                }
                None => {}
            }
            started(builder.start()?, transitions)
        }
    }
}

/// A started handle of either scope, with its builder's `transitions`.
fn started<S: ScopeView>(
    handle: sqlite::Contender<S>,
    transitions: picolease::Subscription,
) -> Result<Started, CliError> {
    Ok(Started {
        view: handle.view(),
        contender: Box::new(handle),
        transitions,
    })
}

impl TermView for LeaderContext {
    fn term(&self) -> &Term {
        self
    }

    fn deadline(&self) -> Option<std::time::Duration> {
        LeaderContext::deadline(self)
    }

    fn ended(&self, timeout: std::time::Duration) -> bool {
        self.sleep(timeout)
    }
}

/// The driver's one handle, over a lone lease or a set: `give_up` comes
/// only for a set (a lone lease's CMD ending by itself ends `run`), and a
/// lone lease's driver would ignore it.
impl<S: ScopeView> Contender for sqlite::Contender<S> {
    fn give_up(&self, lease: &LeaseName) {
        sqlite::Contender::give_up(self, lease);
    }

    fn report_health(&self, healthy: bool) {
        sqlite::Contender::report_health(self, healthy);
    }

    fn escalate(&self, lease: &LeaseName, epoch: picolease::Epoch, cool_down: std::time::Duration) {
        sqlite::Contender::escalate(self, lease, epoch, cool_down);
    }

    fn shutdown(self: Box<Self>) -> Result<(), CliError> {
        sqlite::Contender::shutdown(*self).map_err(CliError::from)
    }

    fn hand_over_then_shutdown(self: Box<Self>) -> Result<(), CliError> {
        self.hand_over_to_preferred();
        sqlite::Contender::shutdown(*self).map_err(CliError::from)
    }

    fn abort(self: Box<Self>) {
        sqlite::Contender::abort(*self)
    }
}
