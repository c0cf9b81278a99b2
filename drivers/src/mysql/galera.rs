//! A Galera node's commit stall when the cluster loses a node (DESIGN §3
//! "Failover", docs/operations.md §8): what a ttl must outlast.
//!
//! Losing any node of a Galera cluster stalls every commit on every node
//! until the cluster evicts it: about `evs.suspect_timeout` (5 s by
//! default) and the view change after it. Measured on a private
//! three-node cluster with Galera's defaults: 6.2 s
//! (`tests/tests/mysql_galera.rs`, which checks this estimate against the
//! stall it measures).

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::MysqlError;

/// What follows `evs.suspect_timeout` before the cluster commits again:
/// the view change, measured at 1.2–1.4 s over the 5 s default (6.2 s and
/// 6.4 s of stall), with room for a loaded machine.
pub const EVICTION_OVERHEAD: Duration = Duration::from_millis(2000);

/// On a Galera node (`wsrep_on`), the commit stall a lost node causes as
/// its settings predict: `evs.suspect_timeout` (Galera's default, 5 s,
/// when it cannot be read) plus [`EVICTION_OVERHEAD`]. `None` on a server
/// that is not a Galera node.
pub async fn galera_commit_stall(conn: &mut Conn) -> Result<Option<Duration>, MysqlError> {
    let variables: Vec<(String, String)> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_provider_options')",
        )
        .await
        .map_err(|e| MysqlError::from_statement("read the Galera settings", "-", &e))?;
    let value = |name: &str| {
        variables
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if !value("wsrep_on").is_some_and(|on| on.eq_ignore_ascii_case("ON")) {
        return Ok(None);
    }
    let suspect = value("wsrep_provider_options")
        .and_then(suspect_timeout)
        .unwrap_or(Duration::from_secs(5));
    Ok(Some(suspect + EVICTION_OVERHEAD))
}

/// A Galera node's `evs.suspect_timeout`, read from
/// `wsrep_provider_options` (`…; evs.suspect_timeout = PT5S; …`): `None`
/// when it is not there or not an ISO 8601 duration of seconds.
fn suspect_timeout(provider_options: &str) -> Option<Duration> {
    provider_options.split(';').find_map(|option| {
        let (key, value) = option.split_once('=')?;
        if key.trim() != "evs.suspect_timeout" {
            return None;
        }
        iso_seconds(value.trim())
    })
}

/// `PT5S`, `PT1.5S`, `PT1M`, `PT1M30S` as a duration; anything else
/// `None`.
fn iso_seconds(value: &str) -> Option<Duration> {
    let mut rest = value.strip_prefix("PT")?;
    let mut total = 0.0f64;
    let mut any = false;
    for (unit, seconds) in [('H', 3600.0), ('M', 60.0), ('S', 1.0)] {
        if let Some((number, after)) = rest.split_once(unit) {
            let number: f64 = number.parse().ok()?;
            if !number.is_finite() || number < 0.0 {
                return None;
            }
            total += number * seconds;
            rest = after;
            any = true;
        }
    }
    (any && rest.is_empty()).then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suspect_timeout_is_read_from_the_provider_options() {
        let options = "base_dir = /var/lib/mysql/; evs.inactive_timeout = PT15S; \
                       evs.suspect_timeout = PT5S; gcache.size = 128M";
        assert_eq!(suspect_timeout(options), Some(Duration::from_secs(5)));
        assert_eq!(
            suspect_timeout("evs.suspect_timeout = PT1.5S"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            suspect_timeout("evs.suspect_timeout = PT1M30S"),
            Some(Duration::from_secs(90))
        );
        assert_eq!(suspect_timeout("gcache.size = 128M"), None);
        assert_eq!(suspect_timeout("evs.suspect_timeout = 5s"), None);
        assert_eq!(suspect_timeout("evs.suspect_timeout = PT"), None);
        assert_eq!(suspect_timeout("evs.suspect_timeout = PT-1S"), None);
    }
}
