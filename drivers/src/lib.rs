//! # picolease
//!
//! Leader election for background work through a lease row in the SQL
//! database a service already uses. One node holds the lease; the work that
//! would be wasteful to run everywhere runs only there; when the holder
//! crashes, stalls or shuts down, another node takes over within a bound.
//!
//! This crate holds the drivers; the election itself is the deterministic
//! `LeaseState` of `picolease-core`, whose user-facing types are
//! re-exported here (a driver author uses `picolease-core` directly).
//!
//! - [`sqlite`] (feature `sqlite`): a blocking driver on rusqlite.
//! - [`postgres`] (feature `postgres`): an async driver on tokio-postgres.
//!
//! Both drivers speak one vocabulary: `builder(config, database)`,
//! `while_leader(work)`, `start()`; then `leadership()` (the current
//! state), `watch()` (a `tokio::sync::watch` receiver), `subscribe()`
//! (every [`Transition`], in order, bounded), `fence()` (the current
//! term's fence for your own writes), `shutdown()` and `abort()`. Gated
//! work gets a `LeaderContext` with the term's epoch, its fence and its
//! cancellation.
//!
//! For operations: every handle offers `snapshot()` (a [`Snapshot`]: role,
//! epoch, holder last seen, last successful statement, loop progress, time
//! to the deadline) to build health and "who leads" endpoints from, and,
//! with feature `metrics` (on by default), every driver records
//! `picolease_*` series through the `metrics` facade for any exporter
//! (names and labels: `drivers/src/metrics.rs`; install the recorder before
//! starting the lease).

#![forbid(unsafe_code)]
// The docs link across the drivers (`sqlite`, `postgres`, `mysql`); with
// one of them left out those links have no target. The build with every
// feature (`.ci/run`'s `cargo doc --all-features`) still fails on any
// broken link; `.ci/features` checks each feature alone for the rest.
#![cfg_attr(
    not(all(
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql",
        feature = "metrics"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

pub use picolease_core::{
    sql, Candidate, Config, ConfigError, Demotion, Epoch, HolderId, Leadership, LeaseName, Rank,
    Role, RowError, SetConfig, TableName, DEFAULT_TABLE,
};

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
#[cfg(feature = "sqlite")]
mod cancellation;
mod clock;
mod health;
mod lock;
mod metrics;
mod publish;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod runner;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod scope;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod set;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod snapshots;
mod subscription;
pub mod supervise;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod url;
mod view;

pub use clock::{boottime, Clock, SystemClock};
pub use publish::RENEW_SAMPLES;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub use snapshots::Snapshots;
pub use subscription::{RecvError, Subscription, Transition, SUBSCRIPTION_CAPACITY};
pub use view::{LeaseView, Snapshot, Term};

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod server;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// A holder id unique to this running process: host name, process id and
/// a random suffix (DESIGN §3: two live processes must never share one,
/// because a holder may take its own row back to recover a lost reply).
pub fn unique_holder_id() -> HolderId {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    HolderId::unique(host.trim(), std::process::id(), random_u64())
}

/// Entropy without a dependency: std's randomly keyed hasher (seeded from
/// the operating system), mixed with the clock and the process id.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// A connection URL with any password hidden, so no message prints it:
/// the userinfo password (`scheme://user:***@host/…`) and any
/// `password=` value (`?password=***`, `host=h password=*** …`), also
/// inside a percent-encoded notice URL (`picolease_notify_url=`).
pub fn redact_url(url: &str) -> String {
    let shown = redact_plain(url);
    let key = "picolease_notify_url=";
    let Some(start) = shown.find(key).map(|at| at + key.len()) else {
        return shown;
    };
    let end = shown[start..]
        .find(['&', ' '])
        .map_or(shown.len(), |i| start + i);
    let inner = redact_encoded(&shown[start..end]);
    format!("{}{inner}{}", &shown[..start], &shown[end..])
}

/// A percent-encoded URL (`postgres%3A%2F%2Fu%3Apw%40h%2Fdb`) with its
/// userinfo password hidden.
fn redact_encoded(value: &str) -> String {
    let upper = value.to_ascii_uppercase();
    let Some(authority) = upper.find("%2F%2F").map(|at| at + 6) else {
        return value.to_string();
    };
    let authority_end = upper[authority..]
        .find("%2F")
        .map_or(upper.len(), |i| authority + i);
    let Some(at) = upper[authority..authority_end].rfind("%40") else {
        return value.to_string();
    };
    match upper[authority..authority + at].find("%3A") {
        Some(colon) => format!(
            "{}***{}",
            &value[..authority + colon + 3],
            &value[authority + at..]
        ),
        None => value.to_string(),
    }
}

fn redact_plain(url: &str) -> String {
    let mut shown = url.to_string();
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        // The userinfo ends at the last '@' before the path.
        let authority_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                shown = format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &rest[..colon],
                    &rest[at..]
                );
            }
        }
    }
    match shown.find("password=") {
        Some(start) => {
            let value = start + "password=".len();
            let end = shown[value..]
                .find(['&', ' '])
                .map_or(shown.len(), |i| value + i);
            format!("{}***{}", &shown[..value], &shown[end..])
        }
        None => shown,
    }
}

/// The README's examples, compiled as doctests so they cannot rot.
#[cfg(all(doctest, feature = "sqlite", feature = "postgres"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact_url("postgres://bob:secret@db:5432/x"),
            "postgres://bob:***@db:5432/x"
        );
        assert_eq!(redact_url("postgres://db/x"), "postgres://db/x");
        assert_eq!(
            redact_url("postgres://h/db?password=pw&x=1"),
            "postgres://h/db?password=***&x=1"
        );
        let kv = redact_url("host=db password=secret user=u");
        assert_eq!(kv, "host=db password=*** user=u");
        // An '@' in the path is not userinfo.
        assert_eq!(redact_url("postgres://h/db@x"), "postgres://h/db@x");
        assert_eq!(
            redact_url("postgres://u:pw@b/db?picolease_notify_url=postgres%3A%2F%2Fu%3Asecret%40db%2Fx&y=1"),
            "postgres://u:***@b/db?picolease_notify_url=postgres%3A%2F%2Fu%3A***%40db%2Fx&y=1"
        );
    }

    #[test]
    fn unique_holder_ids_differ_between_calls() {
        let (a, b) = (unique_holder_id(), unique_holder_id());
        assert_ne!(a, b);
        assert!(a.as_str().contains(&std::process::id().to_string()));
    }
}
