//! The MySQL driver's one error type, and how a mysql_async error is
//! sorted into "retry" (transient) and "retrying cannot help" (fatal).

use std::time::Duration;

use picolease_core::{ConfigError, Failure, RowError};

/// Everything the MySQL/MariaDB driver can report.
///
/// Messages name the value at fault (the table, the server's error code,
/// the URL with its password removed). `Clone` and `PartialEq`, as
/// [`crate::postgres::PgError`], so the client's error is kept as its code
/// and text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MysqlError {
    /// The lease configuration, lease name, holder id or table name cannot
    /// be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The connection string could not be parsed.
    #[error("invalid MySQL URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given, with any password replaced by `***`.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// TLS refused the connection in a way retrying with the same settings
    /// cannot cure: a certificate the checks refused, a server without TLS
    /// under `ssl-mode=REQUIRED` or stronger, a server that takes only TLS
    /// met in plain text, or a TLS file that cannot be read. Never a
    /// silent fall back to plain text.
    #[error("TLS to MySQL{}: {reason}", crate::server::tls::at_url(url))]
    Tls {
        /// The URL given, with any password replaced by `***` (empty when
        /// the driver met it on a later connection).
        url: String,
        /// What failed, and why.
        reason: String,
    },
    /// Connecting failed for a reason retrying may cure (refused,
    /// unreachable, the server going away).
    #[error("could not connect to MySQL: {reason}")]
    Connect {
        /// What went wrong.
        reason: String,
    },
    /// The server refused the credentials or the database (error 1044,
    /// 1045, 1049, 1698): retrying with the same settings cannot help.
    #[error("MySQL refused the login (error {code}): {reason}")]
    Login {
        /// The server's error code.
        code: u16,
        /// The server's message.
        reason: String,
    },
    /// The lease table does not exist and auto-create is off.
    #[error("lease table {table} does not exist (create it with `init`, or enable auto-create)")]
    MissingTable {
        /// The table that was looked for.
        table: String,
    },
    /// The table exists but does not have the columns and types the
    /// statements need, or the statements are not allowed on it.
    #[error("lease table {table} does not fit the protocol (error {code}): {reason}")]
    Schema {
        /// The table.
        table: String,
        /// The server's error code, e.g. 1054 (unknown column).
        code: u16,
        /// The server's message.
        reason: String,
    },
    /// A row of the lease table is malformed.
    #[error("lease table {table}: {source}")]
    Row {
        /// The table.
        table: String,
        /// What was wrong with the row.
        #[source]
        source: RowError,
    },
    /// Any other error the server reported (a deadlock, a lock wait past
    /// its timeout, a read-only server, …): retried.
    #[error("MySQL error during {during} (error {code}): {reason}")]
    Database {
        /// What the driver was doing (`acquire`, `renew`, …).
        during: &'static str,
        /// The server's error code.
        code: u16,
        /// The server's message.
        reason: String,
    },
    /// The connection broke (closed, reset, I/O error).
    #[error("MySQL connection lost during {during}: {reason}")]
    Connection {
        /// What the driver was doing.
        during: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// A statement did not answer within the request timeout; its
    /// connection was killed on the server.
    #[error("{during} did not answer within {after:?}")]
    Timeout {
        /// What the driver was doing.
        during: &'static str,
        /// The timeout that passed.
        after: Duration,
    },
    /// A fenced transaction was refused or ended: the fence no longer held
    /// when it began (the lease was taken over, released or lapsed), or the
    /// leader's deadline passed (its session was then killed on the
    /// server, which stops the statement and rolls the transaction back).
    /// Nothing of it was committed.
    #[error("fenced transaction on lease {lease:?} at epoch {epoch}: {reason}")]
    Fenced {
        /// The lease.
        lease: String,
        /// The term the transaction was fenced by.
        epoch: u64,
        /// What ended it.
        reason: String,
    },
    /// The server cannot run what this contender needs: a lease set
    /// renewing by liveness needs MariaDB, since MySQL refuses a subquery
    /// on the table an `UPDATE` writes (its error 1093), which the set's
    /// statements by liveness have. Checked once a connection is made, so
    /// nothing runs half-way.
    #[error("server version {version:?}: {reason}")]
    UnsupportedServer {
        /// What `SELECT VERSION()` answered.
        version: String,
        /// What it cannot run, and what can.
        reason: String,
    },
    /// The driver task ended without reporting (it panicked or its runtime
    /// shut down).
    #[error("the lease driver task stopped unexpectedly: {reason}")]
    Stopped {
        /// What the task's join handle said.
        reason: String,
    },
}

/// ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK, ER_DUP_ENTRY (two first inserts
/// of one lease raced on the `(name, epoch)` index): contention, which says
/// nothing about the session.
const CLEARLY_TRANSIENT: [u16; 3] = [1205, 1213, 1062];

/// ER_DBACCESS_DENIED, ER_ACCESS_DENIED, ER_BAD_DB, ER_ACCESS_DENIED_NO_PASSWORD.
const LOGIN_FAILURES: [u16; 4] = [1044, 1045, 1049, 1698];

impl MysqlError {
    /// Whether retrying may help. Fatal errors finish the driver; transient
    /// ones are retried at the next attempt. As on PostgreSQL, every
    /// [`MysqlError::Database`] error is transient (a read-only server may
    /// become writable again); the session that met one is retired unless
    /// it was contention ([`MysqlError::retires_session`]). A
    /// [`MysqlError::Fenced`] transaction may be retried in a later term.
    pub fn failure(&self) -> Failure {
        match self {
            MysqlError::Connect { .. }
            | MysqlError::Connection { .. }
            | MysqlError::Timeout { .. }
            | MysqlError::Database { .. }
            | MysqlError::Fenced { .. } => Failure::Transient,
            _ => Failure::Fatal,
        }
    }

    /// Whether the session that met this error is dropped (the next
    /// statement connects afresh): for every error but contention
    /// (1205 lock wait timeout, 1213 deadlock, 1062 a raced first insert).
    pub fn retires_session(&self) -> bool {
        match self {
            MysqlError::Database { code, .. } => !CLEARLY_TRANSIENT.contains(code),
            _ => true,
        }
    }

    /// Sorts an error met while running a statement on `table`.
    pub(crate) fn from_statement(
        during: &'static str,
        table: &str,
        err: &mysql_async::Error,
    ) -> Self {
        let mysql_async::Error::Server(server) = err else {
            return MysqlError::Connection {
                during,
                reason: err.to_string(),
            };
        };
        let code = server.code;
        let reason = server.message.clone();
        match code {
            // ER_NO_SUCH_TABLE.
            1146 => MysqlError::MissingTable {
                table: table.to_string(),
            },
            // ER_BAD_FIELD_ERROR, ER_TABLEACCESS_DENIED_ERROR,
            // ER_COLUMNACCESS_DENIED_ERROR, ER_WRONG_VALUE_COUNT_ON_ROW,
            // ER_TRUNCATED_WRONG_VALUE(_FOR_FIELD), ER_BAD_NULL_ERROR,
            // ER_NO_DEFAULT_FOR_FIELD, ER_WARN_DATA_OUT_OF_RANGE,
            // ER_DATA_TOO_LONG, ER_WRONG_ARGUMENTS.
            1054 | 1142 | 1143 | 1136 | 1292 | 1366 | 1048 | 1364 | 1264 | 1406 | 1210 => {
                MysqlError::Schema {
                    table: table.to_string(),
                    code,
                    reason,
                }
            }
            c if LOGIN_FAILURES.contains(&c) => MysqlError::Login { code, reason },
            _ => MysqlError::Database {
                during,
                code,
                reason,
            },
        }
    }

    /// Sorts an error met while connecting.
    pub(crate) fn from_connect(err: &mysql_async::Error) -> Self {
        match err {
            mysql_async::Error::Server(server) if LOGIN_FAILURES.contains(&server.code) => {
                MysqlError::Login {
                    code: server.code,
                    reason: server.message.clone(),
                }
            }
            // ER_SECURE_TRANSPORT_REQUIRED (MySQL 3159, MariaDB 4036): a
            // plain-text attempt at a server that takes only TLS.
            mysql_async::Error::Server(server) if matches!(server.code, 3159 | 4036) => {
                MysqlError::Tls {
                    url: String::new(),
                    reason: server.message.clone(),
                }
            }
            mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer)
            | mysql_async::Error::Io(mysql_async::IoError::Tls(_)) => MysqlError::Tls {
                url: String::new(),
                reason: crate::server::with_causes(err),
            },
            _ if crate::server::tls::is_refusal(err) => MysqlError::Tls {
                url: String::new(),
                reason: crate::server::with_causes(err),
            },
            _ => {
                let reason = crate::server::with_causes(err);
                MysqlError::Connect { reason }
            }
        }
    }
}

impl crate::server::DriverError for MysqlError {
    fn stopped(reason: String) -> Self {
        MysqlError::Stopped { reason }
    }

    fn row(table: String, source: RowError) -> Self {
        MysqlError::Row { table, source }
    }

    fn failure(&self) -> Failure {
        MysqlError::failure(self)
    }
}
