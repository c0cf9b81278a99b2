//! Connections to MySQL or MariaDB from a URL, named so a DBA can find
//! them (`program_name` connection attribute, in
//! `performance_schema.session_connect_attrs`), with the session settings
//! that bound a statement on the server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, DriverError, Opts, OptsBuilder};

use super::error::MysqlError;
use super::tls::{is_tls_key, MysqlTls, SslMode};

/// The `program_name` of the driver's connections.
pub(crate) const PROGRAM_NAME: &str = "picolease";

/// Where the driver connects: `mysql://USER[:PASSWORD]@HOST[:PORT]/DB`
/// (or `mariadb://…`), always over TCP, over TLS as the URL's `ssl-mode`,
/// `ssl-ca`, `ssl-cert` and `ssl-key` say ([`MysqlTls`]; the mysql
/// client's names) on every connection it opens: the driver's, the
/// wake-up connection, the one that kills a fenced transaction.
#[derive(Clone)]
pub struct MysqlConnector {
    /// With the TLS options (none under `DISABLED`).
    opts: Opts,
    /// The same without TLS, for `PREFERRED` when the server has none.
    plain: Opts,
    tls: MysqlTls,
    /// Under `PREFERRED`: the server was found to offer no TLS, so
    /// connections go in plain text without asking again.
    plain_only: Arc<AtomicBool>,
    shown: String,
}

impl std::fmt::Debug for MysqlConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MysqlConnector").field(&self.shown).finish()
    }
}

/// `url` with its password replaced by `***`, for messages.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

impl MysqlConnector {
    /// Parses `url` (`mysql://` or `mariadb://`).
    pub fn new(url: &str) -> Result<Self, MysqlError> {
        let shown = without_password(url);
        let invalid = |reason: String| MysqlError::InvalidUrl {
            url: shown.clone(),
            reason,
        };
        let normalised = match url.split_once("://") {
            Some(("mysql", rest)) | Some(("mariadb", rest)) => format!("mysql://{rest}"),
            _ => {
                return Err(invalid(
                    "expected mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or mariadb://)".into(),
                ))
            }
        };
        // mysql_async refuses names it does not know: the TLS keys, in
        // either spelling, are taken out first.
        let (normalised, tls_pairs) = crate::url::split_query(&normalised, is_tls_key);
        let tls = MysqlTls::from_params(&tls_pairs).map_err(invalid)?;
        tls.check_files().map_err(|reason| MysqlError::Tls {
            url: shown.clone(),
            reason,
        })?;
        let opts = Opts::from_url(&normalised).map_err(|e| invalid(e.to_string()))?;
        if opts.db_name().is_none_or(str::is_empty) {
            return Err(invalid("no database named (…/DATABASE)".into()));
        }
        let attributes = HashMap::from([("program_name".to_string(), PROGRAM_NAME.to_string())]);
        let plain: Opts = OptsBuilder::from_opts(opts)
            // Stay on TCP, as to a remote server (no switch to the socket).
            .prefer_socket(false)
            .tcp_nodelay(true)
            .tcp_keepalive(Some(Duration::from_secs(1)))
            .connect_attributes(attributes)
            .ssl_opts(None)
            .into();
        let opts = OptsBuilder::from_opts(plain.clone())
            .ssl_opts(tls.ssl_opts())
            .into();
        Ok(MysqlConnector {
            opts,
            plain,
            tls,
            plain_only: Arc::default(),
            shown,
        })
    }

    /// The TLS settings connections are made with.
    pub fn tls(&self) -> &MysqlTls {
        &self.tls
    }

    /// The same connector with mysql_async's own TLS options (yours: its
    /// roots, client identity, checks) on every connection; no fall back
    /// to plain text, whatever the server offers.
    pub fn with_ssl_opts(mut self, opts: mysql_async::SslOpts) -> Self {
        self.opts = OptsBuilder::from_opts(self.plain.clone())
            .ssl_opts(Some(opts))
            .into();
        self.tls = MysqlTls {
            mode: SslMode::Required,
            ..MysqlTls::default()
        };
        self.plain_only = Arc::default();
        self
    }

    /// The same connector with `tls`'s settings (the files are read at
    /// each connection: check them first with the URL, or expect a
    /// [`MysqlError::Tls`] then).
    pub fn with_tls(mut self, tls: MysqlTls) -> Self {
        self.opts = OptsBuilder::from_opts(self.plain.clone())
            .ssl_opts(tls.ssl_opts())
            .into();
        self.tls = tls;
        self.plain_only = Arc::default();
        self
    }

    /// Opens a connection with the URL's TLS; under `PREFERRED`, in plain
    /// text when the server offers no TLS (remembered). Under `REQUIRED`
    /// or stronger a server without TLS is refused, never fallen back
    /// from.
    async fn open(&self) -> Result<Conn, mysql_async::Error> {
        let preferred = self.tls.mode == SslMode::Preferred;
        if preferred && self.plain_only.load(Ordering::Relaxed) {
            return Conn::new(self.plain.clone()).await;
        }
        match Conn::new(self.opts.clone()).await {
            Err(mysql_async::Error::Driver(DriverError::NoClientSslFlagFromServer))
                if preferred =>
            {
                self.plain_only.store(true, Ordering::Relaxed);
                Conn::new(self.plain.clone()).await
            }
            other => other,
        }
    }

    /// The URL, its password hidden.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// The database the URL names (checked non-empty by [`Self::new`]).
    pub(crate) fn database(&self) -> &str {
        self.opts.db_name().unwrap_or_default()
    }

    /// A plain connection, as the driver's are made (TCP, named, its
    /// statements bounded on the server after 10 s): for administrative
    /// statements and your own fenced writes.
    pub async fn connect_client(&self) -> Result<Conn, MysqlError> {
        self.connect(Duration::from_secs(10)).await
    }

    /// A new connection whose statements the server itself stops after
    /// about `timeout` (lock waits: `innodb_lock_wait_timeout`, whole
    /// seconds; MariaDB's `max_statement_time`; MySQL's
    /// `max_execution_time` for its reads). The driver's own cut at the
    /// request timeout comes first; these end what it leaves behind.
    pub(crate) async fn connect(&self, timeout: Duration) -> Result<Conn, MysqlError> {
        let mut conn = self
            .open()
            .await
            .map_err(|e| MysqlError::from_connect(&e))?;
        let seconds = timeout.as_secs_f64();
        let settings = [
            format!(
                "SET SESSION innodb_lock_wait_timeout = {}",
                seconds.ceil().max(1.0)
            ),
            format!("SET SESSION max_statement_time = {seconds:.3}"),
            format!(
                "SET SESSION max_execution_time = {}",
                timeout.as_millis().max(1)
            ),
        ];
        for setting in settings {
            match conn.query_drop(&setting).await {
                Ok(()) => {}
                // ER_UNKNOWN_SYSTEM_VARIABLE: the other server's setting.
                Err(mysql_async::Error::Server(e)) if e.code == 1193 => {}
                Err(e) => return Err(MysqlError::from_connect(&e)),
            }
        }
        Ok(conn)
    }

    /// Kills connection `id` on the server (its statement stops, its
    /// transaction rolls back), from a connection of its own; errors are
    /// only logged (the server may be unreachable).
    pub(crate) async fn kill(&self, id: u32) {
        let outcome = async {
            let mut conn = self.open().await?;
            let killed = conn.query_drop(format!("KILL {id}")).await;
            let _ = conn.disconnect().await;
            killed
        }
        .await;
        match outcome {
            Ok(()) => tracing::debug!(id, "picolease: killed the abandoned connection"),
            // ER_NO_SUCH_THREAD: it had gone already.
            Err(mysql_async::Error::Server(e)) if e.code == 1094 => {}
            Err(e) => {
                tracing::warn!(id, error = %e, "picolease: could not kill the abandoned connection")
            }
        }
    }
}
