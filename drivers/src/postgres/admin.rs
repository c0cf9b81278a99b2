//! Administrative statements, for the CLI and for operators: create the
//! table, read the leases, force a lease free. Each takes a connected
//! client (see [`PgConnector::connect_client`](super::PgConnector::connect_client)).

use picolease_core::sql::{Bindings, Cell, Dialect, LeaseRow, Statement, Statements};
use picolease_core::{Epoch, LeaseName, RowError, TableName};
use tokio_postgres::Client;

use super::cells::{param_type, rows_to_cells, to_sql};
use super::error::PgError;
use super::link::create_table;

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
        .query(statements.status().sql(), &[])
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
    };
    let row_error = |source: RowError| PgError::Row {
        table: table.to_string(),
        source: source.for_lease(lease.as_str()),
    };
    let rows = query(client, table, statements.force_release(), &bindings).await?;
    let released = statements.decode_force_release(&rows).map_err(row_error)?;
    if released.is_none() {
        // No such lease, or a malformed row the statement refused to
        // touch: reading it tells which.
        let rows = query(client, table, statements.lease_row(), &bindings).await?;
        statements.decode_status(&rows).map_err(row_error)?;
    }
    Ok(released)
}

/// Prepares `statement` with typed parameters, runs it, and returns its
/// rows as cells.
async fn query(
    client: &Client,
    table: &TableName,
    statement: &Statement,
    bindings: &Bindings<'_>,
) -> Result<Vec<Vec<Cell>>, PgError> {
    let fail =
        |e: tokio_postgres::Error| PgError::from_statement("force release", &table.to_string(), &e);
    let types: Vec<_> = statement.params().iter().copied().map(param_type).collect();
    let prepared = client
        .prepare_typed(statement.sql(), &types)
        .await
        .map_err(fail)?;
    let values: Vec<_> = statement.bind(bindings, None).collect();
    let params: Vec<_> = values.iter().map(to_sql).collect();
    let rows = client.query(&prepared, &params).await.map_err(fail)?;
    rows_to_cells(&rows).map_err(fail)
}
