//! The release wake-up of a lone lease on MySQL/MariaDB (drivers
//! `mysql/wake.rs`), against the real server at 127.0.0.1:3306 (root,
//! database `test`; `PICOLEASE_MYSQL_URL` overrides). These tests FAIL,
//! not skip, when the server is unreachable; each has a table of its own,
//! dropped at the end.
//!
//! Real time, with bounds far from the figures: a clean handover with the
//! wake-up is timed against the interval (the polling it replaces), one
//! without it against the interval plus a margin, and a crash (whose
//! session's end also frees the lock, waking the follower early) must
//! still be taken only at the row's expiry. The figures are printed.
//!
//! `cargo test -p picolease-tests --test integration mysql_wake:: -- --nocapture`

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use picolease::mysql::{wake_lock_name, MysqlConnector, MysqlLease};
use picolease::{Config, Leadership, LeaseName, TableName};

/// Long, so that polling (a uniform wait within one interval) and a
/// wake-up (a few round trips) cannot be confused.
const TTL: Duration = Duration::from_secs(4);
const INTERVAL: Duration = Duration::from_secs(1);

fn url() -> String {
    std::env::var("PICOLEASE_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// A table of this test's own, dropped at the end (passed or failed).
struct Scratch {
    runtime: tokio::runtime::Runtime,
    connector: MysqlConnector,
    table: TableName,
}

impl Scratch {
    fn new(test: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let connector = MysqlConnector::new(&url()).expect("a MySQL URL");
        let table =
            TableName::new(&format!("pl_wake_{test}_{}", std::process::id())).expect("a table");
        let scratch = Scratch {
            runtime,
            connector,
            table,
        };
        // Fails the test, never skips it, when the server is unreachable.
        scratch
            .runtime
            .block_on(picolease::mysql::init(&scratch.connector, &scratch.table))
            .unwrap_or_else(|e| {
                panic!(
                    "MariaDB must be reachable at {} (these tests never skip): {e}",
                    url()
                )
            });
        scratch
    }

    fn start(&self, holder: &str, wake_up: bool) -> MysqlLease {
        let mut config = Config::with_ttl(
            LeaseName::new("reaper").unwrap(),
            picolease::HolderId::new(holder).unwrap(),
            TTL,
        );
        config.interval = INTERVAL;
        let _entered = self.runtime.enter();
        MysqlLease::builder(config, self.connector.clone())
            .table(self.table.clone())
            .wake_up(wake_up)
            .start()
            .expect("a valid configuration")
    }

    /// Waits (up to `within`) until `lease` satisfies `done`.
    fn wait(
        &self,
        lease: &MysqlLease,
        within: Duration,
        what: &str,
        done: impl FnMut(&Leadership) -> bool,
    ) -> Leadership {
        lease.wait_for(within, done).unwrap_or_else(|| {
            panic!(
                "{what}: not within {within:?}; last {:?}",
                lease.leadership()
            )
        })
    }

    /// The session holding the lease's wake-up lock, if any.
    fn wake_lock_holder(&self) -> Option<u64> {
        let name = wake_lock_name("test", self.table.table(), "reaper");
        self.runtime.block_on(async {
            let mut conn = self.connector.connect_client().await.expect("a connection");
            let holder: Option<Option<u64>> = conn
                .exec_first("SELECT IS_USED_LOCK(?)", (name,))
                .await
                .expect("IS_USED_LOCK");
            let _ = conn.disconnect().await;
            holder.flatten()
        })
    }

    /// `rounds` clean handovers between two contenders: from the leader's
    /// `shutdown` call to its successor's leadership, each.
    fn handovers(&self, rounds: usize, wake_up: bool) -> Vec<Duration> {
        let mut leader = self.start("h0", wake_up);
        self.wait(&leader, TTL * 3, "the first leads", Leadership::is_leader);
        let mut took = Vec::new();
        for round in 1..=rounds {
            let next = self.start(&format!("h{round}"), wake_up);
            self.wait(&next, TTL, "the next sees the leader", |l| {
                l.holder.is_some() && !l.is_leader()
            });
            // The successor is parked: waiting on the lock, or polling.
            std::thread::sleep(INTERVAL + Duration::from_millis(200));
            let before = leader.leadership();
            let at = Instant::now();
            self.runtime
                .block_on(leader.shutdown())
                .expect("a clean shutdown");
            let now = self.wait(&next, TTL * 2, "the successor leads", Leadership::is_leader);
            took.push(at.elapsed());
            assert!(now.epoch > before.epoch, "{now:?} after {before:?}");
            leader = next;
        }
        self.runtime
            .block_on(leader.shutdown())
            .expect("a clean shutdown");
        took
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let table = self.table.to_string();
        let connector = self.connector.clone();
        self.runtime.block_on(async move {
            if let Ok(mut conn) = connector.connect_client().await {
                let _ = conn
                    .query_drop(format!("DROP TABLE IF EXISTS {table}"))
                    .await;
                let _ = conn.disconnect().await;
            }
        });
    }
}

fn summary(took: &[Duration]) -> (Duration, Duration) {
    let mut sorted = took.to_vec();
    sorted.sort();
    (sorted[sorted.len() / 2], sorted[sorted.len() - 1])
}

#[test]
fn a_clean_handover_wakes_the_follower_at_once_and_without_the_wake_up_it_polls() {
    let scratch = Scratch::new("handover");
    let woken = scratch.handovers(8, true);
    let (p50, max) = summary(&woken);
    eprintln!(
        "with the wake-up: p50 {p50:?}, max {max:?} over {} handovers (interval {INTERVAL:?})",
        woken.len()
    );
    // Polling alone would spread these over the whole interval.
    assert!(p50 < Duration::from_millis(100), "p50 {p50:?}: {woken:?}");
    assert!(max < INTERVAL / 2, "max {max:?}: {woken:?}");

    let polled = scratch.handovers(3, false);
    let (p50, max) = summary(&polled);
    eprintln!(
        "without it: p50 {p50:?}, max {max:?} over {} handovers",
        polled.len()
    );
    assert!(
        max < INTERVAL + Duration::from_millis(300),
        "max {max:?}: {polled:?}"
    );
    assert_eq!(
        scratch.wake_lock_holder(),
        None,
        "no lock outlives its contenders"
    );
}

#[test]
fn a_crashed_leaders_lock_wakes_the_follower_but_the_lease_is_taken_only_at_its_expiry() {
    let scratch = Scratch::new("crash");
    let a = scratch.start("a", true);
    let first = scratch.wait(&a, TTL * 3, "a leads", Leadership::is_leader);
    assert!(
        scratch.wake_lock_holder().is_some(),
        "the leader holds its wake-up lock"
    );
    let b = scratch.start("b", true);
    scratch.wait(&b, TTL, "b sees a", |l| {
        l.holder.is_some() && !l.is_leader()
    });
    std::thread::sleep(INTERVAL + Duration::from_millis(200));
    let left = a.time_left().expect("a leads");
    let crashed_at = Instant::now();
    a.abort();
    let second = scratch.wait(&b, TTL * 2, "b takes over", Leadership::is_leader);
    let took = crashed_at.elapsed();
    eprintln!("b led {took:?} after the crash; a had {left:?} left on its deadline");
    assert!(second.epoch > first.epoch);
    // a's deadline is earlier than the row's expiry on the server: b
    // cannot lead before it, whatever woke it.
    assert!(
        took >= left,
        "b led after {took:?}, before a's deadline ({left:?})"
    );
    scratch
        .runtime
        .block_on(b.shutdown())
        .expect("a clean shutdown");
}
