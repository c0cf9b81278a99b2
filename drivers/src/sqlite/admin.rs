//! The administrative reads and writes of a SQLite lease table (`status`,
//! `release --force`, `handover`, one row): each one statement on the
//! table's own connection, beside the contender's statements in
//! `table.rs`.

use picolease_core::sql::{Bindings, LeaseRow, Statement};
use picolease_core::{Epoch, LeaseName};

use super::error::SqliteError;
use super::table::{run, LeaseTable};

impl LeaseTable {
    /// Every lease, by name. A missing table reads as no leases.
    pub fn status(&self) -> Result<Vec<LeaseRow>, SqliteError> {
        if !self.exists()? {
            return Ok(Vec::new());
        }
        let rows = run(
            &self.conn,
            self.statements.status().sql(),
            std::iter::empty(),
        )
        .map_err(|e| self.error(e))?;
        self.statements
            .decode_status(&rows)
            .map_err(|source| self.row_error(source))
    }

    /// Administrative release: frees `lease` whoever holds it and bumps the
    /// epoch. `None` when there is no such lease. A malformed row is left
    /// untouched by the statement itself and reported as [`SqliteError::Row`].
    pub fn force_release(&self, lease: &LeaseName) -> Result<Option<Epoch>, SqliteError> {
        let bindings = Bindings {
            lease: lease.as_str(),
            holder: "",
            ttl_millis: 0,
            ..Bindings::default()
        };
        let statement = self.statements.force_release();
        let rows = run(&self.conn, statement.sql(), statement.bind(&bindings, None))
            .map_err(|e| self.error(e))?;
        let released = self
            .statements
            .decode_force_release(&rows)
            .map_err(|source| self.row_error(source.for_lease(lease.as_str())))?;
        if released.is_none() {
            // No such lease, or a malformed row the statement refused to
            // touch: reading it tells which.
            self.lease_row(lease)?;
        }
        Ok(released)
    }

    /// The operators' remedy after restoring or copying the database file
    /// (DESIGN §3 "Failover"; docs/operations.md §5.4): SQLite cannot tell
    /// a restored file from the one it had, so this is what keeps a term
    /// the lost writes granted from being granted again. Every lease and
    /// membership row becomes nobody's for `ttl` at least (the longest ttl
    /// any contender runs with), at an epoch past anything issued. Returns
    /// each row's name and new epoch.
    pub fn release_after_failover(
        &self,
        ttl: std::time::Duration,
    ) -> Result<Vec<(String, Epoch)>, SqliteError> {
        let bindings = Bindings {
            ttl_millis: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
            ..Bindings::default()
        };
        let statement = self.statements.after_failover();
        let rows = run(&self.conn, statement.sql(), statement.bind(&bindings, None))
            .map_err(|e| self.error(e))?;
        self.statements
            .decode_batch_names(&rows)
            .map_err(|source| self.row_error(source))
    }

    /// Asks the holder of term `epoch` of `lease` to hand it over to node
    /// `to` (`""`: to whoever comes next; DESIGN §3 "Planned handover"):
    /// writes the request row, which the holder reads with its next
    /// renewal.
    pub fn request_hand_over(
        &self,
        lease: &LeaseName,
        epoch: Epoch,
        to: &str,
    ) -> Result<(), SqliteError> {
        self.on_request(self.statements.request_hand_over(), lease, epoch, to)
    }

    /// Withdraws the request to hand term `epoch` of `lease` over, if the
    /// request row still names that term (as
    /// `picolease::postgres::withdraw_hand_over` does).
    pub fn withdraw_hand_over(&self, lease: &LeaseName, epoch: Epoch) -> Result<(), SqliteError> {
        self.on_request(self.statements.withdraw_hand_over(), lease, epoch, "")
    }

    /// Runs `statement` on the request row of `lease` for term `epoch`,
    /// naming node `to`.
    fn on_request(
        &self,
        statement: &Statement,
        lease: &LeaseName,
        epoch: Epoch,
        to: &str,
    ) -> Result<(), SqliteError> {
        let request = picolease_core::sql::hand_over_request_name(lease.as_str());
        let bindings = Bindings {
            lease: &request,
            successor: to,
            ..Bindings::default()
        };
        run(
            &self.conn,
            statement.sql(),
            statement.bind(&bindings, Some(epoch)),
        )
        .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// One lease's row, if it exists.
    pub fn lease_row(&self, lease: &LeaseName) -> Result<Option<LeaseRow>, SqliteError> {
        let bindings = Bindings {
            lease: lease.as_str(),
            holder: "",
            ttl_millis: 0,
            ..Bindings::default()
        };
        let statement = self.statements.lease_row();
        let rows = run(&self.conn, statement.sql(), statement.bind(&bindings, None))
            .map_err(|e| self.error(e))?;
        let mut rows = self
            .statements
            .decode_status(&rows)
            .map_err(|source| self.row_error(source.for_lease(lease.as_str())))?;
        Ok(rows.pop())
    }
}
