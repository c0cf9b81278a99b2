//! How the driver gets its connections: the user's connector (so TLS,
//! poolers and credentials stay with the application), and the ready-made
//! one for a plain `postgres://` URL.

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::{AsyncMessage, CancelToken, Client, Connection, NoTls};

use super::tls::{PgTls, SslMode};
use super::tls_connect::PgTlsConnector;

use super::error::PgError;
use super::own_params::own_params;
use super::pooler::Pooler;
use crate::redact_url;

/// The `application_name` of [`PgConnector`]'s connections unless the URL
/// names one, so a DBA can find them in `pg_stat_activity`.
const APPLICATION_NAME: &str = "picolease";

/// A boxed, sendable future: what connector methods return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A connection whose asynchronous messages (notifications) the driver
/// reads itself: the client to send `LISTEN` on, and the messages of its
/// connection. Build one with [`Listener::new`] from what
/// `tokio_postgres::Config::connect` returned.
pub struct Listener {
    pub(crate) client: Client,
    pub(crate) messages: BoxStream<'static, Result<AsyncMessage, tokio_postgres::Error>>,
}

impl Listener {
    /// Wraps a freshly connected client and its connection. Do **not**
    /// spawn the connection yourself: the driver drives it, because
    /// tokio-postgres hands notifications only to whoever polls the
    /// connection.
    pub fn new<S, T>(client: Client, mut connection: Connection<S, T>) -> Self
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx)).boxed();
        Listener { client, messages }
    }

    /// The client and the connection's messages, for a caller that reads
    /// notifications itself (`picolease bench` does, behind a pooler
    /// through the direct notice connection).
    #[allow(clippy::type_complexity)]
    pub fn into_parts(
        self,
    ) -> (
        Client,
        BoxStream<'static, Result<AsyncMessage, tokio_postgres::Error>>,
    ) {
        (self.client, self.messages)
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

/// Where the driver's connections come from.
///
/// [`Connect::connect`] returns a connected client whose connection future
/// the connector has already spawned. The driver calls it again whenever the
/// connection breaks or a statement times out (a timed-out connection is
/// suspect: a stalled socket would block every later statement).
///
/// Any `Fn() -> impl Future<Output = Result<Client, tokio_postgres::Error>>`
/// is a connector. Such a closure cannot give the driver a connection it
/// drives itself, so it gets no release notifications (followers learn of a
/// release on their next poll, within one interval). [`PgConnector`] does
/// both, with TLS as the URL asks; with a TLS configuration of your own,
/// implement this trait on your own type, build the listening connection
/// with [`Listener::new`] and cancel with your connector (or pass
/// [`PgTlsConnector`](super::PgTlsConnector) to tokio-postgres yourself).
pub trait Connect: Send + Sync + 'static {
    /// A new connected client (its connection future already spawned).
    fn connect(&self) -> BoxFuture<Result<Client, tokio_postgres::Error>>;

    /// A new connection for `LISTEN`, whose messages the driver reads
    /// itself; `None` (the default) when this connector cannot provide one.
    fn connect_listener(&self) -> Option<BoxFuture<Result<Listener, tokio_postgres::Error>>> {
        None
    }

    /// Asks the server to cancel whatever runs on the connection `token`
    /// came from. The default connects without TLS; override it when the
    /// server requires TLS ([`PgConnector`] does).
    fn cancel(&self, token: CancelToken) -> BoxFuture<Result<(), tokio_postgres::Error>> {
        Box::pin(async move { token.cancel_query(NoTls).await })
    }

    /// How the connections reach the server; anything but
    /// [`Pooler::None`] makes the driver send every statement unnamed.
    /// The default is [`Pooler::Unannounced`]; a connector that knows no
    /// transaction pooler is in the way says [`Pooler::None`], one for a
    /// transaction pooler says [`Pooler::Transaction`] and its
    /// [`Connect::connect_listener`] should connect directly (or return
    /// `None`).
    fn pooler(&self) -> Pooler {
        Pooler::Unannounced
    }
}

impl<F, Fut> Connect for F
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Client, tokio_postgres::Error>> + Send + 'static,
{
    fn connect(&self) -> BoxFuture<Result<Client, tokio_postgres::Error>> {
        Box::pin(self())
    }
}

/// A connector for a `postgres://` URL or `key=value` string, over TLS
/// as libpq would connect with the same string ([`PgTls`]: `sslmode`,
/// `sslrootcert`, `sslcert`, `sslkey`, or `PGSSLMODE`, `PGSSLROOTCERT`,
/// `PGSSLCERT`, `PGSSLKEY` where it is silent; `PGPASSWORD` when it names
/// no password), on every connection it opens: statements, `LISTEN`,
/// cancel requests.
///
/// It spawns each connection on the current tokio runtime, and provides
/// the dedicated `LISTEN` connection, so release notifications work out of
/// the box. Its connections are named `application_name = 'picolease'`
/// unless the URL names them. Unless the URL says otherwise it sets a
/// connect timeout of 5 s, and TCP keepalives (after 5 s idle, every
/// second, 3 probes) and a TCP user timeout of 8 s, so that the operating
/// system gives up on a silently dropped peer within 8 s.
///
/// Two parameters of the URL are picolease's own, taken out before
/// tokio-postgres reads it: `picolease_pooler=transaction` says a
/// transaction pooler (PgBouncer in transaction mode) is in the way
/// ([`Pooler::Transaction`]: no named prepared statements, no `LISTEN`
/// through it), `picolease_pooler=none` promises none is (named prepared
/// statements; without either, every statement is unnamed:
/// [`Pooler::Unannounced`]), and `picolease_notify_url=…` (a percent-encoded
/// `postgres://` URL) names a direct connection for release notices.
/// [`PgConnector::with_pooler`] and [`PgConnector::with_notify_url`] set the
/// same.
#[derive(Clone)]
pub struct PgConnector {
    config: tokio_postgres::Config,
    /// The TLS settings, and the connector made from them.
    tls: PgTls,
    connector: PgTlsConnector,
    pooler: Pooler,
    /// Where release notices are listened for behind a transaction
    /// pooler (without one, nowhere: followers poll), with its own TLS.
    notify: Option<Box<PgConnector>>,
}

impl PgConnector {
    /// Parses `url`; a malformed URL or TLS value is
    /// [`PgError::InvalidUrl`] (with the password removed from the
    /// message), a TLS file that cannot be read [`PgError::Tls`].
    pub fn new(url: &str) -> Result<Self, PgError> {
        Self::with_env(url, |var| std::env::var(var).ok())
    }

    /// [`PgConnector::new`] reading libpq's environment through `env`.
    fn with_env(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<Self, PgError> {
        let own = own_params(url)?;
        let tls = PgTls::from_params(&own.tls, &env).map_err(|reason| PgError::InvalidUrl {
            url: redact_url(url),
            reason,
        })?;
        let mut config = with_defaults(parse(&own.rest, url)?, url);
        if config.get_password().is_none() {
            if let Some(password) = env("PGPASSWORD") {
                config.password(password);
            }
        }
        let mut connector = PgConnector::from_config(config)
            .with_tls(tls)
            .map_err(|reason| PgError::Tls {
                url: redact_url(url),
                reason,
            })?
            .with_pooler(own.pooler);
        if let Some(notify_url) = own.notify_url {
            connector = connector.with_notify_url(&notify_url)?;
        }
        Ok(connector)
    }

    /// The same connector for connections through `pooler`.
    pub fn with_pooler(mut self, pooler: Pooler) -> Self {
        self.pooler = pooler;
        self
    }

    /// The same connector, listening for release notices on a direct
    /// connection to `url` when a transaction pooler is in the way (the
    /// pooler cannot carry `LISTEN`). Without a transaction pooler the
    /// notices come through the connector's own URL and this is unused.
    pub fn with_notify_url(mut self, url: &str) -> Result<Self, PgError> {
        self.notify = Some(Box::new(PgConnector::new(url)?));
        Ok(self)
    }

    /// A connector for an already built configuration, as it is: TLS as
    /// its `ssl_mode` says (`prefer` or `require`: encrypted, the
    /// certificate not checked); see [`PgConnector::with_tls`] for checks.
    pub fn from_config(config: tokio_postgres::Config) -> Self {
        let tls = PgTls {
            mode: match config.get_ssl_mode() {
                tokio_postgres::config::SslMode::Disable => SslMode::Disable,
                tokio_postgres::config::SslMode::Require => SslMode::Require,
                _ => SslMode::Prefer,
            },
            ..PgTls::default()
        };
        let connector = tls
            .connector()
            .unwrap_or_else(|_| unreachable!("no file is read without checks"));
        PgConnector {
            config,
            tls,
            connector,
            pooler: Pooler::Unannounced,
            notify: None,
        }
    }

    /// The same connector with `tls`'s settings on every connection (its
    /// files read now: an unreadable one is an error naming it).
    pub fn with_tls(mut self, tls: PgTls) -> Result<Self, String> {
        self.connector = tls.connector()?;
        self.config.ssl_mode(tls.tokio_mode());
        self.tls = tls;
        Ok(self)
    }

    /// The same connector with your own TLS connector on every connection
    /// (statements, `LISTEN`, cancel requests), under `sslmode`
    /// `mode`; [`PgConnector::tls`] then reports `mode` alone.
    pub fn with_tls_connector(mut self, mode: SslMode, connector: PgTlsConnector) -> Self {
        self.tls = PgTls {
            mode,
            ..PgTls::default()
        };
        self.config.ssl_mode(self.tls.tokio_mode());
        self.connector = connector;
        self
    }

    /// The TLS settings connections are made with.
    pub fn tls(&self) -> &PgTls {
        &self.tls
    }

    /// The tokio-postgres TLS connector of [`PgConnector::tls`], for
    /// connections of your own made the same way.
    pub fn tls_connector(&self) -> PgTlsConnector {
        self.connector.clone()
    }

    /// The configuration connections are made with.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// Connects once and spawns the connection: a convenience for admin
    /// commands (`init`, `status`, `force_release`). Errors are sorted like
    /// the driver's: bad credentials are [`PgError::Login`], anything else
    /// [`PgError::Connect`].
    pub async fn connect_client(&self) -> Result<Client, PgError> {
        self.connect().await.map_err(|e| PgError::from_connect(&e))
    }
}

/// `config` with picolease's defaults where `url` is silent: the
/// connections named for `pg_stat_activity`, a connect timeout of 5 s,
/// and a dead peer found within 8 s ([`DEAD_PEER`]): TCP keepalives after
/// 5 s idle, then every second, 3 unanswered probes; unacknowledged data
/// for 8 s (`TCP_USER_TIMEOUT`).
fn with_defaults(mut config: tokio_postgres::Config, url: &str) -> tokio_postgres::Config {
    if config.get_application_name().is_none() {
        config.application_name(APPLICATION_NAME);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    // A partition that drops packets silently (no RST) leaves a
    // connection open on both ends. The statement connection finds out at
    // its request timeout; the listening connection only reads, and
    // without keepalives would go on waiting (and notifications with it)
    // for tokio-postgres's default of two hours.
    config.keepalives(true);
    if !url.contains("keepalives_idle") {
        config.keepalives_idle(Duration::from_secs(5));
    }
    if !url.contains("keepalives_interval") {
        config.keepalives_interval(Duration::from_secs(1));
    }
    if !url.contains("keepalives_retries") {
        config.keepalives_retries(3);
    }
    if !url.contains("tcp_user_timeout") {
        config.tcp_user_timeout(DEAD_PEER);
    }
    config
}

/// How long a silent peer takes to be given up on by default: less than
/// the default ttl of 10 s (tools/tests/cli_partition.rs cuts a node off).
pub(crate) const DEAD_PEER: Duration = Duration::from_secs(8);

/// `rest` (a URL without picolease's own parameters) as tokio-postgres
/// reads it; errors name `url`, the URL as given, without its password.
fn parse(rest: &str, url: &str) -> Result<tokio_postgres::Config, PgError> {
    tokio_postgres::Config::from_str(rest).map_err(|e| PgError::InvalidUrl {
        url: redact_url(url),
        reason: e.to_string(),
    })
}

impl std::fmt::Debug for PgConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // tokio_postgres::Config's Debug already hides the password.
        f.debug_struct("PgConnector")
            .field("config", &self.config)
            .field("tls", &self.tls)
            .field("pooler", &self.pooler)
            .field("notify", &self.notify)
            .finish()
    }
}

/// Connects with `config` over `tls` and hands the connection to the
/// caller.
async fn connect_listening(
    config: tokio_postgres::Config,
    tls: PgTlsConnector,
) -> Result<Listener, tokio_postgres::Error> {
    let (client, connection) = config.connect(tls).await?;
    Ok(Listener::new(client, connection))
}

impl Connect for PgConnector {
    fn connect(&self) -> BoxFuture<Result<Client, tokio_postgres::Error>> {
        let config = self.config.clone();
        let tls = self.connector.clone();
        Box::pin(async move {
            let (client, connection) = config.connect(tls).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "picolease: PostgreSQL connection ended");
                }
            });
            Ok(client)
        })
    }

    /// Through a transaction pooler, only on the direct notice
    /// connection, if there is one.
    fn connect_listener(&self) -> Option<BoxFuture<Result<Listener, tokio_postgres::Error>>> {
        let direct = match self.pooler {
            Pooler::None | Pooler::Unannounced => self,
            Pooler::Transaction => self.notify.as_deref()?,
        };
        Some(Box::pin(connect_listening(
            direct.config.clone(),
            direct.connector.clone(),
        )))
    }

    /// Over the connections' own TLS: a server that takes TLS only takes
    /// cancel requests over it too.
    fn cancel(&self, token: CancelToken) -> BoxFuture<Result<(), tokio_postgres::Error>> {
        let tls = self.connector.clone();
        Box::pin(async move { token.cancel_query(tls).await })
    }

    fn pooler(&self) -> Pooler {
        self.pooler
    }
}
