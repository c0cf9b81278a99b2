//! Administrative statements, for the CLI and for operators: create the
//! table, read the leases, force a lease free. Each takes a connected
//! client (see [`PgConnector::connect_client`](super::PgConnector::connect_client)).

use picolease_core::sql::{Bindings, Cell, Dialect, LeaseRow, Statement, Statements};
use picolease_core::{Epoch, LeaseName, RowError, TableName};
use tokio_postgres::Client;

use super::cells::{rows_to_cells, typed};
use super::error::PgError;

/// Creates the lease table if it does not exist (`init`), and the unique
/// index on `(name, epoch)` that orders fenced transactions before a
/// takeover if it is missing (also on a table created by an older version;
/// see [`Statements::create_index`]). Idempotent, and safe to run from
/// several nodes at once.
pub async fn init(client: &Client, table: &TableName) -> Result<(), PgError> {
    create_table(client, &Statements::new(Dialect::Postgres, table)).await
}

/// Every lease in the table, by name, with time left on the database's
/// clock. A missing table is [`PgError::MissingTable`]; a malformed row is
/// [`PgError::Row`] naming it.
pub async fn status(client: &Client, table: &TableName) -> Result<Vec<LeaseRow>, PgError> {
    let statements = Statements::new(Dialect::Postgres, table);
    let rows = client
        .query_typed(statements.status().sql(), &[])
        .await
        .map_err(|e| PgError::from_statement("status", &table.to_string(), &e))?;
    let cells = rows_to_cells(&rows)
        .map_err(|e| PgError::from_statement("status", &table.to_string(), &e))?;
    statements
        .decode_status(&cells)
        .map_err(|source| PgError::Row {
            table: table.to_string(),
            source,
        })
}

/// One lease's row, if it exists, as [`status`] reads every row: for a
/// tool that watches one lease (`picolease handover`) on one connection.
/// A missing table is [`PgError::MissingTable`].
pub async fn lease_row(
    client: &Client,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<LeaseRow>, PgError> {
    read_row(client, table, lease, "status").await
}

/// [`lease_row`], with `during` naming the command in a failure.
async fn read_row(
    client: &Client,
    table: &TableName,
    lease: &LeaseName,
    during: &'static str,
) -> Result<Option<LeaseRow>, PgError> {
    let statements = Statements::new(Dialect::Postgres, table);
    let bindings = Bindings {
        lease: lease.as_str(),
        ..Bindings::default()
    };
    let rows = query(client, table, during, statements.lease_row(), &bindings).await?;
    let mut rows = statements
        .decode_status(&rows)
        .map_err(|source| PgError::Row {
            table: table.to_string(),
            source: source.for_lease(lease.as_str()),
        })?;
    Ok(rows.pop())
}

/// Frees `lease` whoever holds it, bumping the epoch so the old holder's
/// renewals and fenced writes are rejected (it demotes with reason `lost`),
/// and notifies waiting contenders. The epoch bump waits for the holder's
/// open fenced transactions to end (they hold the row `FOR KEY SHARE`), so
/// their writes are ordered before it. Returns the new epoch, or `None` when
/// there is no such lease. A malformed row is left untouched by the
/// statement itself and reported as [`PgError::Row`].
pub async fn force_release(
    client: &Client,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<Epoch>, PgError> {
    let statements = Statements::new(Dialect::Postgres, table);
    // The statements bind only the lease name.
    let bindings = Bindings {
        lease: lease.as_str(),
        holder: "",
        ttl_millis: 0,
        ..Bindings::default()
    };
    let row_error = |source: RowError| PgError::Row {
        table: table.to_string(),
        source: source.for_lease(lease.as_str()),
    };
    let during = "force release";
    let rows = query(client, table, during, statements.force_release(), &bindings).await?;
    let released = statements.decode_force_release(&rows).map_err(row_error)?;
    if released.is_none() {
        // No such lease, or a malformed row the statement refused to
        // touch: reading it tells which.
        read_row(client, table, lease, during).await?;
    }
    Ok(released)
}

/// Asks the holder of term `epoch` of `lease` to hand it over to node `to`
/// (`""`: to whoever comes next; DESIGN §3 "Planned handover"): writes
/// the request row, which the holder reads with its next renewal. A
/// request for a term that has ended changes nothing. Pick the epoch with
/// [`term_to_hand_over`](picolease_core::sql::term_to_hand_over).
pub async fn request_hand_over(
    client: &Client,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
    to: &str,
) -> Result<(), PgError> {
    let statements = Statements::new(Dialect::Postgres, table);
    let statement = statements.request_hand_over();
    on_request(client, table, statement, "hand over", lease, epoch, to).await
}

/// Withdraws the request to hand term `epoch` of `lease` over, if the
/// request row still names that term (`picolease handover` once the term
/// has ended, or when the holder did not act in time: a request left in
/// place would fire at the holder's next renewal, whenever that is).
pub async fn withdraw_hand_over(
    client: &Client,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
) -> Result<(), PgError> {
    let statements = Statements::new(Dialect::Postgres, table);
    let statement = statements.withdraw_hand_over();
    on_request(
        client,
        table,
        statement,
        "withdraw hand over",
        lease,
        epoch,
        "",
    )
    .await
}

/// Runs `statement` (`what`, for errors) on the request row of `lease`
/// for term `epoch`, naming node `to`.
async fn on_request(
    client: &Client,
    table: &TableName,
    statement: &Statement,
    what: &'static str,
    lease: &LeaseName,
    epoch: Epoch,
    to: &str,
) -> Result<(), PgError> {
    let request = picolease_core::sql::hand_over_request_name(lease.as_str());
    let bindings = Bindings {
        lease: &request,
        successor: to,
        ..Bindings::default()
    };
    let values: Vec<_> = statement.bind(&bindings, Some(epoch)).collect();
    client
        .query_typed(statement.sql(), &typed(statement, &values))
        .await
        .map_err(|e| PgError::from_statement(what, &table.to_string(), &e))?;
    Ok(())
}

/// Runs `statement` unnamed with typed parameters (one round trip, and
/// nothing left on the session for a pooler to mix up), and returns its
/// rows as cells.
async fn query(
    client: &Client,
    table: &TableName,
    during: &'static str,
    statement: &Statement,
    bindings: &Bindings<'_>,
) -> Result<Vec<Vec<Cell>>, PgError> {
    let fail = |e: tokio_postgres::Error| PgError::from_statement(during, &table.to_string(), &e);
    let values: Vec<_> = statement.bind(bindings, None).collect();
    let rows = client
        .query_typed(statement.sql(), &typed(statement, &values))
        .await
        .map_err(fail)?;
    rows_to_cells(&rows).map_err(fail)
}

/// Runs `CREATE TABLE IF NOT EXISTS`, then creates the fence index on
/// `(name, epoch)` if it is missing ([`Statements::create_index`]), on a new
/// table or one created before the index existed. Two contenders creating
/// either at the same moment can make PostgreSQL report a duplicate (42P07;
/// 23505 on its catalog; 42710 for the table's row type): it exists, which
/// is all that was asked.
pub(super) async fn create_table(client: &Client, statements: &Statements) -> Result<(), PgError> {
    let table = statements.table().to_string();
    let tolerate_duplicate =
        |during: &'static str, result: Result<(), tokio_postgres::Error>| match result {
            Ok(()) => Ok(()),
            Err(e)
                if matches!(
                    e.code().map(|c| c.code()),
                    Some("42P07" | "23505" | "42710")
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(PgError::from_statement(during, &table, &e)),
        };
    tolerate_duplicate(
        "create table",
        client.batch_execute(statements.create_table()).await,
    )?;
    if let Some(index) = statements.create_index() {
        tolerate_duplicate("create index", client.batch_execute(index).await)?;
    }
    Ok(())
}
