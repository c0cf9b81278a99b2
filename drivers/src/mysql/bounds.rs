//! What bounds a fenced transaction (`transaction.rs`) besides the
//! client's own race with the deadline: the session variables that make
//! the server stop its statements and close its idle session (read when
//! it begins, armed before each statement, put back at the end), and the
//! `KILL` of its session at the deadline from a second connection. Also
//! its beginning, which reads, arms and locks in one race with the
//! deadline.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Transaction, TxOpts};
use tokio::time::Instant;

use super::error::MysqlError;
use crate::server::fenced::{until, Begun};

/// How long the kill sent at the deadline (a connection and `KILL`) may
/// take before it is given up; the caller never waits for it.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// A statement stopped by a bound armed from the deadline: MariaDB's
/// `max_statement_time` (1969), MySQL's `max_execution_time` (3024), the
/// lock wait timeout (1205, armed to the time left rounded up).
const CUT_BY_THE_SERVER: [u16; 3] = [1969, 3024, 1205];

/// What the errors of its beginning say it was doing.
const BEGIN: &str = "begin of a fenced transaction";

/// The session variables that bound a fenced transaction on the server.
/// MySQL has no `SET LOCAL`: they are set for the session before each
/// statement, and put back as they were before commit or rollback.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    /// Stops a statement: MariaDB's `max_statement_time` (seconds, every
    /// statement, lock waits included), MySQL's `max_execution_time`
    /// (milliseconds, `SELECT` only).
    statement: &'static str,
    in_millis: bool,
    /// Closes a session idle in it: MariaDB's `idle_transaction_timeout`;
    /// MySQL has none, so its `wait_timeout` (any idle session) while the
    /// transaction is open.
    idle: &'static str,
}

const MARIADB: Bounds = Bounds {
    statement: "max_statement_time",
    in_millis: false,
    idle: "idle_transaction_timeout",
};

const MYSQL: Bounds = Bounds {
    statement: "max_execution_time",
    in_millis: true,
    idle: "wait_timeout",
};

impl Bounds {
    /// `SET SESSION` of the three variables.
    fn set(&self, statement: &str, lock_wait: &str, idle: &str) -> String {
        format!(
            "SET SESSION {} = {statement}, innodb_lock_wait_timeout = {lock_wait}, {} = {idle}",
            self.statement, self.idle
        )
    }

    /// The bounds armed to `left`: the statement's to the millisecond, the
    /// lock wait and idle ones in whole seconds rounded up (all they take).
    fn arm(&self, left: Duration) -> String {
        let millis = left.as_micros().div_ceil(1000).max(1);
        let whole = millis.div_ceil(1000).to_string();
        let statement = match self.in_millis {
            true => millis.to_string(),
            false => format!("{}.{:03}", millis / 1000, millis % 1000),
        };
        self.set(&statement, &whole, &whole)
    }

    /// Which server `conn` is on (MariaDB's names first, then MySQL's:
    /// error 1193 is an unknown variable), and the statement that puts its
    /// session's values back.
    async fn of(conn: &mut Conn) -> Result<(Bounds, String), MysqlError> {
        for bounds in [MARIADB, MYSQL] {
            let read = format!(
                "SELECT @@session.{}, @@session.innodb_lock_wait_timeout, @@session.{}",
                bounds.statement, bounds.idle
            );
            match conn.query_first::<(f64, f64, f64), _>(read).await {
                Ok(Some((s, l, i))) => {
                    let restore = bounds.set(&s.to_string(), &l.to_string(), &i.to_string());
                    return Ok((bounds, restore));
                }
                Ok(None) => break,
                Err(mysql_async::Error::Server(e)) if e.code == 1193 => {}
                Err(e) => return Err(statement_error(BEGIN, &e)),
            }
        }
        Err(MysqlError::Database {
            during: BEGIN,
            code: 1193,
            reason: "the server has neither MariaDB's max_statement_time nor MySQL's \
                     max_execution_time: a fenced transaction cannot be bounded on it"
                .into(),
        })
    }
}

/// A fenced transaction's session: its bounds, what puts them back, and
/// how to end it on the server.
#[derive(Debug)]
pub(super) struct Session {
    bounds: Bounds,
    /// Puts the session's bounds back as they were before it began.
    pub(super) restore: String,
    /// Its id, and the connection's own options, so the kill goes to the
    /// server the transaction runs on as the same user (who may kill its
    /// own sessions).
    id: u32,
    opts: Opts,
}

impl Session {
    /// The `SET SESSION` that arms its bounds to `left`.
    pub(super) fn arm(&self, left: Duration) -> String {
        self.bounds.arm(left)
    }

    /// Sends `KILL <id>` from a connection of its own, in the background:
    /// the server stops the statement, rolls the transaction back (its
    /// lock goes) and closes the session, whatever the client does next.
    /// `KILL QUERY` would leave the transaction and its lock to a ROLLBACK
    /// from a client that may be stuck.
    pub(super) fn kill(&self) {
        kill(self.id, self.opts.clone());
    }
}

fn kill(id: u32, opts: Opts) {
    tokio::spawn(async move {
        let kill = async {
            let mut conn = Conn::new(opts).await?;
            let killed = conn.query_drop(format!("KILL {id}")).await;
            let _ = conn.disconnect().await;
            killed
        };
        match tokio::time::timeout(KILL_PATIENCE, kill).await {
            Ok(Ok(())) => {
                tracing::debug!(id, "picolease: killed a fenced transaction's session")
            }
            // ER_NO_SUCH_THREAD: it had gone already.
            Ok(Err(mysql_async::Error::Server(e))) if e.code == 1094 => {}
            Ok(Err(e)) => {
                tracing::warn!(id, error = %e, "picolease: could not kill a fenced transaction's session")
            }
            Err(_) => tracing::warn!(
                id,
                "picolease: killing a fenced transaction's session took over {KILL_PATIENCE:?}"
            ),
        }
    });
}

/// Begins a fenced transaction on `conn`: reads the session's bounds,
/// starts a transaction, arms them to the time left, and runs `check` (the
/// fence, whose read locks the lease row) with `params`, all before
/// `deadline`.
pub(super) async fn begin(
    conn: &mut Conn,
    check: String,
    params: Vec<mysql_async::Value>,
    deadline: Instant,
) -> Begun<(Transaction<'_>, Session), MysqlError> {
    let (id, opts) = (conn.id(), conn.opts().clone());
    let (bounds, restore) = match until(deadline, Bounds::of(conn)).await {
        Some(Ok(read)) => read,
        Some(Err(e)) => return Begun::Failed(e),
        None => {
            kill(id, opts);
            return Begun::Late;
        }
    };
    let arm = bounds.arm(deadline.saturating_duration_since(Instant::now()));
    let session = Session {
        bounds,
        restore,
        id,
        opts,
    };
    let work = async {
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
        let holds = async {
            tx.query_drop(arm).await?;
            tx.exec_first::<i64, _, _>(check, params).await
        }
        .await;
        match holds {
            Ok(Some(1)) => Ok(Some(tx)),
            // Refused or failed: leave the connection as it was.
            Ok(_) => finish(tx, &session).await.map(|()| None),
            Err(e) => {
                let _ = finish(tx, &session).await;
                Err(e)
            }
        }
    };
    match until(deadline, work).await {
        Some(Ok(Some(tx))) => Begun::Holds((tx, session)),
        Some(Ok(None)) => Begun::Refused,
        Some(Err(e)) => Begun::Failed(statement_error(BEGIN, &e)),
        None => {
            session.kill();
            Begun::Late
        }
    }
}

/// Puts the session's bounds back, then rolls back.
pub(super) async fn finish(
    mut tx: Transaction<'_>,
    session: &Session,
) -> Result<(), mysql_async::Error> {
    tx.query_drop(&session.restore).await?;
    tx.rollback().await
}

/// The server's code and message, if `err` is a statement stopped by a
/// bound armed from the deadline.
pub(super) fn cut_by_the_server(err: &mysql_async::Error) -> Option<String> {
    match err {
        mysql_async::Error::Server(e) if CUT_BY_THE_SERVER.contains(&e.code) => {
            Some(format!("error {}: {}", e.code, e.message))
        }
        _ => None,
    }
}

/// An error of the application's own statement: the server's code and
/// message, or the connection's failure (not sorted like the lease
/// statements', which name the lease table).
pub(super) fn statement_error(during: &'static str, err: &mysql_async::Error) -> MysqlError {
    match err {
        mysql_async::Error::Server(e) => MysqlError::Database {
            during,
            code: e.code,
            reason: e.message.clone(),
        },
        _ => MysqlError::Connection {
            during,
            reason: err.to_string(),
        },
    }
}
