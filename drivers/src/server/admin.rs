//! The administrative statements of a server database, written once for
//! PostgreSQL and MySQL: read the leases or one lease, force a lease
//! free, write or withdraw a planned handover's request. Each database
//! brings only how one protocol statement runs on its session
//! ([`AdminSession`]); what is read back and how a row that does not decode
//! is reported is the same for both.

use picolease_core::sql::{
    hand_over_request_name, Bindings, Cell, LeaseRow, Statement, Statements,
};
use picolease_core::{Epoch, LeaseName};

use super::DriverError;

/// One administrative session: a PostgreSQL client, or a MySQL connection.
pub(crate) trait AdminSession {
    type Error: DriverError;

    /// Runs `statement` bound to `bindings` (and `epoch`) as the driver
    /// runs it (unnamed on PostgreSQL; with its read-back in one
    /// transaction on MySQL) and returns its rows; a failure is sorted
    /// with `during` naming the command.
    async fn rows(
        &mut self,
        during: &'static str,
        statement: &Statement,
        bindings: &Bindings<'_>,
        epoch: Option<Epoch>,
    ) -> Result<Vec<Vec<Cell>>, Self::Error>;
}

/// Every lease row, by name, with time left on the database's clock.
pub(crate) async fn status<S: AdminSession>(
    session: &mut S,
    statements: &Statements,
) -> Result<Vec<LeaseRow>, S::Error> {
    let rows = session
        .rows("status", statements.status(), &Bindings::default(), None)
        .await?;
    statements
        .decode_status(&rows)
        .map_err(|source| S::Error::row(statements.table().to_string(), source))
}

/// One lease's row, if it exists.
pub(crate) async fn lease_row<S: AdminSession>(
    session: &mut S,
    statements: &Statements,
    lease: &LeaseName,
    during: &'static str,
) -> Result<Option<LeaseRow>, S::Error> {
    let rows = session
        .rows(during, statements.lease_row(), &lease_only(lease), None)
        .await?;
    let mut rows = statements.decode_status(&rows).map_err(|source| {
        S::Error::row(
            statements.table().to_string(),
            source.for_lease(lease.as_str()),
        )
    })?;
    Ok(rows.pop())
}

/// Frees `lease` whoever holds it, bumping its epoch: the new epoch, or
/// `None` when there is no such lease. A malformed row, which the
/// statement leaves untouched, is the row's error: reading the row after
/// a `None` tells which.
pub(crate) async fn force_release<S: AdminSession>(
    session: &mut S,
    statements: &Statements,
    lease: &LeaseName,
) -> Result<Option<Epoch>, S::Error> {
    let during = "force release";
    let rows = session
        .rows(during, statements.force_release(), &lease_only(lease), None)
        .await?;
    let released = statements.decode_force_release(&rows).map_err(|source| {
        S::Error::row(
            statements.table().to_string(),
            source.for_lease(lease.as_str()),
        )
    })?;
    if released.is_none() {
        lease_row(session, statements, lease, during).await?;
    }
    Ok(released)
}

/// Runs `statement` (a request's or its withdrawal's; `what`, for errors)
/// on the request row of `lease` for term `epoch`, naming node `to`.
pub(crate) async fn on_request<S: AdminSession>(
    session: &mut S,
    statement: &Statement,
    what: &'static str,
    lease: &LeaseName,
    epoch: Epoch,
    to: &str,
) -> Result<(), S::Error> {
    let request = hand_over_request_name(lease.as_str());
    let bindings = Bindings {
        lease: &request,
        successor: to,
        ..Bindings::default()
    };
    session
        .rows(what, statement, &bindings, Some(epoch))
        .await
        .map(drop)
}

/// The bindings of a statement that binds only the lease's name.
fn lease_only(lease: &LeaseName) -> Bindings<'_> {
    Bindings {
        lease: lease.as_str(),
        ..Bindings::default()
    }
}
