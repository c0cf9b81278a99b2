//! The demo's work: two maintenance loops modelled on a broker's, as
//! idempotent commands on tables in the lease's own database file, fenced
//! by the epoch.
//!
//! - the **expiry tick** reclaims upload reservations that expired without
//!   being committed;
//! - the **object cleaner** deletes objects marked destroyed.
//!
//! Every command is `UPDATE … WHERE <still to do> AND <fence>`: applying it
//! twice changes nothing the second time (it is answered as redundant), and
//! a writer whose term is over is refused by the database (fenced).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use picolease::sql::{db_now_millis, Dialect};
use picolease::sqlite::{open_connection, Database, Fence, LeaderContext};
use rusqlite::params_from_iter;

/// The database clock in milliseconds, exactly as the lease statements
/// read it: the reservations' expiry and the lease share one clock.
fn db_now() -> &'static str {
    db_now_millis(Dialect::Sqlite)
}

/// Creates the work tables.
pub fn create_tables(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE upload_reservations (
             id INTEGER PRIMARY KEY, committed INTEGER NOT NULL, expires_at INTEGER NOT NULL,
             reclaimed_epoch INTEGER, reclaimed_by TEXT);
         CREATE TABLE objects (
             id INTEGER PRIMARY KEY, destroyed INTEGER NOT NULL,
             deleted_epoch INTEGER, deleted_by TEXT);",
    )
}

/// Queues work: `stale` reservations that expired uncommitted, `committed`
/// ones that must stay, `destroyed` objects to delete and `live` ones that
/// must stay.
pub fn enqueue(
    conn: &rusqlite::Connection,
    stale: usize,
    committed: usize,
    destroyed: usize,
    live: usize,
) -> rusqlite::Result<()> {
    for _ in 0..stale {
        conn.execute(
            &format!(
                "INSERT INTO upload_reservations (committed, expires_at) VALUES (0, {} - 1000)",
                db_now()
            ),
            [],
        )?;
    }
    for _ in 0..committed {
        conn.execute(
            &format!(
                "INSERT INTO upload_reservations (committed, expires_at) VALUES (1, {} - 1000)",
                db_now()
            ),
            [],
        )?;
    }
    for _ in 0..destroyed {
        conn.execute("INSERT INTO objects (destroyed) VALUES (1)", [])?;
    }
    for _ in 0..live {
        conn.execute("INSERT INTO objects (destroyed) VALUES (0)", [])?;
    }
    Ok(())
}

/// How commands were answered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    /// Changed a row: the item was processed.
    pub done: usize,
    /// Changed nothing, the fence held: the item was already processed.
    pub redundant: usize,
    /// Refused by the fence: the writer's term was over.
    pub fenced: usize,
    /// Failed (busy database): retried on the next round.
    pub failed: usize,
}

/// The two loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loop {
    /// Reclaims expired, uncommitted upload reservations.
    ExpiryTick,
    /// Deletes destroyed objects.
    ObjectCleaner,
}

impl Loop {
    fn candidates(self) -> String {
        match self {
            Loop::ExpiryTick => format!(
                "SELECT id FROM upload_reservations WHERE reclaimed_epoch IS NULL AND committed = 0 \
                 AND expires_at <= {now} ORDER BY id LIMIT ?",
                now = db_now()
            ),
            Loop::ObjectCleaner => {
                "SELECT id FROM objects WHERE deleted_epoch IS NULL AND destroyed = 1 ORDER BY id LIMIT ?"
                    .into()
            }
        }
    }

    /// The most recently processed items: a new term re-sends them, since
    /// it cannot know whether the previous holder's last commands committed
    /// (at-least-once delivery, made safe by idempotence).
    fn last_done(self) -> &'static str {
        match self {
            Loop::ExpiryTick => "SELECT id FROM upload_reservations WHERE reclaimed_epoch IS NOT NULL ORDER BY reclaimed_epoch DESC, id DESC LIMIT ?",
            Loop::ObjectCleaner => "SELECT id FROM objects WHERE deleted_epoch IS NOT NULL ORDER BY deleted_epoch DESC, id DESC LIMIT ?",
        }
    }

    fn command(self, fence: &Fence) -> String {
        match self {
            Loop::ExpiryTick => format!(
                "UPDATE upload_reservations SET reclaimed_epoch = ?, reclaimed_by = ? \
                 WHERE id = ? AND reclaimed_epoch IS NULL AND committed = 0 AND expires_at <= {now} AND {}",
                fence.sql(),
                now = db_now()
            ),
            Loop::ObjectCleaner => format!(
                "UPDATE objects SET deleted_epoch = ?, deleted_by = ? \
                 WHERE id = ? AND deleted_epoch IS NULL AND destroyed = 1 AND {}",
                fence.sql()
            ),
        }
    }
}

/// One fenced, idempotent command on `item`, classified.
pub fn apply(
    conn: &rusqlite::Connection,
    job: Loop,
    fence: &Fence,
    epoch: i64,
    node: &str,
    item: i64,
    tally: &mut Tally,
) {
    let mut values: Vec<rusqlite::types::Value> =
        vec![epoch.into(), node.to_string().into(), item.into()];
    values.extend(fence.values().iter().cloned());
    let changed = conn
        .prepare_cached(&job.command(fence))
        .and_then(|mut s| s.execute(params_from_iter(values.iter())));
    match changed {
        Ok(1) => tally.done += 1,
        Ok(_) => {
            let holds = conn
                .prepare_cached(&format!("SELECT {}", fence.sql()))
                .and_then(|mut s| s.query_row(fence.params(), |row| row.get::<_, bool>(0)));
            match holds {
                Ok(true) => tally.redundant += 1,
                Ok(false) => tally.fenced += 1,
                Err(_) => tally.failed += 1,
            }
        }
        Err(_) => tally.failed += 1,
    }
}

fn ids(conn: &rusqlite::Connection, sql: &str, limit: i64) -> Vec<i64> {
    conn.prepare_cached(sql)
        .and_then(|mut s| {
            s.query_map([limit], |row| row.get::<_, i64>(0))
                .and_then(|rows| rows.collect())
        })
        .unwrap_or_default()
}

/// The tallies of every loop of every node, by (node, loop).
pub type Tallies = Arc<Mutex<Vec<(String, Loop, Tally)>>>;

/// A gated maintenance loop: replays the last batch of the previous term,
/// then processes a small batch every round until cancelled.
pub fn gated_loop(
    database: Database,
    node: String,
    job: Loop,
    round: Duration,
    tallies: Tallies,
) -> impl Fn(LeaderContext) + Send + Sync + 'static {
    move |work: LeaderContext| {
        let Ok(conn) = open_connection(&database) else {
            return;
        };
        let fence = work.fence();
        let epoch = work.epoch().to_i64();
        let mut tally = Tally::default();
        for item in ids(&conn, job.last_done(), 2) {
            apply(&conn, job, fence, epoch, &node, item, &mut tally);
        }
        while !work.is_cancelled() {
            for item in ids(&conn, &job.candidates(), 2) {
                if work.is_cancelled() {
                    break;
                }
                apply(&conn, job, fence, epoch, &node, item, &mut tally);
            }
            if work.sleep(round) {
                break;
            }
        }
        tallies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((node.clone(), job, tally));
    }
}

/// The final state of the work tables.
#[derive(Debug, Default)]
pub struct Account {
    /// Expired uncommitted reservations, and how many were reclaimed.
    pub stale: i64,
    /// Of those, reclaimed.
    pub reclaimed: i64,
    /// Committed reservations reclaimed by mistake (must be 0).
    pub committed_touched: i64,
    /// Destroyed objects.
    pub destroyed: i64,
    /// Of those, deleted.
    pub deleted: i64,
    /// Live objects deleted by mistake (must be 0).
    pub live_touched: i64,
    /// Items processed per epoch: (epoch, node, count).
    pub by_term: Vec<(i64, String, i64)>,
}

/// Reads the account from the database.
pub fn account(conn: &rusqlite::Connection) -> rusqlite::Result<Account> {
    let count = |sql: &str| conn.query_row(sql, [], |row| row.get::<_, i64>(0));
    let mut by_term = Vec::new();
    let mut stmt = conn.prepare(
        "SELECT epoch, node, count(*) FROM (
             SELECT reclaimed_epoch AS epoch, reclaimed_by AS node FROM upload_reservations WHERE reclaimed_epoch IS NOT NULL
             UNION ALL SELECT deleted_epoch, deleted_by FROM objects WHERE deleted_epoch IS NOT NULL)
         GROUP BY epoch, node ORDER BY epoch",
    )?;
    let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    for row in rows {
        by_term.push(row?);
    }
    Ok(Account {
        stale: count("SELECT count(*) FROM upload_reservations WHERE committed = 0")?,
        reclaimed: count("SELECT count(*) FROM upload_reservations WHERE committed = 0 AND reclaimed_epoch IS NOT NULL")?,
        committed_touched: count("SELECT count(*) FROM upload_reservations WHERE committed = 1 AND reclaimed_epoch IS NOT NULL")?,
        destroyed: count("SELECT count(*) FROM objects WHERE destroyed = 1")?,
        deleted: count("SELECT count(*) FROM objects WHERE destroyed = 1 AND deleted_epoch IS NOT NULL")?,
        live_touched: count("SELECT count(*) FROM objects WHERE destroyed = 0 AND deleted_epoch IS NOT NULL")?,
        by_term,
    })
}
