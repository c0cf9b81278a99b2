//! Noticing, on connecting, that the database server changed: a restart
//! or a failover gives it a new incarnation (DESIGN §3 "Failover"), after
//! which every lease row written before is held by nobody for a ttl. The
//! statements handle that by themselves; this only tells the operator,
//! with a warning and the counter `picolease_server_changes_total`. Each
//! driver reads the incarnation its own way (`Statements::server_incarnation`)
//! and hands the value here.

use std::sync::Mutex;

use picolease_core::sql::Statements;

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

    /// Records the incarnation a new connection reached, warning and
    /// counting when it differs from the last connection's. `true` when
    /// it changed.
    pub(crate) fn record(&self, statements: &Statements, now: String) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let changed = last.as_ref().is_some_and(|last| *last != now);
        if changed {
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
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picolease_core::sql::Dialect;
    use picolease_core::TableName;

    #[test]
    fn only_a_different_incarnation_after_a_first_is_a_change() {
        let statements = Statements::new(Dialect::Mysql, &TableName::new("t").unwrap());
        let watch = ServerWatch::new(&statements);
        assert!(
            !watch.record(&statements, "1".into()),
            "the first is no change"
        );
        assert!(!watch.record(&statements, "1".into()), "the same server");
        assert!(watch.record(&statements, "2".into()), "a promoted replica");
        assert!(!watch.record(&statements, "2".into()));
    }
}
