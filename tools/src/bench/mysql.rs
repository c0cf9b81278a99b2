//! The MySQL side of `bench`: two plain connections, each statement run
//! as the driver runs it (with its read-back in one transaction,
//! `picolease::mysql::run_statement`), so the floors are the same
//! statements without the driver around them.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use picolease::mysql::run_statement;
use picolease::sql::{Cell, Dialect, Statement, Statements};
use picolease::{Epoch, HolderId, LeaseName, TableName};
use picolease_core::{Operation, Reply};
use tokio::runtime::Runtime;

use super::{bindings, Probe};
use crate::backend::mysql::Target;
use crate::backend::runtime;
use crate::failure::CliError;

/// Two connections (`a`, `b`) on a runtime of their own, and the scratch
/// table's statements.
pub struct MysqlProbe {
    /// The target's connector, for `connect`.
    connector: picolease::mysql::MysqlConnector,
    runtime: Runtime,
    a: Conn,
    b: Conn,
    statements: Statements,
    /// The row `bare_update` renews, and its epoch.
    renew_epoch: Epoch,
    /// Who holds the handover row now (`true`: `a`), at which epoch.
    handover: (bool, Epoch),
}

fn failed(e: impl std::fmt::Display) -> CliError {
    CliError::runtime(format!("bench: {e}"))
}

/// Runs one lease statement on `conn` and decodes its reply.
async fn execute(
    statements: &Statements,
    conn: &mut Conn,
    operation: Operation,
    lease: &str,
    holder: &str,
) -> Result<Reply, CliError> {
    let me = HolderId::new(holder).map_err(CliError::usage)?;
    let statement: &Statement = statements.for_operation(operation);
    let rows = run_statement(conn, statement, &bindings(lease, holder), operation.epoch())
        .await
        .map_err(failed)?;
    statements
        .decode_reply(operation, &me, &rows)
        .map_err(failed)
}

fn acquired(reply: Reply) -> Result<Epoch, CliError> {
    match reply {
        Reply::Acquired { epoch } => Ok(epoch),
        other => Err(CliError::runtime(format!(
            "bench: the scratch row could not be acquired ({other:?})"
        ))),
    }
}

impl MysqlProbe {
    /// Connects twice and creates the scratch table.
    pub fn open(target: &Target, table: &TableName) -> Result<Self, CliError> {
        let runtime = runtime()?;
        let statements = Statements::new(Dialect::Mysql, table);
        let (a, b, renew_epoch, handover) = runtime.block_on(async {
            picolease::mysql::init(target.connector(), table).await?;
            let connect = || async {
                target
                    .connector()
                    .connect_client()
                    .await
                    .map_err(|e| crate::backend::mysql::named(target, e))
            };
            let mut a = connect().await?;
            let b = connect().await?;
            let renew = execute(
                &statements,
                &mut a,
                Operation::Acquire,
                "probe-renew",
                "probe",
            );
            let renew_epoch = acquired(renew.await?)?;
            let handover = execute(
                &statements,
                &mut a,
                Operation::Acquire,
                "probe-handover",
                "pa",
            );
            let epoch = acquired(handover.await?)?;
            Ok::<_, CliError>((a, b, renew_epoch, epoch))
        })?;
        Ok(MysqlProbe {
            connector: target.connector().clone(),
            runtime,
            a,
            b,
            statements,
            renew_epoch,
            handover: (true, handover),
        })
    }
}

impl Probe for MysqlProbe {
    fn round_trip(&mut self) -> Result<Duration, CliError> {
        let at = Instant::now();
        let _: Option<i64> = self
            .runtime
            .block_on(self.a.query_first("SELECT 1"))
            .map_err(failed)?;
        Ok(at.elapsed())
    }

    fn bare_update(&mut self) -> Result<Duration, CliError> {
        let renew = Operation::Renew {
            epoch: self.renew_epoch,
        };
        let at = Instant::now();
        let reply = self.runtime.block_on(execute(
            &self.statements,
            &mut self.a,
            renew,
            "probe-renew",
            "probe",
        ))?;
        match reply {
            Reply::Accepted => Ok(at.elapsed()),
            other => Err(CliError::runtime(format!(
                "bench: the scratch renew was refused ({other:?})"
            ))),
        }
    }

    fn handover_floor(&mut self) -> Result<Duration, CliError> {
        let (a_holds, epoch) = self.handover;
        let statements = &self.statements;
        let ((from, from_id), (to, to_id)) = if a_holds {
            ((&mut self.a, "pa"), (&mut self.b, "pb"))
        } else {
            ((&mut self.b, "pb"), (&mut self.a, "pa"))
        };
        let at = Instant::now();
        let epoch = self.runtime.block_on(async {
            let release = Operation::Release { epoch };
            execute(statements, from, release, "probe-handover", from_id).await?;
            acquired(execute(statements, to, Operation::Acquire, "probe-handover", to_id).await?)
        })?;
        let took = at.elapsed();
        self.handover = (!a_holds, epoch);
        Ok(took)
    }

    fn expires_in(&mut self, lease: &LeaseName) -> Result<(Option<i64>, Instant), CliError> {
        let before = Instant::now();
        let rows: Vec<Vec<Cell>> = self
            .runtime
            .block_on(run_statement(
                &mut self.b,
                self.statements.lease_row(),
                &bindings(lease.as_str(), ""),
                None,
            ))
            .map_err(failed)?;
        let read_at = before + before.elapsed() / 2;
        let rows = self.statements.decode_status(&rows).map_err(failed)?;
        Ok((rows.first().and_then(|r| r.expires_in_ms), read_at))
    }

    fn drop_table(&mut self) -> Result<(), CliError> {
        let table = self.statements.table().to_string();
        self.runtime
            .block_on(self.a.query_drop(format!("DROP TABLE IF EXISTS {table}")))
            .map_err(|e| CliError::runtime(format!("bench: dropping {table}: {e}")))
    }

    /// On a Galera node, the stall a lost node causes
    /// (`picolease::mysql::galera_commit_stall`).
    fn cluster_stall(&mut self) -> Result<Option<Duration>, CliError> {
        self.runtime
            .block_on(picolease::mysql::galera_commit_stall(&mut self.a))
            .map_err(failed)
    }

    fn connect(&mut self, plain: bool) -> Result<Option<Duration>, CliError> {
        let connector = if plain {
            let tls = picolease::mysql::MysqlTls {
                mode: picolease::mysql::SslMode::Disabled,
                ..picolease::mysql::MysqlTls::default()
            };
            self.connector.clone().with_tls(tls)
        } else {
            self.connector.clone()
        };
        let runtime = &self.runtime;
        super::time_connect(runtime, plain, connector.connect_client(), |conn| {
            let _ = runtime.block_on(conn.disconnect());
        })
    }
}
