//! Noticing, on connecting, that the PostgreSQL server changed: a restart
//! or a failover gives it a new incarnation (DESIGN §3 "Failover"), after
//! which every lease row written before is held by nobody for a ttl. The
//! statements handle that by themselves; this only tells the operator,
//! with a warning and the counter `picolease_server_changes_total`.

use std::sync::Mutex;

use picolease_core::sql::{Statements, POSTGRES_SESSION_KEEPALIVES};
use tokio_postgres::{Client, SimpleQueryMessage};

/// The incarnation of the server the last connection reached.
pub(crate) struct ServerWatch {
    last: Mutex<Option<String>>,
    #[cfg(feature = "metrics")]
    changes: metrics::Counter,
}

impl ServerWatch {
    /// Registers `picolease_server_changes_total{table}` at zero.
    pub(crate) fn new(statements: &Statements) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = statements;
        let watch = ServerWatch {
            last: Mutex::new(None),
            #[cfg(feature = "metrics")]
            changes: metrics::counter!(
                "picolease_server_changes_total",
                "table" => statements.table().to_string()
            ),
        };
        #[cfg(feature = "metrics")]
        watch.changes.increment(0);
        watch
    }

    /// Reads the incarnation of the server `client` reached (one simple
    /// query, fit for a transaction pooler) and counts a change from the
    /// last connection's. On a direct connection (`pooled` false) the
    /// same round trip sets the session's server-side keepalives
    /// ([`POSTGRES_SESSION_KEEPALIVES`]); through a pooler the server
    /// connection is not the session's to configure. A failure is only
    /// logged: the statements check the incarnation themselves.
    pub(crate) async fn observe(&self, client: &Client, statements: &Statements, pooled: bool) {
        let Some(select) = statements.server_incarnation() else {
            return;
        };
        let sql = if pooled {
            select
        } else {
            format!("{POSTGRES_SESSION_KEEPALIVES}; {select}")
        };
        let now = match client.simple_query(&sql).await {
            Ok(messages) => messages.into_iter().find_map(|m| match m {
                SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
                _ => None,
            }),
            Err(e) => {
                tracing::debug!(error = %e, "picolease: could not read the server's incarnation");
                None
            }
        };
        let Some(now) = now else { return };
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_ref().is_some_and(|last| *last != now) {
            tracing::warn!(
                table = %statements.table(),
                "picolease: the database server changed (a restart or a failover): \
                 each lease row written before it is nobody's for one ttl, its epoch \
                 jumped (DESIGN §3 \"Failover\")"
            );
            #[cfg(feature = "metrics")]
            self.changes.increment(1);
        }
        *last = Some(now);
    }
}
