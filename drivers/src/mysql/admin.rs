//! Administrative statements on MySQL, for the CLI and for operators:
//! create the table, read the leases, force a lease free, ask for a
//! handover. Each connects with the [`MysqlConnector`] given, runs, and
//! disconnects; all but `init` are `server/admin.rs`'s, run on that
//! connection.

use mysql_async::Conn;
use picolease_core::sql::{Bindings, Cell, Dialect, LeaseRow, Statement, Statements};
use picolease_core::{Epoch, LeaseName, TableName};

use super::connect::MysqlConnector;
use super::error::MysqlError;
use super::link::{create_table, run};
use crate::server::admin::{self, AdminSession};

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
    let mut conn = connector.connect_client().await?;
    let outcome = admin::status(&mut Session::new(&mut conn, table), &statements(table)).await;
    let _ = conn.disconnect().await;
    outcome
}

/// Frees `lease` whoever holds it (its holder demotes at its next renewal
/// with reason `lost`): the epoch it was held at, `None` if it was free or
/// absent.
pub async fn force_release(
    connector: &MysqlConnector,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<Epoch>, MysqlError> {
    let mut conn = connector.connect_client().await?;
    let mut session = Session::new(&mut conn, table);
    let outcome = admin::force_release(&mut session, &statements(table), lease).await;
    let _ = conn.disconnect().await;
    outcome
}

/// One lease's row on `conn`, if it exists, as [`status`] reads every
/// row: for a tool that watches one lease (`picolease handover`) on one
/// connection. A missing table is [`MysqlError::MissingTable`].
pub async fn lease_row(
    conn: &mut mysql_async::Conn,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<LeaseRow>, MysqlError> {
    let mut session = Session::new(conn, table);
    admin::lease_row(&mut session, &statements(table), lease, "status").await
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
    let statements = statements(table);
    let statement = statements.request_hand_over();
    let mut conn = connector.connect_client().await?;
    let mut session = Session::new(&mut conn, table);
    let outcome = admin::on_request(&mut session, statement, "hand over", lease, epoch, to).await;
    let _ = conn.disconnect().await;
    outcome
}

/// Withdraws the request to hand term `epoch` of `lease` over, as
/// [`crate::postgres::withdraw_hand_over`] does.
pub async fn withdraw_hand_over(
    connector: &MysqlConnector,
    table: &TableName,
    lease: &LeaseName,
    epoch: Epoch,
) -> Result<(), MysqlError> {
    let statements = statements(table);
    let statement = statements.withdraw_hand_over();
    let what = "withdraw hand over";
    let mut conn = connector.connect_client().await?;
    let mut session = Session::new(&mut conn, table);
    let outcome = admin::on_request(&mut session, statement, what, lease, epoch, "").await;
    let _ = conn.disconnect().await;
    outcome
}

fn statements(table: &TableName) -> Statements {
    Statements::new(Dialect::Mysql, table)
}

/// A connection as an administrative session: each statement with its
/// read-back in one transaction ([`run_statement`]); the table named in
/// errors.
struct Session<'c> {
    conn: &'c mut Conn,
    table: String,
}

impl<'c> Session<'c> {
    fn new(conn: &'c mut Conn, table: &TableName) -> Self {
        Session {
            conn,
            table: table.to_string(),
        }
    }
}

impl AdminSession for Session<'_> {
    type Error = MysqlError;

    async fn rows(
        &mut self,
        during: &'static str,
        statement: &Statement,
        bindings: &Bindings<'_>,
        epoch: Option<Epoch>,
    ) -> Result<Vec<Vec<Cell>>, MysqlError> {
        run_statement(self.conn, statement, bindings, epoch)
            .await
            .map_err(|e| MysqlError::from_statement(during, &self.table, &e))
    }
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
