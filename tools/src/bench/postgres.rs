//! The PostgreSQL side of `bench`: plain tokio-postgres connections (two
//! for statements, one listening), on a runtime of their own.
//!
//! Behind a transaction pooler (`picolease_pooler=transaction`) the probe
//! does what the driver does there: every statement unnamed with its
//! parameter types (`query_typed`), and release notices only on the
//! direct notice connection (`picolease_notify_url`) if there is one;
//! without it the handover floor is the release and the acquire back to
//! back, as a driver there has nothing to wait for but its next poll.

#![cfg(feature = "postgres")]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use picolease::postgres::{Connect, Listener, PgConnector, Pooler};
use picolease::sql::{Bindings, Dialect, Statement, Statements, Value};
use picolease::{Epoch, LeaseName, TableName};
use picolease_core::Operation;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Client};

use super::{bindings, Probe};
use crate::backend::postgres::{connect, Target};
use crate::backend::runtime;
use crate::failure::CliError;

/// Plain connections to the user's server, and the scratch table.
pub struct PgProbe {
    /// The target's connector, for `connect`.
    connector: PgConnector,
    runtime: Runtime,
    a: Conn,
    b: Conn,
    /// The listening connection's client: it keeps the connection open.
    _listener: Option<Client>,
    /// Release notifications of the scratch table, as the listener sees
    /// them (`None`: behind a pooler without a direct notice connection).
    notices: Option<mpsc::UnboundedReceiver<String>>,
    statements: Statements,
    table: TableName,
    renew_epoch: Epoch,
    /// Who holds the handover row now (`true`: `a`), at which epoch.
    handover: (bool, Epoch),
}

fn failed(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::runtime(format!("bench: {what}: {e}"))
}

/// A client and the statements prepared on it (none behind a pooler:
/// `unnamed`).
struct Conn {
    client: Client,
    unnamed: bool,
    prepared: HashMap<String, tokio_postgres::Statement>,
}

impl Conn {
    fn new(client: Client, unnamed: bool) -> Self {
        Conn {
            client,
            unnamed,
            prepared: HashMap::new(),
        }
    }

    /// Prepares `sql` on this connection (once), as the driver does
    /// before its clock starts; nothing behind a pooler.
    async fn prepare(&mut self, sql: &str) -> Result<(), CliError> {
        if self.unnamed || self.prepared.contains_key(sql) {
            return Ok(());
        }
        let prepared = self
            .client
            .prepare(sql)
            .await
            .map_err(|e| failed("prepare", e))?;
        self.prepared.insert(sql.to_string(), prepared);
        Ok(())
    }

    /// Runs `sql` with `values`: prepared, or unnamed with their types.
    async fn query(
        &mut self,
        sql: &str,
        values: &[Value<'_>],
    ) -> Result<Vec<tokio_postgres::Row>, CliError> {
        if self.unnamed {
            let typed: Vec<(&(dyn ToSql + Sync), Type)> = values
                .iter()
                .map(|v| match v {
                    Value::Text(s) => (s as &(dyn ToSql + Sync), Type::TEXT),
                    Value::Int(i) => (i as &(dyn ToSql + Sync), Type::INT8),
                })
                .collect();
            return self
                .client
                .query_typed(sql, &typed)
                .await
                .map_err(|e| failed("statement", e));
        }
        self.prepare(sql).await?;
        let params: Vec<&(dyn ToSql + Sync)> = values
            .iter()
            .map(|v| match v {
                Value::Text(s) => s as &(dyn ToSql + Sync),
                Value::Int(i) => i as &(dyn ToSql + Sync),
            })
            .collect();
        self.client
            .query(&self.prepared[sql], &params)
            .await
            .map_err(|e| failed("statement", e))
    }
}

/// Runs a lease statement on `conn`; returns its rows.
async fn run(
    conn: &mut Conn,
    statement: &Statement,
    bindings: &Bindings<'_>,
    epoch: Option<Epoch>,
) -> Result<Vec<tokio_postgres::Row>, CliError> {
    let values: Vec<Value> = statement.bind(bindings, epoch).collect();
    conn.query(statement.sql(), &values).await
}

/// The epoch an acquire returned, or an error when it did not win.
fn acquired(rows: &[tokio_postgres::Row], me: &str) -> Result<Epoch, CliError> {
    let row = rows
        .first()
        .ok_or_else(|| CliError::runtime("bench: the scratch acquire returned no row"))?;
    let holder: Option<String> = row.try_get(0).map_err(|e| failed("acquire", e))?;
    let epoch: i64 = row.try_get(1).map_err(|e| failed("acquire", e))?;
    if holder.as_deref() != Some(me) {
        return Err(CliError::runtime("bench: the scratch row was not acquired"));
    }
    Ok(Epoch::new(u64::try_from(epoch).unwrap_or_default()))
}

impl PgProbe {
    /// Connects (an unreachable server is exit 1), creates the scratch
    /// table and its rows, and starts listening for its releases.
    pub fn open(target: &Target, table: &TableName) -> Result<Self, CliError> {
        let connector: PgConnector = target.connector().clone();
        let runtime = runtime()?;
        let statements = Statements::new(Dialect::Postgres, table);
        let unnamed = connector.pooler() != Pooler::None;
        let (a, b, listener, notices, renew_epoch, handover_epoch) = runtime.block_on(async {
            let mut a = Conn::new(connect(&connector, target).await?, unnamed);
            let b = Conn::new(connect(&connector, target).await?, unnamed);
            picolease::postgres::init(&a.client, table).await?;
            let (listener, notices) = match connector.connect_listener() {
                Some(connecting) => {
                    let (listener, notices) = listen(connecting.await, table).await?;
                    (Some(listener), Some(notices))
                }
                None => (None, None),
            };
            let renew = acquired(
                &run(
                    &mut a,
                    statements.acquire(),
                    &bindings("probe-renew", "probe"),
                    None,
                )
                .await?,
                "probe",
            )?;
            let handover = acquired(
                &run(
                    &mut a,
                    statements.acquire(),
                    &bindings("probe-handover", "pa"),
                    None,
                )
                .await?,
                "pa",
            )?;
            Ok::<_, CliError>((a, b, listener, notices, renew, handover))
        })?;
        Ok(PgProbe {
            connector,
            runtime,
            a,
            b,
            _listener: listener,
            notices,
            statements,
            table: table.clone(),
            renew_epoch,
            handover: (true, handover_epoch),
        })
    }
}

/// Listens for the scratch table's releases on `connected`: the client
/// (kept to hold the connection open) and the notices' lease names.
async fn listen(
    connected: Result<Listener, tokio_postgres::Error>,
    table: &TableName,
) -> Result<(Client, mpsc::UnboundedReceiver<String>), CliError> {
    let (listener, mut messages) = connected
        .map_err(|e| failed("listening connection", e))?
        .into_parts();
    let (tx, notices) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                if tx.send(n.payload().to_string()).is_err() {
                    return;
                }
            }
        }
    });
    let channel = table.release_channel();
    listener
        .batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "\"\"")))
        .await
        .map_err(|e| failed("LISTEN", e))?;
    Ok((listener, notices))
}

impl Probe for PgProbe {
    fn round_trip(&mut self) -> Result<Duration, CliError> {
        let a = &mut self.a;
        self.runtime.block_on(async {
            a.prepare("SELECT 1").await?;
            let at = Instant::now();
            a.query("SELECT 1", &[])
                .await
                .map_err(|e| failed("SELECT 1", e))?;
            Ok(at.elapsed())
        })
    }

    fn bare_update(&mut self) -> Result<Duration, CliError> {
        let (a, statements, epoch) = (&mut self.a, &self.statements, self.renew_epoch);
        self.runtime.block_on(async {
            let renew = statements.for_operation(Operation::Renew { epoch });
            // Prepared before the clock starts, as the driver's are.
            a.prepare(renew.sql()).await?;
            let at = Instant::now();
            let rows = run(a, renew, &bindings("probe-renew", "probe"), Some(epoch)).await?;
            if rows.is_empty() {
                return Err(CliError::runtime("bench: the scratch renew was refused"));
            }
            Ok(at.elapsed())
        })
    }

    fn handover_floor(&mut self) -> Result<Duration, CliError> {
        let (a_holds, epoch) = self.handover;
        let ((from, from_id), (to, to_id)) = if a_holds {
            ((&mut self.a, "pa"), (&mut self.b, "pb"))
        } else {
            ((&mut self.b, "pb"), (&mut self.a, "pa"))
        };
        let statements = &self.statements;
        let mut notices = self.notices.as_mut();
        let (took, epoch) = self.runtime.block_on(async {
            let release = statements.for_operation(Operation::Release { epoch });
            from.prepare(release.sql()).await?;
            to.prepare(statements.acquire().sql()).await?;
            if let Some(notices) = notices.as_mut() {
                while notices.try_recv().is_ok() {}
            }
            let at = Instant::now();
            run(
                from,
                release,
                &bindings("probe-handover", from_id),
                Some(epoch),
            )
            .await?;
            // The successor acts on the notification, as the driver does
            // (behind a pooler without one: at once, its best case).
            while let Some(notices) = notices.as_mut() {
                let notice = tokio::time::timeout(Duration::from_secs(10), notices.recv())
                    .await
                    .map_err(|_| CliError::runtime("bench: no release notification within 10s"))?;
                match notice {
                    Some(lease) if lease == "probe-handover" => break,
                    Some(_) => {}
                    None => {
                        return Err(CliError::runtime("bench: the listening connection closed"))
                    }
                }
            }
            let rows = run(
                to,
                statements.acquire(),
                &bindings("probe-handover", to_id),
                None,
            )
            .await?;
            Ok::<_, CliError>((at.elapsed(), acquired(&rows, to_id)?))
        })?;
        self.handover = (!a_holds, epoch);
        Ok(took)
    }

    fn expires_in(&mut self, lease: &LeaseName) -> Result<(Option<i64>, Instant), CliError> {
        let (b, table) = (&self.b, &self.table);
        self.runtime.block_on(async {
            let before = Instant::now();
            let rows = picolease::postgres::status(&b.client, table)
                .await
                .map_err(|e| failed("status", e))?;
            let read_at = before + before.elapsed() / 2;
            let left = rows
                .into_iter()
                .find(|row| row.name == lease.as_str())
                .and_then(|row| row.expires_in_ms);
            Ok((left, read_at))
        })
    }

    fn drop_table(&mut self) -> Result<(), CliError> {
        let (a, table) = (&self.a, &self.table);
        self.runtime.block_on(async {
            a.client
                .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
                .await
                .map_err(|e| failed(&format!("dropping {table}"), e))
        })
    }

    fn connect(&mut self, plain: bool) -> Result<Option<Duration>, CliError> {
        let connector = if plain {
            let tls = picolease::postgres::PgTls {
                mode: picolease::postgres::SslMode::Disable,
                ..picolease::postgres::PgTls::default()
            };
            match self.connector.clone().with_tls(tls) {
                Ok(connector) => connector,
                Err(_) => return Ok(None),
            }
        } else {
            self.connector.clone()
        };
        super::time_connect(&self.runtime, plain, connector.connect_client(), drop)
    }
}
