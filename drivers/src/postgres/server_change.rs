//! Reading, on connecting, the PostgreSQL server's incarnation for
//! `server/server_change.rs` to notice a restart or a failover, in the
//! round trip that sets the session's server-side keepalives.

use picolease_core::sql::{Statements, POSTGRES_SESSION_KEEPALIVES};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::server::server_change::ServerWatch;

/// The PostgreSQL side of the shared [`crate::server::server_change::ServerWatch`].
pub(crate) struct PgServerWatch {
    watch: ServerWatch,
}

impl PgServerWatch {
    /// Registers `picolease_server_changes_total{table}` at zero.
    pub(crate) fn new(statements: &Statements) -> Self {
        PgServerWatch {
            watch: ServerWatch::new(statements),
        }
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
        if let Some(now) = now {
            self.watch.record(statements, now);
        }
    }
}
