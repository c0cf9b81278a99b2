//! Administrative statements, for the CLI and for operators: create the
//! table, read the leases, force a lease free, ask for a handover. Each
//! takes a connected client (see [`PgConnector::connect_client`](super::PgConnector::connect_client));
//! all but `init` are `server/admin.rs`'s, run on it.

use picolease_core::sql::{Bindings, Cell, Dialect, LeaseRow, Statement, Statements};
use picolease_core::{Epoch, LeaseName, TableName};
use tokio_postgres::Client;

use super::cells::{rows_to_cells, typed};
use super::error::PgError;
use crate::server::admin::{self, AdminSession};

/// Creates the lease table if it does not exist (`init`), and the unique
/// index on `(name, epoch)` that orders fenced transactions before a
/// takeover if it is missing (also on a table created by an older version;
/// see [`Statements::create_index`]). Idempotent, and safe to run from
/// several nodes at once.
pub async fn init(client: &Client, table: &TableName) -> Result<(), PgError> {
    create_table(client, &statements(table)).await
}

/// Every lease in the table, by name, with time left on the database's
/// clock. A missing table is [`PgError::MissingTable`]; a malformed row is
/// [`PgError::Row`] naming it.
pub async fn status(client: &Client, table: &TableName) -> Result<Vec<LeaseRow>, PgError> {
    admin::status(&mut Session(client, table.to_string()), &statements(table)).await
}

/// One lease's row, if it exists, as [`status`] reads every row: for a
/// tool that watches one lease (`picolease handover`) on one connection.
/// A missing table is [`PgError::MissingTable`].
pub async fn lease_row(
    client: &Client,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<LeaseRow>, PgError> {
    admin::lease_row(
        &mut Session(client, table.to_string()),
        &statements(table),
        lease,
        "status",
    )
    .await
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
    admin::force_release(
        &mut Session(client, table.to_string()),
        &statements(table),
        lease,
    )
    .await
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
    let statements = statements(table);
    let statement = statements.request_hand_over();
    admin::on_request(
        &mut Session(client, table.to_string()),
        statement,
        "hand over",
        lease,
        epoch,
        to,
    )
    .await
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
    let statements = statements(table);
    let statement = statements.withdraw_hand_over();
    let what = "withdraw hand over";
    admin::on_request(
        &mut Session(client, table.to_string()),
        statement,
        what,
        lease,
        epoch,
        "",
    )
    .await
}

fn statements(table: &TableName) -> Statements {
    Statements::new(Dialect::Postgres, table)
}

/// A client as an administrative session: each statement unnamed with
/// typed parameters (one round trip, and nothing left on the session for
/// a pooler to mix up), its rows as cells; the table named in errors.
struct Session<'c>(&'c Client, String);

impl AdminSession for Session<'_> {
    type Error = PgError;

    async fn rows(
        &mut self,
        during: &'static str,
        statement: &Statement,
        bindings: &Bindings<'_>,
        epoch: Option<Epoch>,
    ) -> Result<Vec<Vec<Cell>>, PgError> {
        let fail = |e: tokio_postgres::Error| PgError::from_statement(during, &self.1, &e);
        let values: Vec<_> = statement.bind(bindings, epoch).collect();
        let rows = self
            .0
            .query_typed(statement.sql(), &typed(statement, &values))
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
    tolerate_duplicate(
        "create table",
        client.batch_execute(statements.create_table()).await,
    )?;
    if let Some(index) = statements.create_index() {
        tolerate_duplicate("create index", client.batch_execute(index).await)?;
    }
    Ok(())
}
