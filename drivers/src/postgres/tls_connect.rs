//! The tokio-postgres side of picolease's TLS: a `MakeTlsConnect` over
//! tokio-rustls that every PostgreSQL connection is made with
//! (statements, `LISTEN`, cancel requests), from a [`PgTls`]'s rustls
//! configuration or your own.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

#[cfg(doc)]
use super::PgTls;

/// The tokio-postgres connector of a [`PgTls`]: rustls over each socket,
/// the server name being the host connected to. Cheap to clone. Pass it
/// to `tokio_postgres::Config::connect` or `CancelToken::cancel_query` in
/// your own connector to get picolease's checks.
#[derive(Clone)]
pub struct PgTlsConnector {
    /// `None` under `sslmode=disable`.
    config: Option<Arc<ClientConfig>>,
}

impl PgTlsConnector {
    /// `None` under `sslmode=disable`.
    pub(super) fn new(config: Option<Arc<ClientConfig>>) -> Self {
        PgTlsConnector { config }
    }

    /// A connector over your own rustls configuration (your roots, your
    /// verifier, your client certificate), for
    /// [`PgConnector::with_tls_connector`](super::PgConnector::with_tls_connector).
    pub fn from_rustls(config: Arc<ClientConfig>) -> Self {
        PgTlsConnector {
            config: Some(config),
        }
    }
}

impl std::fmt::Debug for PgTlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTlsConnector")
            .field("tls", &self.config.is_some())
            .finish()
    }
}

impl<S> MakeTlsConnect<S> for PgTlsConnector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type TlsConnect = PgTlsConnect;
    type Error = rustls::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<PgTlsConnect, rustls::Error> {
        let name = ServerName::try_from(domain.to_string()).map_err(|_| {
            rustls::Error::General(format!("{domain:?} is not a host name TLS can check"))
        })?;
        Ok(PgTlsConnect {
            config: self.config.clone(),
            name,
        })
    }
}

/// One connection's TLS handshake (see [`PgTlsConnector`]).
pub struct PgTlsConnect {
    config: Option<Arc<ClientConfig>>,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for PgTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<PgTlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let Some(config) = self.config else {
                return Err(io::Error::other("sslmode=disable: no TLS"));
            };
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(self.name, stream)
                .await?;
            Ok(PgTlsStream(Box::new(stream)))
        })
    }
}

/// A TLS session over a connection's socket.
pub struct PgTlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PgTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PgTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for PgTlsStream<S> {
    /// No channel binding: SCRAM then authenticates without `-PLUS`, as
    /// tokio-postgres does with its default `channel_binding=prefer` when
    /// the stream offers none.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
