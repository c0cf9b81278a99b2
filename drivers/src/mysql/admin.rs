//! Administrative statements on MySQL, for the CLI and for operators:
//! create the table (`init`, here), and run `server/admin.rs`'s (read the
//! leases, force a lease free, ask for a handover) on a connection: one
//! made from a [`MysqlConnector`] for the call and closed after it, or a
//! `&mut Conn` lent to it.

use mysql_async::Conn;
use picolease_core::sql::{Bindings, Cell, Dialect, Statement, Statements};
use picolease_core::{Epoch, TableName};

use super::connect::MysqlConnector;
use super::error::MysqlError;
use super::link::{create_table, run};
use crate::server::admin::{Admin, AdminSession, Call, Rows};

/// Creates the lease table and its `(name, epoch)` index if missing.
pub async fn init(connector: &MysqlConnector, table: &TableName) -> Result<(), MysqlError> {
    let mut conn = connector.connect_client().await?;
    let created = create_table(&mut conn, &Statements::new(Dialect::Mysql, table)).await;
    let _ = conn.disconnect().await;
    created
}

/// A connection as an administrative session: each statement with its
/// read-back in one transaction ([`run_statement`]); the table named in
/// errors.
pub struct Session<'c> {
    conn: Connection<'c>,
    table: String,
}

/// The session's connection: its own (made from a connector, closed at
/// the end), or one lent to it.
enum Connection<'c> {
    Own(Conn),
    Lent(&'c mut Conn),
}

impl Admin for &MysqlConnector {
    type Error = MysqlError;
    type Session = Session<'static>;
    const DIALECT: Dialect = Dialect::Mysql;

    async fn session(self, table: &TableName) -> Result<Session<'static>, MysqlError> {
        let conn = Connection::Own(self.connect_client().await?);
        let table = table.to_string();
        Ok(Session { conn, table })
    }
}

impl<'c> Admin for &'c mut Conn {
    type Error = MysqlError;
    type Session = Session<'c>;
    const DIALECT: Dialect = Dialect::Mysql;

    async fn session(self, table: &TableName) -> Result<Session<'c>, MysqlError> {
        let conn = Connection::Lent(self);
        let table = table.to_string();
        Ok(Session { conn, table })
    }
}

impl AdminSession for Session<'_> {
    type Error = MysqlError;

    async fn rows(&mut self, during: &'static str, call: Call<'_>) -> Result<Rows, MysqlError> {
        let conn = match &mut self.conn {
            Connection::Own(conn) => conn,
            Connection::Lent(conn) => &mut **conn,
        };
        run_statement(conn, call.statement, call.bindings, call.epoch)
            .await
            .map_err(|e| MysqlError::from_statement(during, &self.table, &e))
    }

    async fn close(self) {
        if let Connection::Own(conn) = self.conn {
            let _ = conn.disconnect().await;
        }
    }
}

/// Runs one protocol statement on `conn` as the driver runs it: with its
/// read-backs in one transaction when it has any (MySQL has no
/// `RETURNING`), returning the rows to decode (`Statements::decode_reply`
/// and the others): for tools that measure or inspect the statements on a
/// plain connection.
pub async fn run_statement(
    conn: &mut mysql_async::Conn,
    statement: &Statement,
    bindings: &Bindings<'_>,
    epoch: Option<Epoch>,
) -> Result<Vec<Vec<Cell>>, mysql_async::Error> {
    let values = statement
        .in_order()
        .0
        .iter()
        .map(|step| step.bind(bindings, epoch).collect())
        .collect();
    run(conn, statement, values).await
}
