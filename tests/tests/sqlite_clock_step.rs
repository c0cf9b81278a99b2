//! DESIGN §4b, clocks: on SQLite the database clock is the host's wall
//! clock. A test cannot step the machine's clock, so it steps the
//! database's: `julianday()` is overridden on the lease thread's own
//! connection (application functions take precedence over built-ins) to
//! read a minute ahead. The leader must demote with reason `clock` at its
//! next statement, then compete again and lead a new term.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use picolease::sqlite::{Database, SqliteLease};
use picolease::{Config, Demotion, HolderId, LeaseName, Role};
use rusqlite::functions::FunctionFlags;

const TTL: Duration = Duration::from_millis(800);
const PATIENCE: Duration = Duration::from_secs(10);

/// `julianday('now')` shifted by `offset` milliseconds.
fn shifted_julianday(offset: &AtomicI64) -> f64 {
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
        + offset.load(Ordering::SeqCst) as f64;
    unix_ms / 86_400_000.0 + 2_440_587.5
}

#[test]
fn a_stepped_wall_clock_demotes_the_sqlite_leader_with_clock() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::with_ttl(
        LeaseName::new("stepped").unwrap(),
        HolderId::new("a").unwrap(),
        TTL,
    );
    let lease = SqliteLease::builder(config, Database::file(dir.path().join("leases.db")))
        .start()
        .unwrap();
    let mut changes = lease.subscribe();
    let first = lease
        .wait_for(PATIENCE, |l| l.is_leader())
        .expect("a lone contender leads");

    // An unshifted override first: the clock it reads is the real one, so
    // nothing may happen for a few renewals.
    let offset = Arc::new(AtomicI64::new(0));
    let installed = lease
        .with_connection({
            let offset = Arc::clone(&offset);
            move |conn| {
                let installed = conn.create_scalar_function(
                    "julianday",
                    1,
                    FunctionFlags::SQLITE_UTF8,
                    move |_ctx| Ok(shifted_julianday(&offset)),
                );
                // Statements prepared earlier keep the built-in function.
                conn.flush_prepared_statement_cache();
                installed
            }
        })
        .expect("the lease thread runs");
    installed.unwrap();
    std::thread::sleep(TTL);
    assert_eq!(
        lease.leadership().epoch,
        first.epoch,
        "no demotion without a step"
    );

    offset.store(60_000, Ordering::SeqCst);
    let demoted = loop {
        let t = changes.recv_timeout(PATIENCE).expect("a transition");
        if let Some(reason) = t.leadership.reason {
            break reason;
        }
    };
    assert_eq!(demoted, Demotion::Clock);
    // It competes again at once and leads a new term (the row is its own).
    let again = lease
        .wait_for(PATIENCE, |l| l.role == Role::Leader)
        .expect("leads again");
    assert!(again.epoch > first.epoch, "{again:?}");
    lease.shutdown().unwrap();
}
