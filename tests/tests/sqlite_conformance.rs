//! Driver conformance on a real SQLite file. The async PostgreSQL driver
//! runs the same numbered cases against its own driver:
//!
//! 1. a single contender leads at epoch 1 on a fresh file, table created;
//! 2. of N contenders exactly one leads, the others see its holder and epoch;
//! 3. a clean shutdown hands over to a successor with a higher epoch;
//! 4. an abandoned (crashed) leader is replaced after its ttl;
//! 5. an administrator's forced release demotes the leader with `lost`;
//! 6. gated work runs only while leader with the term's epoch, is cancelled
//!    on demotion, joined before the next term, stopped before the release;
//! 7. a fenced write succeeds at the current epoch and is refused after a
//!    takeover;
//! 8. bad input (malformed rows, a missing table with auto-create off, a bad
//!    table name, an impossible configuration) is a typed error and nothing
//!    is written.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use picolease::sqlite::{Database, Error, LeaseTable, SqliteLease};
use picolease::{
    Config, ConfigError, Demotion, Epoch, HolderId, Leadership, LeaseName, RowError, TableName,
};
use picolease::{Subscription, Transition};

/// Generous: the machine running the tests may be loaded.
const PATIENCE: Duration = Duration::from_secs(15);
const TTL: Duration = Duration::from_millis(400);

fn config(holder: &str) -> Config {
    let mut c = Config::with_ttl(
        LeaseName::new("job").unwrap(),
        HolderId::new(holder).unwrap(),
        TTL,
    );
    c.seed = holder.len() as u64;
    c
}

fn database(dir: &Path) -> Database {
    Database::file(dir.join("leases.db"))
}

fn start(dir: &Path, holder: &str) -> SqliteLease {
    SqliteLease::builder(config(holder), database(dir))
        .start()
        .expect("the driver starts")
}

fn leader_of(lease: &SqliteLease) -> Leadership {
    lease
        .wait_for(PATIENCE, Leadership::is_leader)
        .expect("becomes leader")
}

/// Waits on a subscription for a transition matching `pred`.
fn wait_transition(rx: &mut Subscription, pred: impl Fn(&Leadership) -> bool) -> Transition {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let t = rx
            .recv_timeout(left)
            .expect("the expected transition comes");
        if pred(&t.leadership) {
            return t;
        }
    }
}

/// Every row of every table, as text.
fn dump(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out = tables.clone();
    for table in tables {
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |row| {
                Ok((0..n)
                    .map(|i| format!("{:?}", row.get_ref(i).unwrap()))
                    .collect::<Vec<_>>()
                    .join("|"))
            })
            .unwrap();
        out.extend(rows.map(Result::unwrap));
    }
    out
}

#[test]
fn case_1_a_single_contender_leads_at_epoch_1_on_a_fresh_file() {
    let dir = tempfile::tempdir().unwrap();
    assert!(!dir.path().join("leases.db").exists());
    let lease = start(dir.path(), "a");
    let leading = leader_of(&lease);
    assert_eq!(leading.epoch, Some(Epoch::new(1)));
    assert_eq!(leading.holder, Some(HolderId::new("a").unwrap()));
    assert_eq!(
        *lease.watch().borrow(),
        leading,
        "the watch channel carries the same state"
    );
    let rows = LeaseTable::open_existing(&database(dir.path()))
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].holder.as_deref(), Some("a"));
    lease.shutdown().unwrap();
}

#[test]
fn case_2_exactly_one_of_n_contenders_leads_and_the_others_see_it() {
    let dir = tempfile::tempdir().unwrap();
    let leases: Vec<SqliteLease> = ["a", "b", "c", "d"]
        .iter()
        .map(|h| start(dir.path(), h))
        .collect();
    let deadline = Instant::now() + PATIENCE;
    let (leader, epoch) = loop {
        if let Some(l) = leases.iter().find(|l| l.leadership().is_leader()) {
            break (l.holder().clone(), l.leadership().epoch);
        }
        assert!(Instant::now() < deadline, "nobody became leader");
        leases[0].wait_change(Duration::from_millis(50));
    };
    for lease in &leases {
        let seen = lease
            .wait_for(PATIENCE, |l| {
                l.holder.as_ref() == Some(&leader) && l.epoch == epoch
            })
            .expect("every contender learns the holder and epoch");
        assert_eq!(seen.is_leader(), lease.holder() == &leader);
    }
    for _ in 0..5 {
        let leaders = leases.iter().filter(|l| l.leadership().is_leader()).count();
        assert_eq!(leaders, 1);
        std::thread::sleep(TTL / 4);
    }
    for lease in leases {
        lease.shutdown().unwrap();
    }
}

#[test]
fn case_3_a_clean_shutdown_hands_over_with_a_higher_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path(), "a");
    let first = leader_of(&a);
    let b = start(dir.path(), "b");
    b.wait_for(PATIENCE, |l| l.epoch == first.epoch).unwrap();
    let released_at = Instant::now();
    a.shutdown().unwrap();
    let second = leader_of(&b);
    assert!(second.epoch > first.epoch);
    // SQLite has no notifications: a follower polls every interval.
    assert!(
        released_at.elapsed() < TTL + Duration::from_secs(3),
        "{:?}",
        released_at.elapsed()
    );
    b.shutdown().unwrap();
}

#[test]
fn case_4_an_abandoned_leader_is_replaced_after_the_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path(), "a");
    let first = leader_of(&a);
    let b = start(dir.path(), "b");
    b.wait_for(PATIENCE, |l| l.epoch == first.epoch).unwrap();
    let crashed_at = Instant::now();
    a.abort();
    let second = leader_of(&b);
    let gap = crashed_at.elapsed();
    assert!(second.epoch > first.epoch);
    // No release: the row must lapse first (renewed at most an interval ago).
    assert!(
        gap >= TTL - TTL / 4 - Duration::from_millis(20),
        "took over too early: {gap:?}"
    );
    assert!(
        gap < TTL + Duration::from_secs(3),
        "took over too late: {gap:?}"
    );
    b.shutdown().unwrap();
}

#[test]
fn case_5_a_forced_release_demotes_the_leader_with_reason_lost() {
    let dir = tempfile::tempdir().unwrap();
    let builder = SqliteLease::builder(config("a"), database(dir.path()));
    let mut transitions = builder.subscribe();
    let a = builder.start().unwrap();
    let first = leader_of(&a);
    let admin = LeaseTable::open(&database(dir.path())).unwrap();
    let bumped = admin
        .force_release(&LeaseName::new("job").unwrap())
        .unwrap();
    assert_eq!(bumped, Some(Epoch::new(2)));
    let lost = wait_transition(&mut transitions, |l| !l.is_leader() && l.reason.is_some());
    assert_eq!(lost.leadership.reason, Some(Demotion::Lost));
    assert_eq!(lost.leadership.epoch, first.epoch);
    // The row is free, so it competes again and wins a later term.
    let again = wait_transition(&mut transitions, Leadership::is_leader);
    assert!(again.leadership.epoch > Some(Epoch::new(2)));
    assert_eq!(
        admin
            .force_release(&LeaseName::new("nope").unwrap())
            .unwrap(),
        None
    );
    a.shutdown().unwrap();
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Gated {
    Started(u64),
    /// Stopped, and whether the row was still ours at that epoch then.
    Stopped(u64, bool),
}

#[test]
fn case_6_gated_work_runs_only_while_leader_and_stops_before_the_release() {
    let dir = tempfile::tempdir().unwrap();
    let record: Arc<Mutex<Vec<Gated>>> = Arc::default();
    let running = Arc::new(Mutex::new(0u32));
    let db = database(dir.path());
    let work = {
        let record = Arc::clone(&record);
        let running = Arc::clone(&running);
        let db = db.clone();
        move |ctx: picolease::sqlite::LeaderContext| {
            {
                let mut n = running.lock().unwrap();
                *n += 1;
                assert_eq!(*n, 1, "never two terms' work at once");
            }
            record
                .lock()
                .unwrap()
                .push(Gated::Started(ctx.epoch().get()));
            ctx.cancellation().wait();
            // Slow to stop: the driver must wait for us before releasing.
            std::thread::sleep(Duration::from_millis(100));
            let rows = LeaseTable::open_existing(&db).unwrap().status().unwrap();
            let still_ours = rows[0].holder.as_deref() == Some("a") && rows[0].epoch == ctx.epoch();
            record
                .lock()
                .unwrap()
                .push(Gated::Stopped(ctx.epoch().get(), still_ours));
            *running.lock().unwrap() -= 1;
        }
    };
    let builder = SqliteLease::builder(config("a"), db.clone()).while_leader(work);
    let mut transitions = builder.subscribe();
    let a = builder.start().unwrap();
    let first = leader_of(&a);
    let started = |epoch: u64| {
        let deadline = Instant::now() + PATIENCE;
        while !record.lock().unwrap().contains(&Gated::Started(epoch)) {
            assert!(Instant::now() < deadline, "work started at epoch {epoch}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    started(first.epoch.unwrap().get());
    // Demotion by an administrator: the work is cancelled; the next term's
    // work starts only after it has finished.
    LeaseTable::open(&db)
        .unwrap()
        .force_release(&LeaseName::new("job").unwrap())
        .unwrap();
    wait_transition(&mut transitions, |l| l.reason == Some(Demotion::Lost));
    let second = wait_transition(&mut transitions, Leadership::is_leader).leadership;
    started(second.epoch.unwrap().get());
    a.shutdown().unwrap();
    let record = record.lock().unwrap().clone();
    let (e1, e2) = (first.epoch.unwrap().get(), second.epoch.unwrap().get());
    assert_eq!(
        record,
        vec![
            Gated::Started(e1),
            Gated::Stopped(e1, false),
            Gated::Started(e2),
            Gated::Stopped(e2, true)
        ],
        "alternating; the first term was lost (row not ours), the last stopped before its release"
    );
    let rows = LeaseTable::open_existing(&db).unwrap().status().unwrap();
    assert_eq!(rows[0].holder, None, "released after the work stopped");
}

#[test]
fn case_7_a_fenced_write_is_refused_after_a_takeover() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let a = start(dir.path(), "a");
    let first = leader_of(&a).epoch.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE jobs (id INTEGER PRIMARY KEY, done_at_epoch INTEGER); INSERT INTO jobs (id) VALUES (1), (2);")
        .unwrap();
    let write = |fence: &picolease::sqlite::Fence, id: i64, epoch: u64| -> usize {
        let sql = format!(
            "UPDATE jobs SET done_at_epoch = ? WHERE id = ? AND {}",
            fence.sql()
        );
        let mut values: Vec<rusqlite::types::Value> = vec![(epoch as i64).into(), id.into()];
        values.extend(fence.values().iter().cloned());
        conn.execute(&sql, rusqlite::params_from_iter(values.iter()))
            .unwrap()
    };
    let stale_fence = a.fence().expect("a leads");
    assert_eq!(stale_fence.epoch(), first);
    assert_eq!(
        write(&stale_fence, 1, first.get()),
        1,
        "the leader's write goes through"
    );
    let b = start(dir.path(), "b");
    b.wait_for(PATIENCE, |l| l.epoch == Some(first)).unwrap();
    a.abort();
    let second = leader_of(&b).epoch.unwrap();
    assert_eq!(
        write(&stale_fence, 2, first.get()),
        0,
        "the old leader's write is refused"
    );
    assert_eq!(
        write(&b.fence().expect("b leads"), 2, second.get()),
        1,
        "the new leader's write goes through"
    );
    let done: Vec<(i64, i64)> = conn
        .prepare("SELECT id, done_at_epoch FROM jobs ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        done,
        vec![(1, first.get() as i64), (2, second.get() as i64)]
    );
    b.shutdown().unwrap();
}

#[test]
fn case_8_malformed_rows_are_typed_errors_and_left_untouched() {
    for (epoch, expected) in [
        (
            "NULL",
            RowError::Null {
                lease: "job".into(),
                column: "epoch",
            },
        ),
        (
            "-3",
            RowError::NegativeEpoch {
                lease: "job".into(),
                epoch: -3,
            },
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(&format!(
                "CREATE TABLE picolease_leases (name TEXT PRIMARY KEY, holder TEXT, epoch INTEGER, expires_at INTEGER);
                 INSERT INTO picolease_leases VALUES ('job', 'someone', {epoch}, 0);"
            ))
            .unwrap();
        let before = dump(&path);
        let lease = start(dir.path(), "a");
        assert!(lease.wait_for(PATIENCE, |_| false).is_none());
        assert!(lease.is_finished(), "a malformed row stops the driver");
        assert!(!lease.leadership().is_leader());
        match lease.shutdown() {
            Err(Error::Row { table, source }) => {
                assert_eq!(table, "picolease_leases");
                assert_eq!(source, expected);
            }
            other => panic!("expected a row error, got {other:?}"),
        }
        assert_eq!(dump(&path), before, "nothing written");
        // A forced release, through the library, leaves the row as it is
        // (the statement itself refuses it) and names what is wrong.
        let table = LeaseTable::open_existing(&database(dir.path())).unwrap();
        match table.force_release(&LeaseName::new("job").unwrap()) {
            Err(Error::Row { source, .. }) => assert_eq!(source, expected),
            other => panic!("expected a row error from the forced release, got {other:?}"),
        }
        assert_eq!(dump(&path), before, "the forced release wrote nothing");
    }
}

#[test]
fn case_8_a_missing_table_with_auto_create_off_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE other (x); INSERT INTO other VALUES (1);")
        .unwrap();
    let before = dump(&path);
    let err = SqliteLease::builder(config("a"), database(dir.path()).auto_create(false))
        .start()
        .unwrap_err();
    assert!(
        matches!(&err, Error::MissingTable { table, .. } if table == "picolease_leases"),
        "{err:?}"
    );
    assert!(err.to_string().contains("picolease_leases"));
    assert_eq!(dump(&path), before);
    // A missing file with auto-create off is not created either.
    let absent = dir.path().join("absent.db");
    let err = SqliteLease::builder(config("a"), Database::file(&absent).auto_create(false))
        .start()
        .unwrap_err();
    assert!(matches!(err, Error::MissingDatabase { .. }), "{err:?}");
    assert!(!absent.exists());
}

#[test]
fn case_8_bad_names_and_timings_are_refused_before_the_file_is_touched() {
    for bad in ["x\"; DROP TABLE y; --", "a;b", "it's", ""] {
        assert!(
            matches!(TableName::new(bad), Err(ConfigError::BadTableName { .. })),
            "{bad:?}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = config("a");
    c.ttl = Duration::ZERO;
    let err = SqliteLease::builder(c, database(dir.path()))
        .start()
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::TtlTooShort { .. })),
        "{err:?}"
    );
    let mut c = config("a");
    c.interval = TTL / 2;
    let err = SqliteLease::builder(c, database(dir.path()))
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("interval"), "{err}");
    assert!(!dir.path().join("leases.db").exists());
    // A directory and a foreign file.
    let err = SqliteLease::builder(config("a"), Database::file(dir.path()))
        .start()
        .unwrap_err();
    assert!(matches!(err, Error::IsDirectory { .. }), "{err:?}");
    let foreign = dir.path().join("notes.txt");
    std::fs::write(
        &foreign,
        "not a database, just some text that is long enough\n".repeat(50),
    )
    .unwrap();
    let err = SqliteLease::builder(config("a"), Database::file(&foreign))
        .start()
        .unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
}

#[test]
fn dropping_a_running_driver_releases_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let a = SqliteLease::builder(config("a"), database(dir.path()))
        .while_leader(|ctx| ctx.cancellation().wait())
        .start()
        .unwrap();
    leader_of(&a);
    let dropped_at = Instant::now();
    drop(a);
    assert!(dropped_at.elapsed() < TTL * 2 + Duration::from_secs(1));
    let rows = LeaseTable::open_existing(&database(dir.path()))
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(rows[0].holder, None, "drop released the lease");
}

#[test]
fn a_locked_database_never_blocks_the_loop_past_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let builder = SqliteLease::builder(config("a"), database(dir.path()));
    let mut transitions = builder.subscribe();
    let a = builder.start().unwrap();
    leader_of(&a);
    // Another process takes SQLite's write lock and sits on it.
    let blocker = rusqlite::Connection::open(dir.path().join("leases.db")).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let locked_at = Instant::now();
    // Renewals fail (busy) within the request timeout; the leader demotes
    // itself at its deadline instead of hanging in a statement.
    let expired = wait_transition(&mut transitions, |l| !l.is_leader() && l.reason.is_some());
    assert_eq!(expired.leadership.reason, Some(Demotion::Expired));
    assert!(
        locked_at.elapsed() < TTL + Duration::from_secs(2),
        "{:?}",
        locked_at.elapsed()
    );
    // Shutdown cannot release (still locked) but returns anyway.
    let stopping = Instant::now();
    a.shutdown().unwrap();
    assert!(
        stopping.elapsed() < TTL * 2 + Duration::from_secs(2),
        "{:?}",
        stopping.elapsed()
    );
    blocker.execute_batch("ROLLBACK").unwrap();
}
