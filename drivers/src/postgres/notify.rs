//! Release notifications: a dedicated connection that `LISTEN`s on the
//! table's release channel and tells the driver loop when this lease was
//! released, so a follower tries at once instead of at its next poll.
//!
//! A dedicated connection, because tokio-postgres hands notifications only
//! to whoever polls the `Connection`, and the statement connection's is the
//! application's (its connector spawned it). Polling stays the fallback: a
//! notification lost while this connection was down costs at most one
//! interval.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use picolease_core::sql::Statements;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::connect::Connect;

/// Waits between attempts to (re)establish the listening connection.
const RETRY: Duration = Duration::from_millis(500);

/// Listens until the returned handle is aborted or `notices` is closed,
/// sending one `()` per release of `lease` (coalesced: the driver only
/// needs to know that at least one arrived).
pub(crate) fn spawn_listener(
    connector: Arc<dyn Connect>,
    statements: &Statements,
    lease: Arc<str>,
    notices: mpsc::Sender<()>,
) -> Option<tokio::task::JoinHandle<()>> {
    let listen = statements.listen()?;
    let channel = statements.table().release_channel();
    let mut first = Some(connector.connect_listener()?);
    Some(tokio::spawn(async move {
        loop {
            if notices.is_closed() {
                return;
            }
            let Some(connecting) = first.take().or_else(|| connector.connect_listener()) else {
                return;
            };
            match connecting.await {
                Ok(mut listener) => {
                    let client = listener.client;
                    let mut listening = std::pin::pin!(client.batch_execute(&listen));
                    let mut subscribed = false;
                    loop {
                        tokio::select! {
                            result = &mut listening, if !subscribed => match result {
                                Ok(()) => {
                                    subscribed = true;
                                    tracing::debug!(%channel, "picolease: listening for releases");
                                }
                                Err(e) => {
                                    tracing::warn!(error = %e, %channel, "picolease: LISTEN failed");
                                    break;
                                }
                            },
                            message = listener.messages.next() => match message {
                                Some(Ok(AsyncMessage::Notification(n))) if n.payload() == &*lease => {
                                    // Full means a notice is already pending: enough.
                                    let _ = notices.try_send(());
                                }
                                Some(Ok(_)) => {}
                                Some(Err(e)) => {
                                    tracing::debug!(error = %e, "picolease: listening connection failed");
                                    break;
                                }
                                None => break,
                            },
                            _ = notices.closed() => return,
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "picolease: could not connect to listen"),
            }
            tokio::time::sleep(RETRY).await;
        }
    }))
}
