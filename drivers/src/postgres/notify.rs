//! Release notifications: a dedicated connection that `LISTEN`s on the
//! table's release channel and tells a driver loop, a lone lease's or a
//! lease set's (the one listener both use), when a row was released, so a
//! follower tries at once instead of at its next poll.
//!
//! A dedicated connection, because tokio-postgres hands notifications only
//! to whoever polls the `Connection`, and the statement connection's is the
//! application's (its connector spawned it). Polling stays the fallback: notifications sent while this connection was
//! down are lost, so after listening again the listener says
//! `Notice::Resubscribed` and the driver looks at once.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use picolease_core::sql::Statements;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::connect::Connect;
use crate::server::Listen;
use crate::server::Notice;

/// Waits between attempts to (re)establish the listening connection.
const RETRY: Duration = Duration::from_millis(500);

/// Listens until the returned handle is aborted or `notices` is closed.
/// `None` when the dialect has no `LISTEN` or the connector cannot provide
/// a listening connection.
pub(crate) fn spawn_listener(
    connector: Arc<dyn Connect>,
    statements: &Statements,
    interest: Listen,
    notices: mpsc::Sender<Notice>,
) -> Option<tokio::task::JoinHandle<()>> {
    let listen = statements.listen()?;
    let channel = statements.table().release_channel();
    let mut first = Some(connector.connect_listener()?);
    Some(tokio::spawn(async move {
        let mut subscribed_before = false;
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
                                    if std::mem::replace(&mut subscribed_before, true)
                                        && !tell(&interest, &notices, Notice::Resubscribed).await
                                    {
                                        return;
                                    }
                                }
                                Err(e) => {
                                    tracing::warn!(error = %e, %channel, "picolease: LISTEN failed");
                                    break;
                                }
                            },
                            message = listener.messages.next() => match message {
                                Some(Ok(AsyncMessage::Notification(n))) => {
                                    let wanted = match &interest {
                                        Listen::Lease(lease) => n.payload() == &**lease,
                                        Listen::Every => true,
                                    };
                                    if wanted
                                        && !tell(&interest, &notices, Notice::Released(n.payload().to_string())).await
                                    {
                                        return;
                                    }
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

/// Hands `notice` to the driver as `interest` wants it; false once the
/// driver is gone.
async fn tell(interest: &Listen, notices: &mpsc::Sender<Notice>, notice: Notice) -> bool {
    match interest {
        // Full means a notice is already pending: enough.
        Listen::Lease(_) => !matches!(
            notices.try_send(notice),
            Err(mpsc::error::TrySendError::Closed(_))
        ),
        Listen::Every => notices.send(notice).await.is_ok(),
    }
}
