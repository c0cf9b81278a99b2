//! The SQLite side of `bench`: two plain connections to the same file.

use std::time::{Duration, Instant};

use picolease::sqlite::{Database, LeaseTable, Location};
use picolease::{Epoch, HolderId, LeaseName, TableName};
use picolease_core::{Operation, Reply};

use super::{bindings, Probe};
use crate::failure::CliError;

/// Two connections (`a`, `b`) to the user's file, with the scratch table.
pub struct SqliteProbe {
    a: LeaseTable,
    b: LeaseTable,
    table: TableName,
    /// The row `bare_update` renews, and its epoch.
    renew_epoch: Epoch,
    /// Who holds the handover row now (`true`: `a`), at which epoch.
    handover: (bool, Epoch),
}

/// Runs one lease statement; anything but the expected kind of reply is a
/// failure of the bench.
fn execute(
    table: &LeaseTable,
    operation: Operation,
    lease: &str,
    holder: &str,
) -> Result<Reply, CliError> {
    let me = HolderId::new(holder).map_err(CliError::usage)?;
    match table.execute(operation, &bindings(lease, holder), &me) {
        (reply, None) => Ok(reply),
        (_, Some(error)) => Err(CliError::runtime(format!("bench: {error}"))),
    }
}

fn acquired(reply: Reply) -> Result<Epoch, CliError> {
    match reply {
        Reply::Acquired { epoch } => Ok(epoch),
        other => Err(CliError::runtime(format!(
            "bench: the scratch row could not be acquired ({other:?})"
        ))),
    }
}

impl SqliteProbe {
    /// Opens two connections and creates the scratch table. A file that
    /// cannot be opened is unreachable (exit 1).
    pub fn open(location: &Location, table: &TableName) -> Result<Self, CliError> {
        if matches!(location, Location::Memory) {
            return Err(CliError::usage(
                "bench needs a database file that several connections share: use sqlite://PATH",
            ));
        }
        let database = Database::new(location.clone()).table(table.clone());
        let open = || {
            LeaseTable::open(&database).map_err(|e| {
                CliError::runtime(format!("bench: cannot open the database {location}: {e}"))
            })
        };
        let a = open()?;
        let b = open()?;
        let renew_epoch = acquired(execute(&a, Operation::Acquire, "probe-renew", "probe")?)?;
        let epoch = acquired(execute(&a, Operation::Acquire, "probe-handover", "pa")?)?;
        Ok(SqliteProbe {
            a,
            b,
            table: table.clone(),
            renew_epoch,
            handover: (true, epoch),
        })
    }
}

impl Probe for SqliteProbe {
    fn round_trip(&mut self) -> Result<Duration, CliError> {
        let at = Instant::now();
        self.a
            .connection()
            .query_row("SELECT 1", [], |row| row.get::<_, i64>(0))
            .map_err(|e| CliError::runtime(format!("bench: SELECT 1: {e}")))?;
        Ok(at.elapsed())
    }

    fn bare_update(&mut self) -> Result<Duration, CliError> {
        let at = Instant::now();
        let renew = Operation::Renew {
            epoch: self.renew_epoch,
        };
        match execute(&self.a, renew, "probe-renew", "probe")? {
            Reply::Accepted => Ok(at.elapsed()),
            other => Err(CliError::runtime(format!(
                "bench: the scratch renew was refused ({other:?})"
            ))),
        }
    }

    fn handover_floor(&mut self) -> Result<Duration, CliError> {
        let (a_holds, epoch) = self.handover;
        let ((from, from_id), (to, to_id)) = if a_holds {
            ((&self.a, "pa"), (&self.b, "pb"))
        } else {
            ((&self.b, "pb"), (&self.a, "pa"))
        };
        let at = Instant::now();
        execute(
            from,
            Operation::Release { epoch },
            "probe-handover",
            from_id,
        )?;
        let epoch = acquired(execute(to, Operation::Acquire, "probe-handover", to_id)?)?;
        let took = at.elapsed();
        self.handover = (!a_holds, epoch);
        Ok(took)
    }

    fn expires_in(&mut self, lease: &LeaseName) -> Result<(Option<i64>, Instant), CliError> {
        let before = Instant::now();
        let row = self
            .b
            .lease_row(lease)
            .map_err(|e| CliError::runtime(format!("bench: {e}")))?;
        let read_at = before + before.elapsed() / 2;
        Ok((row.and_then(|r| r.expires_in_ms), read_at))
    }

    fn drop_table(&mut self) -> Result<(), CliError> {
        self.a
            .connection()
            .execute_batch(&format!("DROP TABLE IF EXISTS {}", self.table))
            .map_err(|e| CliError::runtime(format!("bench: dropping {}: {e}", self.table)))
    }

    /// An embedded file: nothing to connect to.
    fn connect(&mut self, _plain: bool) -> Result<Option<Duration>, CliError> {
        Ok(None)
    }
}
