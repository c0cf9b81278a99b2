//! The driver's one error type, and how a tokio-postgres error is sorted
//! into "retry" (transient) and "retrying cannot help" (fatal).

use std::time::Duration;

use picolease_core::{ConfigError, Failure, RowError};

use super::pooler::is_pooler_signature;

/// Everything the PostgreSQL driver can report.
///
/// Messages name the value at fault (the table, the SQLSTATE, the URL
/// with its password removed). The type is `Clone` and `PartialEq` so that
/// tests and the CLI can compare errors, which is why the tokio-postgres
/// error is kept as its SQLSTATE and text rather than as a source.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The lease configuration, lease name, holder id or table name cannot
    /// be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The connection string could not be parsed.
    #[error("invalid PostgreSQL URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given, with any password replaced by `***`.
        url: String,
        /// What tokio-postgres said about it.
        reason: String,
    },
    /// TLS refused the connection in a way retrying with the same settings
    /// cannot cure: a certificate the checks refused (unknown CA, a host
    /// name it does not name, out of date), a server without TLS under
    /// `sslmode=require` or stronger, or a TLS file that cannot be read.
    /// Never a silent fall back to plain text.
    #[error("TLS to PostgreSQL{}: {reason}", crate::server::tls::at_url(url))]
    Tls {
        /// The URL given, with any password replaced by `***` (empty when
        /// the driver met it on a later connection: the handle's URL).
        url: String,
        /// What failed, and why.
        reason: String,
    },
    /// Connecting failed for a reason retrying may cure (refused, unreachable,
    /// the server starting up or going away).
    #[error("could not connect to PostgreSQL: {reason}")]
    Connect {
        /// What went wrong.
        reason: String,
    },
    /// The server refused the credentials or the database (SQLSTATE class
    /// 28 or 3D): retrying with the same settings cannot help.
    #[error("PostgreSQL refused the login (SQLSTATE {code}): {reason}")]
    Login {
        /// The SQLSTATE, e.g. `28000` (no such role) or `3D000` (no such
        /// database).
        code: String,
        /// The server's message.
        reason: String,
    },
    /// The lease table does not exist and auto-create is off.
    #[error("lease table {table} does not exist (create it with `init`, or enable auto-create)")]
    MissingTable {
        /// The table that was looked for.
        table: String,
    },
    /// The table exists without the unique index on `(name, epoch)` that
    /// fenced transactions rely on (DESIGN §4b: without it, a takeover
    /// does not wait for an open fenced transaction), and the driver was
    /// told not to create what is missing (`auto_create(false)`).
    #[error("lease table {table} lacks the unique index on (name, epoch) that fenced writes rely on; add it with: {create}")]
    MissingIndex {
        /// The table.
        table: String,
        /// The statement that adds the index.
        create: String,
    },
    /// The table exists but does not have the columns and types the
    /// statements need (wrong column types, missing columns, a foreign
    /// table), or the statements are not allowed on it.
    #[error("lease table {table} does not fit the protocol (SQLSTATE {code}): {reason}")]
    Schema {
        /// The table.
        table: String,
        /// The SQLSTATE, e.g. `42883` (operator does not exist for the
        /// column's type).
        code: String,
        /// The server's message.
        reason: String,
    },
    /// A row of the lease table is malformed (NULL or negative epoch, a
    /// column of another type).
    #[error("lease table {table}: {source}")]
    Row {
        /// The table.
        table: String,
        /// What was wrong with the row.
        #[source]
        source: RowError,
    },
    /// Any other error the server reported.
    #[error("PostgreSQL error during {during} (SQLSTATE {code}): {reason}")]
    Database {
        /// What the driver was doing (`acquire`, `renew`, `status`, …).
        during: &'static str,
        /// The SQLSTATE.
        code: String,
        /// The server's message.
        reason: String,
    },
    /// A transaction pooler (PgBouncer in transaction mode) is between the
    /// driver and the server and lost or mixed up a named prepared
    /// statement (SQLSTATE 42P05 or 26000). The session is retired and the
    /// driver sends unnamed statements on that link from then on; say
    /// `picolease_pooler=transaction` in the URL to start so.
    #[error(
        "a transaction pooler is in the way during {during} (SQLSTATE {code}: {reason}): \
         named prepared statements do not survive it; picolease sends unnamed statements \
         from now on; add picolease_pooler=transaction to the URL to start so \
         (and picolease_notify_url=… for release notices)"
    )]
    Pooler {
        /// What the driver was doing.
        during: &'static str,
        /// The SQLSTATE: 42P05 (another client's statement of that name)
        /// or 26000 (the statement is gone).
        code: String,
        /// The server's message.
        reason: String,
    },
    /// The connection broke (closed, reset, I/O error).
    #[error("PostgreSQL connection lost during {during}: {reason}")]
    Connection {
        /// What the driver was doing.
        during: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// A statement did not answer within the request timeout; it was
    /// cancelled on the server.
    #[error("{during} did not answer within {after:?}")]
    Timeout {
        /// What the driver was doing.
        during: &'static str,
        /// The timeout that passed.
        after: Duration,
    },
    /// A fenced transaction was refused or ended: the fence no longer held
    /// when it began (the lease was taken over, released or lapsed), or the
    /// leader's deadline passed (the statement running then was cancelled
    /// and the transaction rolled back). Nothing of it was committed.
    #[error("fenced transaction on lease {lease:?} at epoch {epoch}: {reason}")]
    Fenced {
        /// The lease.
        lease: String,
        /// The term the transaction was fenced by.
        epoch: u64,
        /// What ended it.
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

impl PgError {
    /// Whether retrying may help. Fatal errors finish the driver; transient
    /// ones are retried at the next attempt.
    ///
    /// Every [`PgError::Database`] error is transient for the core, even
    /// one that repeats on a session (25006 read-only transaction: the
    /// address still points at a demoted primary; 0A000 cached plan
    /// changed), and so is a [`PgError::Pooler`] error: the node must keep
    /// competing, since the database may come back writable. What cures
    /// such an error is a new session, so the driver retires the session on
    /// any statement error that is not clearly transient (see
    /// [`PgError::retires_session`]) and the next attempt connects afresh,
    /// with the usual backoff. A [`PgError::Fenced`] transaction may be
    /// retried in a later term.
    pub fn failure(&self) -> Failure {
        match self {
            PgError::Connect { .. }
            | PgError::Connection { .. }
            | PgError::Timeout { .. }
            | PgError::Database { .. }
            | PgError::Pooler { .. }
            | PgError::Fenced { .. } => Failure::Transient,
            _ => Failure::Fatal,
        }
    }

    /// Whether the session that met this error is retired (dropped; the
    /// next statement connects afresh). Yes for every error but the clearly
    /// transient ones, which say nothing about the session: 40001
    /// (serialization failure), 40P01 (deadlock detected), 23505 (two first
    /// inserts of one lease raced; see `from_statement`) and 55P03 (lock
    /// not available: contention). A session that keeps failing for a
    /// reason of its own (25006 read-only, 26000 prepared statement gone,
    /// 0A000 cached plan, …) would otherwise fail for ever, and the node
    /// would never lead again. Connection errors lose the session anyway.
    pub fn retires_session(&self) -> bool {
        match self {
            PgError::Database { code, .. } => !is_clearly_transient(code),
            _ => true,
        }
    }

    /// Sorts an error met while running a statement on `table`.
    pub(crate) fn from_statement(
        during: &'static str,
        table: &str,
        err: &tokio_postgres::Error,
    ) -> Self {
        let Some(db) = err.as_db_error() else {
            return PgError::Connection {
                during,
                reason: err.to_string(),
            };
        };
        let code = db.code().code().to_string();
        let reason = db.message().to_string();
        match code.as_str() {
            c if is_pooler_signature(c) => PgError::Pooler {
                during,
                code,
                reason,
            },
            "42P01" => PgError::MissingTable {
                table: table.to_string(),
            },
            // Two contenders inserting a lease's first row at once: the
            // upsert's arbiter is the primary key, so the other unique index
            // (name, epoch) can report the race before the upsert sees the
            // conflict. The row exists now; the next attempt takes the
            // ON CONFLICT path.
            "23505" => PgError::Database {
                during,
                code,
                reason,
            },
            // Class 42 (undefined column or function, datatype mismatch,
            // insufficient privilege, …), 23 (a NOT NULL or CHECK column the
            // protocol does not know), 22 (data exception: an epoch that
            // overflows, text where a number belongs), 3F (no such schema).
            c if ["42", "23", "22", "3F"]
                .iter()
                .any(|class| c.starts_with(class)) =>
            {
                PgError::Schema {
                    table: table.to_string(),
                    code,
                    reason,
                }
            }
            c if is_login_failure(c) => PgError::Login { code, reason },
            _ => PgError::Database {
                during,
                code,
                reason,
            },
        }
    }

    /// Sorts an error met while connecting: refused credentials or an
    /// unknown database are [`PgError::Login`]; anything else is
    /// [`PgError::Connect`] with the whole chain of causes (tokio-postgres
    /// leaves "Connection refused" or "failed to lookup address" out of its
    /// own message).
    pub fn from_connect(err: &tokio_postgres::Error) -> Self {
        match err.as_db_error() {
            Some(db) if is_login_failure(db.code().code()) => PgError::Login {
                code: db.code().code().to_string(),
                reason: db.message().to_string(),
            },
            _ if crate::server::tls::is_refusal(err) => PgError::Tls {
                url: String::new(),
                reason: crate::server::with_causes(err),
            },
            _ => {
                let reason = crate::server::with_causes(err);
                PgError::Connect { reason }
            }
        }
    }
}

/// SQLSTATEs that say nothing about the session that met them: a retry on
/// the same session may well succeed.
fn is_clearly_transient(code: &str) -> bool {
    matches!(code, "40001" | "40P01" | "55P03" | "23505")
}

/// SQLSTATE classes 28 (invalid authorisation) and 3D (invalid catalog
/// name: no such database): the settings are wrong, retrying cannot help.
fn is_login_failure(code: &str) -> bool {
    code.starts_with("28") || code.starts_with("3D")
}
