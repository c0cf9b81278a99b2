//! The administrative statements of a server database, written once for
//! PostgreSQL and MySQL: read the leases or one lease, force a lease
//! free, put every row into its grace period after a failover, write or withdraw a planned handover's request. Each database
//! brings only what it runs them on ([`Admin`]: a PostgreSQL `&Client`, a
//! MySQL `&MysqlConnector` or `&mut Conn`) and how one protocol statement
//! runs there ([`AdminSession`]); what is read back and how a row that
//! does not decode is reported is the same for both. `postgres` and
//! `mysql` re-export these functions under their own names.

use picolease_core::sql::{
    hand_over_request_name, Bindings, Cell, Dialect, LeaseRow, Statement, Statements,
};
use std::time::Duration;

use picolease_core::{Epoch, LeaseName, TableName};

use super::DriverError;

/// One protocol statement as an administrative session runs it: the
/// statement, its values and the term it binds, if any.
pub(crate) struct Call<'a> {
    pub(crate) statement: &'a Statement,
    pub(crate) bindings: &'a Bindings<'a>,
    pub(crate) epoch: Option<Epoch>,
}

/// The rows of one statement, as cells.
pub(crate) type Rows = Vec<Vec<Cell>>;

/// One administrative session: a PostgreSQL client, or a MySQL connection.
pub(crate) trait AdminSession {
    type Error: DriverError;

    /// Runs `call` as the driver runs it (unnamed on PostgreSQL; with its
    /// read-back in one transaction on MySQL) and returns its rows; a
    /// failure is sorted with `during` naming the command.
    async fn rows(&mut self, during: &'static str, call: Call<'_>) -> Result<Rows, Self::Error>;

    /// Ends the session: a connection opened for it is closed (MySQL's,
    /// from a connector); one lent to it is left as it is.
    async fn close(self)
    where
        Self: Sized,
    {
    }
}

/// What administrative statements run on: a PostgreSQL `&Client`, a MySQL
/// `&MysqlConnector` (which connects for the one call and disconnects) or
/// `&mut Conn`. Sealed: implemented by the drivers only.
#[allow(private_bounds, private_interfaces, async_fn_in_trait)]
pub trait Admin: Sized {
    /// The database's error type.
    type Error: DriverError;
    /// The session the statements run on.
    #[doc(hidden)]
    type Session: AdminSession<Error = Self::Error>;
    /// The database's SQL dialect.
    #[doc(hidden)]
    const DIALECT: Dialect;

    /// The session, for statements on `table` (named in errors).
    #[doc(hidden)]
    async fn session(self, table: &TableName) -> Result<Self::Session, Self::Error>;
}

/// Runs `op` on a session of `admin` for `table`'s statements, and ends
/// the session whatever `op` returned.
async fn on_session<A: Admin, T>(
    admin: A,
    table: &TableName,
    op: impl AsyncFnOnce(&mut A::Session, &Statements) -> Result<T, A::Error>,
) -> Result<T, A::Error> {
    let statements = Statements::new(A::DIALECT, table);
    let mut session = admin.session(table).await?;
    let outcome = op(&mut session, &statements).await;
    session.close().await;
    outcome
}

/// Every lease in the table, by name, with time left on the database's
/// clock. A missing table is the database's `MissingTable` error; a
/// malformed row is its `Row` error, naming it.
pub async fn status<A: Admin>(admin: A, table: &TableName) -> Result<Vec<LeaseRow>, A::Error> {
    on_session(admin, table, async |session, statements| {
        let call = Call {
            statement: statements.status(),
            bindings: &Bindings::default(),
            epoch: None,
        };
        let rows = session.rows("status", call).await?;
        statements
            .decode_status(&rows)
            .map_err(|source| A::Error::row(statements.table().to_string(), source))
    })
    .await
}

/// One lease's row, if it exists, as [`status`] reads every row: for a
/// tool that watches one lease (`picolease handover`) on one connection.
/// A missing table is the database's `MissingTable` error.
pub async fn lease_row<A: Admin>(
    admin: A,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<LeaseRow>, A::Error> {
    on_session(admin, table, async |session, statements| {
        read_row(session, statements, lease, "status").await
    })
    .await
}

/// Frees `lease` whoever holds it, bumping the epoch so the old holder's
/// renewals and fenced writes are rejected (it demotes with reason `lost`),
/// and notifies waiting contenders where the database has notices. The
/// epoch bump waits for the holder's open fenced transactions to end (they
/// hold the row's shared lock), so their writes are ordered before it.
/// Returns the epoch the statement reports (PostgreSQL's new epoch,
/// MySQL's the lease was held at), or `None` when there is no such lease
/// (or, on MySQL, it was free). A malformed row is left untouched by the
/// statement itself and reported as the database's `Row` error.
///
/// `ttl` is the lease's ttl (the longest any of its contenders runs
/// with). On PostgreSQL a row written by another server incarnation is
/// not freed but adopted (DESIGN §3 "Failover"): nobody's for `ttl` at
/// least, at an epoch past anything issued, because the holder of a term
/// the lost history granted may still run until its own deadline.
pub async fn force_release<A: Admin>(
    admin: A,
    table: &TableName,
    lease: &LeaseName,
    ttl: Duration,
) -> Result<Option<Epoch>, A::Error> {
    on_session(admin, table, async |session, statements| {
        let during = "force release";
        let call = Call {
            statement: statements.force_release(),
            bindings: &Bindings {
                ttl_millis: millis(ttl),
                ..lease_only(lease)
            },
            epoch: None,
        };
        let rows = session.rows(during, call).await?;
        let released = statements
            .decode_force_release(&rows)
            .map_err(|source| row_error::<A::Error>(statements, lease, source))?;
        if released.is_none() {
            read_row(session, statements, lease, during).await?;
        }
        Ok(released)
    })
    .await
}

/// The operators' remedy after a failover the server could not detect
/// (DESIGN §3 "Failover"; docs/operations.md §5.4): every lease and
/// membership row of `table` becomes nobody's for `ttl` at least (the
/// longest ttl any contender of the table runs with), at an epoch past
/// anything issued, so the holder of a lost term can neither renew nor
/// re-take it and nobody leads before that term's deadline has passed.
/// Returns each row's name and new epoch.
pub async fn release_after_failover<A: Admin>(
    admin: A,
    table: &TableName,
    ttl: Duration,
) -> Result<Vec<(String, Epoch)>, A::Error> {
    on_session(admin, table, async |session, statements| {
        let bindings = Bindings {
            ttl_millis: millis(ttl),
            ..Bindings::default()
        };
        let call = Call {
            statement: statements.after_failover(),
            bindings: &bindings,
            epoch: None,
        };
        let rows = session.rows("release after failover", call).await?;
        statements
            .decode_batch_names(&rows)
            .map_err(|source| A::Error::row(statements.table().to_string(), source))
    })
    .await
}

/// A lease's ttl in the statements' milliseconds, saturating.
fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

/// Asks the holder of term `epoch` of `lease` to hand it over to node `to`
/// (`""`: to whoever comes next; DESIGN §3 "Planned handover"): writes
/// the request row, which the holder reads with its next renewal. A
/// request for a term that has ended changes nothing. Pick the epoch with
/// [`term_to_hand_over`](picolease_core::sql::term_to_hand_over).
pub async fn request_hand_over<A: Admin>(
    admin: A,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
    to: &str,
) -> Result<(), A::Error> {
    on_session(admin, table, async |session, statements| {
        let statement = statements.request_hand_over();
        on_request(session, statement, "hand over", lease, epoch, to).await
    })
    .await
}

/// Withdraws the request to hand term `epoch` of `lease` over, if the
/// request row still names that term (`picolease handover` once the term
/// has ended, or when the holder did not act in time: a request left in
/// place would fire at the holder's next renewal, whenever that is).
pub async fn withdraw_hand_over<A: Admin>(
    admin: A,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
) -> Result<(), A::Error> {
    on_session(admin, table, async |session, statements| {
        let statement = statements.withdraw_hand_over();
        on_request(session, statement, "withdraw hand over", lease, epoch, "").await
    })
    .await
}

/// One lease's row on `session`, if it exists.
async fn read_row<S: AdminSession>(
    session: &mut S,
    statements: &Statements,
    lease: &LeaseName,
    during: &'static str,
) -> Result<Option<LeaseRow>, S::Error> {
    let call = Call {
        statement: statements.lease_row(),
        bindings: &lease_only(lease),
        epoch: None,
    };
    let rows = session.rows(during, call).await?;
    let mut rows = statements
        .decode_status(&rows)
        .map_err(|source| row_error::<S::Error>(statements, lease, source))?;
    Ok(rows.pop())
}

/// Runs `statement` (a request's or its withdrawal's; `what`, for errors)
/// on the request row of `lease` for term `epoch`, naming node `to`.
async fn on_request<S: AdminSession>(
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
    let call = Call {
        statement,
        bindings: &bindings,
        epoch: Some(epoch),
    };
    session.rows(what, call).await.map(drop)
}

/// A row of `lease` that does not decode, as the database's error.
fn row_error<E: DriverError>(
    statements: &Statements,
    lease: &LeaseName,
    source: picolease_core::RowError,
) -> E {
    E::row(
        statements.table().to_string(),
        source.for_lease(lease.as_str()),
    )
}

/// The bindings of a statement that binds only the lease's name.
fn lease_only(lease: &LeaseName) -> Bindings<'_> {
    Bindings {
        lease: lease.as_str(),
        ..Bindings::default()
    }
}
