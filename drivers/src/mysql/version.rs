//! What the server a connection reached can run, by its version: a lease
//! set renewing by liveness (DESIGN §9 "Renewal by liveness") needs MariaDB.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::MysqlError;

/// Refuses a server that is not MariaDB, for a set renewing by liveness:
/// MySQL refuses a subquery on the table an `UPDATE` writes (error 1093;
/// MySQL 8.0 Reference Manual, "Restrictions on Subqueries"), which the
/// set's statements by liveness have (`sql/liveness_mysql.rs`), where
/// MariaDB runs them. A fatal error before the first statement, rather
/// than every acquire failing.
pub(super) async fn refuse_mysql_proper(conn: &mut Conn) -> Result<(), MysqlError> {
    let version = conn
        .query_first::<String, _>("SELECT VERSION()")
        .await
        .map_err(|e| MysqlError::from_statement("the server's version", "", &e))?
        .unwrap_or_default();
    runs_sets_by_liveness(&version)
}

/// Whether the server `version` (`SELECT VERSION()`) runs a set's
/// statements by liveness: MariaDB's say so in their version.
fn runs_sets_by_liveness(version: &str) -> Result<(), MysqlError> {
    if version.contains("MariaDB") {
        return Ok(());
    }
    Err(MysqlError::UnsupportedServer {
        reason: "a lease set renewing by liveness (the default) needs MariaDB (10.6 or \
                 later): MySQL refuses a subquery on the table an UPDATE writes (error \
                 1093), which its statements have; renew every row instead \
                 (`SetConfig::by_liveness = false`, `run --every-row`)"
            .into(),
        version: version.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MariaDB runs a set's statements by liveness; MySQL (error 1093) is
    /// refused before the first statement, fatally, naming its version.
    #[test]
    fn only_mariadb_runs_sets_by_liveness() {
        assert!(runs_sets_by_liveness("10.11.6-MariaDB-0+deb12u1").is_ok());
        assert!(runs_sets_by_liveness("11.4.2-MariaDB-log").is_ok());
        for version in ["8.0.36", "8.4.0-0ubuntu0.24.04.1", "5.7.44-log", ""] {
            let error = runs_sets_by_liveness(version).expect_err(version);
            assert_eq!(error.failure(), picolease_core::Failure::Fatal, "{version}");
            let text = error.to_string();
            assert!(
                text.starts_with(&format!("server version {version:?}: ")),
                "{text}"
            );
            assert!(
                text.contains("error 1093")
                    && text.contains("MariaDB")
                    && text.contains("--every-row"),
                "{text}"
            );
        }
    }
}
