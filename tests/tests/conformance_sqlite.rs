//! Driver conformance on a real SQLite file: the shared cases of
//! `conformance/mod.rs` (see its docs for the list), then the cases that
//! only apply to SQLite (a locked database, dropping the handle without
//! shutdown, a missing file, directories and foreign files,
//! `with_connection`).
//!
//! Every test has a temporary directory of its own.
//!
//! `cargo test -p picolease-tests --test integration conformance_sqlite::`

use crate::conformance;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use conformance::set::{RunningSet, SetBackend};
use conformance::{
    leader_of, wait_transition, Backend, Contender, Fault, FaultKind, Options, StatusReader, Work,
    WorkTerm, LEASE, PATIENCE,
};
use picolease::set::SetView;
use picolease::sql::LeaseRow;
use picolease::sqlite::{
    Database, Fence, LeaseTable, SqliteError as Error, SqliteLease, SqliteLeaseSet,
};
use picolease::{
    Config, Demotion, Epoch, HolderId, Leadership, LeaseName, SetConfig, Subscription,
};
use tokio::sync::watch;

const TTL: Duration = Duration::from_millis(400);

/// A file database in a temporary directory of its own.
struct Sqlite {
    dir: tempfile::TempDir,
}

impl Sqlite {
    fn path(&self) -> PathBuf {
        self.dir.path().join("leases.db")
    }

    fn database(&self) -> Database {
        Database::file(self.path())
    }

    fn table(&self) -> Result<LeaseTable, Fault> {
        LeaseTable::open_existing(&self.database()).map_err(fault)
    }

    fn connection(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.path()).unwrap()
    }
}

fn fault(error: Error) -> Fault {
    let message = error.to_string();
    let kind = match error {
        Error::Config(e) => FaultKind::Config(e),
        Error::MissingTable { table, .. } => FaultKind::MissingTable { table },
        Error::Row { table, source } => FaultKind::Row { table, source },
        _ => FaultKind::Other,
    };
    Fault {
        kind: Box::new(kind),
        message,
    }
}

fn config(holder: &str) -> Config {
    let mut c = Config::with_ttl(
        LeaseName::new(LEASE).unwrap(),
        HolderId::new(holder).unwrap(),
        TTL,
    );
    c.seed = holder.len() as u64;
    c
}

/// Runs `work` the way a user's closure runs on this driver.
fn gated(work: Work) -> impl Fn(picolease::sqlite::LeaderContext) + Send + Sync + 'static {
    move |ctx| {
        let term = |ctx: &picolease::sqlite::LeaderContext| WorkTerm {
            lease: ctx.lease().clone(),
            holder: ctx.holder().clone(),
            epoch: ctx.epoch(),
            fence_epoch: ctx.fence().epoch(),
            cancelled: ctx.is_cancelled(),
        };
        (work.started)(&term(&ctx));
        ctx.cancellation().wait();
        (work.stopping)(&term(&ctx));
    }
}

/// A running SQLite contender and the subscription taken on its builder.
struct SqliteContender {
    lease: SqliteLease,
    from_start: Option<Subscription>,
}

impl Contender for SqliteContender {
    type Fence = Fence;

    fn holder(&self) -> &HolderId {
        self.lease.holder()
    }

    fn leadership(&self) -> Leadership {
        self.lease.leadership()
    }

    fn watch(&self) -> watch::Receiver<Leadership> {
        self.lease.watch()
    }

    fn subscribe(&self) -> Subscription {
        self.lease.subscribe()
    }

    fn take_start_subscription(&mut self) -> Subscription {
        self.from_start.take().expect("taken once")
    }

    fn wait_for(
        &self,
        timeout: Duration,
        done: impl FnMut(&Leadership) -> bool,
    ) -> Option<Leadership> {
        self.lease.wait_for(timeout, done)
    }

    fn fence(&self) -> Option<Fence> {
        self.lease.fence()
    }

    fn fence_epoch(fence: &Fence) -> Epoch {
        fence.epoch()
    }

    fn renew_latencies(&self) -> Vec<Duration> {
        self.lease.renew_latencies()
    }

    fn add_work(&self, work: Work) {
        self.lease.while_leader(gated(work));
    }

    fn is_finished(&self) -> bool {
        self.lease.is_finished()
    }

    /// The blocking driver's own wait: `wait_for` returns `None` once the
    /// thread has stopped.
    fn wait_finished(&self, timeout: Duration) -> bool {
        self.lease.wait_for(timeout, |_| false).is_none() && self.lease.is_finished()
    }

    fn shutdown(self) -> Result<(), Fault> {
        self.lease.shutdown().map_err(fault)
    }

    fn abort(self) {
        self.lease.abort();
    }

    fn into_fatal(self) -> Fault {
        // The blocking driver reports its fatal error from `shutdown`.
        match self.lease.shutdown() {
            Err(error) => fault(error),
            Ok(()) => panic!("the driver stopped without an error"),
        }
    }
}

impl Backend for Sqlite {
    type Lease = SqliteContender;
    const TTL: Duration = TTL;
    const CRASH_EARLY: Duration = Duration::from_millis(20);
    const CRASH_LATE: Duration = Duration::from_secs(3);
    // SQLite has no notifications: a follower polls every interval.
    const HANDOVER_LATE: Duration = Duration::from_secs(3);
    const CHECKS_TABLE_AT_START: bool = true;
    const MISSING_TABLE_STATUS_IS_ERROR: bool = false;

    fn fresh(_test: &str) -> Self {
        Sqlite {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn table_name(&self) -> String {
        "picolease_leases".into()
    }

    fn config(&self, holder: &str) -> Config {
        config(holder)
    }

    fn start_with(&self, config: Config, options: Options) -> Result<SqliteContender, Fault> {
        let database = self.database().auto_create(options.auto_create);
        let mut builder = SqliteLease::builder(config, database);
        for work in options.work {
            builder = builder.while_leader(gated(work));
        }
        let from_start = Some(builder.subscribe());
        let lease = builder.start().map_err(fault)?;
        Ok(SqliteContender { lease, from_start })
    }

    fn status(&self) -> Result<Vec<LeaseRow>, Fault> {
        self.table()?.status().map_err(fault)
    }

    fn status_reader(&self) -> StatusReader {
        let database = self.database();
        std::sync::Arc::new(move || {
            LeaseTable::open_existing(&database)
                .unwrap()
                .status()
                .unwrap()
        })
    }

    fn force_release(&self, lease: &str) -> Result<Option<Epoch>, Fault> {
        self.table()?
            .force_release(&LeaseName::new(lease).unwrap())
            .map_err(fault)
    }

    fn init(&self) -> Result<(), Fault> {
        self.table()?.init().map_err(fault)
    }

    fn table_exists(&self) -> bool {
        self.path().exists() && self.table().unwrap().exists().unwrap()
    }

    fn untouched(&self) -> bool {
        !self.path().exists()
    }

    fn create_malformed(&self, epoch_sql: &str) {
        self.connection()
            .execute_batch(&format!(
                "CREATE TABLE picolease_leases (name TEXT PRIMARY KEY, holder TEXT, epoch INTEGER, expires_at INTEGER);
                 INSERT INTO picolease_leases VALUES ('{LEASE}', 'someone', {epoch_sql}, 0);"
            ))
            .unwrap();
    }

    fn raw_row(&self) -> (Option<String>, Option<i64>, Option<i64>) {
        self.connection()
            .query_row(
                "SELECT holder, epoch, expires_at FROM picolease_leases WHERE name = ?1",
                [LEASE],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
    }

    fn create_other_table(&self) {
        self.connection()
            .execute_batch("CREATE TABLE other (x); INSERT INTO other VALUES (1);")
            .unwrap();
    }

    fn snapshot(&self) -> Vec<String> {
        if self.path().exists() {
            dump(&self.path())
        } else {
            Vec::new()
        }
    }

    fn create_jobs(&self) {
        self.connection()
            .execute_batch(
                "CREATE TABLE jobs (id INTEGER PRIMARY KEY, done_by TEXT, done_at_epoch INTEGER);
                 INSERT INTO jobs (id) VALUES (1), (2);",
            )
            .unwrap();
    }

    fn fenced_write(&self, fence: &Fence, id: i64, by: &str, epoch: Epoch) -> u64 {
        let sql = format!(
            "UPDATE jobs SET done_by = ?, done_at_epoch = ? WHERE id = ? AND {}",
            fence.sql()
        );
        let mut values: Vec<rusqlite::types::Value> =
            vec![by.to_string().into(), epoch.to_i64().into(), id.into()];
        values.extend(fence.values().iter().cloned());
        self.connection()
            .execute(&sql, rusqlite::params_from_iter(values.iter()))
            .unwrap() as u64
    }

    fn jobs(&self) -> Vec<(i64, Option<String>, Option<i64>)> {
        self.connection()
            .prepare("SELECT id, done_by, done_at_epoch FROM jobs ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
}

/// Every table and every row of the file, as text.
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

conformance_tests!(Sqlite);
conformance_tests!(set: Sqlite);

impl SetBackend for Sqlite {
    type Set = SqliteLeaseSet;

    fn start_set(
        &self,
        template: SetConfig,
        leases: Vec<LeaseName>,
        options: Options,
    ) -> Result<(SqliteLeaseSet, Subscription), Fault> {
        let database = self.database().auto_create(options.auto_create);
        let mut builder = SqliteLeaseSet::builder(template, leases, database);
        for work in options.work {
            builder = builder.while_leader(gated(work));
        }
        let from_start = builder
            .subscribe_to(&LeaseName::new(LEASE).unwrap())
            .expect("the lease is in the set");
        Ok((builder.start().map_err(fault)?, from_start))
    }
}

impl RunningSet for SqliteLeaseSet {
    type Fence = Fence;

    fn view(&self) -> &SetView {
        self
    }

    fn fence(&self, lease: &LeaseName) -> Option<Fence> {
        SqliteLeaseSet::fence(self, lease)
    }

    fn fence_epoch(fence: &Fence) -> Epoch {
        fence.epoch()
    }

    fn add_work(&self, work: Work) {
        SqliteLeaseSet::while_leader(self, gated(work));
    }

    fn is_finished(&self) -> bool {
        SqliteLeaseSet::is_finished(self)
    }

    fn shutdown(self) -> Result<(), Fault> {
        SqliteLeaseSet::shutdown(self).map_err(fault)
    }

    fn abort(self) {
        SqliteLeaseSet::abort(self);
    }

    fn hand_over(&self, lease: &LeaseName, to: &str) {
        SqliteLeaseSet::hand_over(self, lease, Some(to)).expect("a valid node name");
    }

    fn into_fatal(self) -> Fault {
        match SqliteLeaseSet::shutdown(self) {
            Err(error) => fault(error),
            Ok(()) => panic!("the set stopped without an error"),
        }
    }
}

// What only SQLite has.

/// The shared cases' file database, for the cases below.
fn database(dir: &Path) -> Database {
    Database::file(dir.join("leases.db"))
}

#[test]
fn the_default_table_is_the_one_the_shared_cases_name() {
    assert_eq!(
        Sqlite::fresh("name").table_name(),
        picolease::TableName::default().to_string()
    );
}

#[test]
fn a_missing_file_with_auto_create_off_is_a_typed_error_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent.db");
    let err = SqliteLease::builder(config("a"), Database::file(&absent).auto_create(false))
        .start()
        .unwrap_err();
    assert!(matches!(err, Error::MissingDatabase { .. }), "{err:?}");
    assert!(!absent.exists());
}

#[test]
fn a_directory_and_a_foreign_file_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
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
    a.wait_for(PATIENCE, Leadership::is_leader)
        .expect("becomes leader");
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
    a.wait_for(PATIENCE, Leadership::is_leader)
        .expect("becomes leader");
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

#[test]
fn with_connection_runs_on_the_lease_threads_own_connection() {
    let db = Sqlite::fresh("with");
    let a = db.start("a");
    let leading = leader_of(&a);
    let row: (String, i64) = a
        .lease
        .with_connection(|conn| {
            conn.query_row(
                "SELECT holder, epoch FROM picolease_leases WHERE name = ?1",
                [LEASE],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
        })
        .expect("the lease thread runs it");
    assert_eq!(row, ("a".to_string(), leading.epoch.unwrap().to_i64()));
    a.lease.shutdown().unwrap();
    // A thread that stopped by itself (a malformed row) runs nothing.
    let broken = Sqlite::fresh("with-broken");
    broken.create_malformed("NULL");
    let b = broken.start("b");
    assert!(b.wait_finished(PATIENCE));
    assert_eq!(b.lease.with_connection(|_| 1), None);
    assert!(b.lease.shutdown().is_err());
}
