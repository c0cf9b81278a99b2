//! Administrative statements on MySQL, for the CLI and for operators:
//! create the table, read the leases, force a lease free. Each connects
//! with the [`MysqlConnector`] given, runs, and disconnects.

use picolease_core::sql::{Bindings, Cell, Dialect, LeaseRow, Statement, Statements};
use picolease_core::{Epoch, LeaseName, RowError, TableName};

use super::connect::MysqlConnector;
use super::error::MysqlError;
use super::link::{create_table, run};

/// Creates the lease table and its `(name, epoch)` index if missing.
pub async fn init(connector: &MysqlConnector, table: &TableName) -> Result<(), MysqlError> {
    let mut conn = connector.connect_client().await?;
    let created = create_table(&mut conn, &Statements::new(Dialect::Mysql, table)).await;
    let _ = conn.disconnect().await;
    created
}

/// Every lease row, in name order, with the database's clock.
pub async fn status(
    connector: &MysqlConnector,
    table: &TableName,
) -> Result<Vec<LeaseRow>, MysqlError> {
    let statements = Statements::new(Dialect::Mysql, table);
    let rows = query(connector, table, "status", statements.status(), None).await?;
    statements
        .decode_status(&rows)
        .map_err(|source| MysqlError::Row {
            table: table.to_string(),
            source,
        })
}

/// Frees `lease` whoever holds it (its holder demotes at its next renewal
/// with reason `lost`): the epoch it was held at, `None` if it was free or
/// absent.
pub async fn force_release(
    connector: &MysqlConnector,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<Epoch>, MysqlError> {
    let statements = Statements::new(Dialect::Mysql, table);
    let row_error = |source: RowError| MysqlError::Row {
        table: table.to_string(),
        source: source.for_lease(lease.as_str()),
    };
    let rows = query(
        connector,
        table,
        "force release",
        statements.force_release(),
        Some(lease),
    )
    .await?;
    let released = statements.decode_force_release(&rows).map_err(row_error)?;
    if released.is_none() {
        // No such lease, or a malformed row the statement refused to
        // touch: reading it tells which.
        let rows = query(
            connector,
            table,
            "force release",
            statements.lease_row(),
            Some(lease),
        )
        .await?;
        statements.decode_status(&rows).map_err(row_error)?;
    }
    Ok(released)
}

/// One lease's row on `conn`, if it exists, as [`status`] reads every
/// row: for a tool that watches one lease (`picolease handover`) on one
/// connection. A missing table is [`MysqlError::MissingTable`].
pub async fn lease_row(
    conn: &mut mysql_async::Conn,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<LeaseRow>, MysqlError> {
    let statements = Statements::new(Dialect::Mysql, table);
    let bindings = Bindings {
        lease: lease.as_str(),
        ..Bindings::default()
    };
    let rows = run_statement(conn, statements.lease_row(), &bindings, None)
        .await
        .map_err(|e| MysqlError::from_statement("status", &table.to_string(), &e))?;
    let mut rows = statements
        .decode_status(&rows)
        .map_err(|source| MysqlError::Row {
            table: table.to_string(),
            source: source.for_lease(lease.as_str()),
        })?;
    Ok(rows.pop())
}

/// Asks the holder of term `epoch` of `lease` to hand it over to node `to`
/// (`""`: to whoever comes next; DESIGN §3 "Planned handover"), as
/// [`crate::postgres::request_hand_over`] does.
pub async fn request_hand_over(
    connector: &MysqlConnector,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
    to: &str,
) -> Result<(), MysqlError> {
    let statements = Statements::new(Dialect::Mysql, table);
    let statement = statements.request_hand_over();
    on_request(connector, table, statement, "hand over", lease, epoch, to).await
}

/// Withdraws the request to hand term `epoch` of `lease` over, as
/// [`crate::postgres::withdraw_hand_over`] does.
pub async fn withdraw_hand_over(
    connector: &MysqlConnector,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
) -> Result<(), MysqlError> {
    let statements = Statements::new(Dialect::Mysql, table);
    let statement = statements.withdraw_hand_over();
    on_request(
        connector,
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
/// for term `epoch`, naming node `to`, on a connection of its own.
async fn on_request(
    connector: &MysqlConnector,
    table: &TableName,
    statement: &Statement,
    what: &'static str,
    lease: &LeaseName,
    epoch: Epoch,
    to: &str,
) -> Result<(), MysqlError> {
    let request = picolease_core::sql::hand_over_request_name(lease.as_str());
    let bindings = Bindings {
        lease: &request,
        successor: to,
        ..Bindings::default()
    };
    let mut conn = connector.connect_client().await?;
    let outcome = run_statement(&mut conn, statement, &bindings, Some(epoch)).await;
    let _ = conn.disconnect().await;
    outcome
        .map(drop)
        .map_err(|e| MysqlError::from_statement(what, &table.to_string(), &e))
}

/// Runs one protocol statement on `conn` as the driver runs it: with its
/// read-back in one transaction when it has one (MySQL has no
/// `RETURNING`), returning the rows to decode (`Statements::decode_reply`
/// and the others): for tools that measure or inspect the statements on a
/// plain connection.
pub async fn run_statement(
    conn: &mut mysql_async::Conn,
    statement: &Statement,
    bindings: &Bindings<'_>,
    epoch: Option<Epoch>,
) -> Result<Vec<Vec<Cell>>, mysql_async::Error> {
    let values: Vec<_> = statement.bind(bindings, epoch).collect();
    let read_values = statement
        .read_back()
        .map(|read| read.statement().bind(bindings, epoch).collect());
    run(conn, statement, values, read_values).await
}

/// Runs `statement` (with its read-back, in one transaction) bound to
/// `lease`, on a connection of its own.
async fn query(
    connector: &MysqlConnector,
    table: &TableName,
    during: &'static str,
    statement: &Statement,
    lease: Option<&LeaseName>,
) -> Result<Vec<Vec<Cell>>, MysqlError> {
    let bindings = Bindings {
        lease: lease.map_or("", LeaseName::as_str),
        holder: "",
        ttl_millis: 0,
        ..Bindings::default()
    };
    let mut conn = connector.connect_client().await?;
    let outcome = run_statement(&mut conn, statement, &bindings, None).await;
    let _ = conn.disconnect().await;
    outcome.map_err(|e| MysqlError::from_statement(during, &table.to_string(), &e))
}
