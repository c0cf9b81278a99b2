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

use super::error::PgError;
use crate::redact_url;

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
/// both, without TLS; with TLS, implement this trait on your own type and
/// build the listening connection with [`Listener::new`].
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
    /// server requires TLS.
    fn cancel(&self, token: CancelToken) -> BoxFuture<Result<(), tokio_postgres::Error>> {
        Box::pin(async move { token.cancel_query(NoTls).await })
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

/// A connector for a `postgres://` URL or `key=value` string, without TLS.
///
/// It spawns each connection on the current tokio runtime, and provides
/// the dedicated `LISTEN` connection, so release notifications work out of
/// the box. Its connections are named `application_name = 'picolease'`
/// unless the URL names them. Unless the URL says otherwise it sets a connect timeout of 5 s
/// and TCP keepalives after 30 s idle, so a dead peer is noticed by the
/// operating system too.
#[derive(Clone)]
pub struct PgConnector {
    config: tokio_postgres::Config,
}

impl PgConnector {
    /// Parses `url`; a malformed URL is [`PgError::InvalidUrl`] (with the
    /// password removed from the message).
    pub fn new(url: &str) -> Result<Self, PgError> {
        let mut config =
            tokio_postgres::Config::from_str(url).map_err(|e| PgError::InvalidUrl {
                url: redact_url(url),
                reason: e.to_string(),
            })?;
        if config.get_application_name().is_none() {
            // Named for `pg_stat_activity`, unless the URL names them.
            config.application_name(super::link::APPLICATION_NAME);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        config.keepalives(true);
        if !url.contains("keepalives_idle") {
            // The listening connection only reads: without keepalives a
            // silently dropped peer would go unnoticed (and notifications
            // with it) for tokio-postgres's default of two hours.
            config.keepalives_idle(Duration::from_secs(30));
        }
        Ok(PgConnector { config })
    }

    /// A connector for an already built configuration.
    pub fn from_config(config: tokio_postgres::Config) -> Self {
        PgConnector { config }
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

impl std::fmt::Debug for PgConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // tokio_postgres::Config's Debug already hides the password.
        f.debug_struct("PgConnector")
            .field("config", &self.config)
            .finish()
    }
}

impl Connect for PgConnector {
    fn connect(&self) -> BoxFuture<Result<Client, tokio_postgres::Error>> {
        let config = self.config.clone();
        Box::pin(async move {
            let (client, connection) = config.connect(NoTls).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "picolease: PostgreSQL connection ended");
                }
            });
            Ok(client)
        })
    }

    fn connect_listener(&self) -> Option<BoxFuture<Result<Listener, tokio_postgres::Error>>> {
        let config = self.config.clone();
        Some(Box::pin(async move {
            let (client, connection) = config.connect(NoTls).await?;
            Ok(Listener::new(client, connection))
        }))
    }
}
