//! Administrative statements, for the CLI and for operators: create the
//! table (`init`, here), and run `server/admin.rs`'s (read the leases,
//! force a lease free, ask for a handover) on a connected client (see
//! [`PgConnector::connect_client`](super::PgConnector::connect_client)).

use picolease_core::sql::{Dialect, Statements};
use picolease_core::TableName;
use tokio_postgres::Client;

use super::cells::{rows_to_cells, typed};
use super::error::PgError;
use crate::server::admin::{Admin, AdminSession, Call, Rows};

/// Creates the lease table if it does not exist (`init`), and the unique
/// index on `(name, epoch)` that orders fenced transactions before a
/// takeover if it is missing (also on a table created by an older version;
/// see [`Statements::create_index`]). Idempotent, and safe to run from
/// several nodes at once.
pub async fn init(client: &Client, table: &TableName) -> Result<(), PgError> {
    create_table(client, &Statements::new(Dialect::Postgres, table)).await
}

/// A client as an administrative session: each statement unnamed with
/// typed parameters (one round trip, and nothing left on the session for
/// a pooler to mix up), its rows as cells; the table named in errors.
pub struct Session<'c>(&'c Client, String);

impl<'c> Admin for &'c Client {
    type Error = PgError;
    type Session = Session<'c>;
    const DIALECT: Dialect = Dialect::Postgres;

    async fn session(self, table: &TableName) -> Result<Session<'c>, PgError> {
        Ok(Session(self, table.to_string()))
    }
}

/// A shared client, as callers that keep one in an `Arc` pass it (a
/// generic argument is not coerced to `&Client`).
impl<'c> Admin for &'c std::sync::Arc<Client> {
    type Error = PgError;
    type Session = Session<'c>;
    const DIALECT: Dialect = Dialect::Postgres;

    async fn session(self, table: &TableName) -> Result<Session<'c>, PgError> {
        (&**self).session(table).await
    }
}

impl AdminSession for Session<'_> {
    type Error = PgError;

    async fn rows(&mut self, during: &'static str, call: Call<'_>) -> Result<Rows, PgError> {
        let fail = |e: tokio_postgres::Error| PgError::from_statement(during, &self.1, &e);
        let values: Vec<_> = call.statement.bind(call.bindings, call.epoch).collect();
        let rows = self
            .0
            .query_typed(call.statement.sql(), &typed(call.statement, &values))
            .await
            .map_err(fail)?;
        rows_to_cells(&rows).map_err(fail)
    }
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
    // `IF NOT EXISTS` on an existing table sends a NOTICE ("relation …
    // already exists, skipping") that the client's connection logs at
    // INFO on every start; raised to warnings for this batch only (its
    // implicit transaction scopes the `SET LOCAL`).
    let create = format!(
        "SET LOCAL client_min_messages = warning; {}",
        statements.create_table()
    );
    tolerate_duplicate("create table", client.batch_execute(&create).await)?;
    if let Some(index) = statements.create_index() {
        tolerate_duplicate("create index", client.batch_execute(index).await)?;
    }
    Ok(())
}
