//! The fence in the user's own client (issue 21): a fenced write inside a
//! transaction of sqlx (PostgreSQL and SQLite) and of deadpool-postgres,
//! built from the `Fence` as it is (placeholders numbered from the index
//! the user gives, values in bind order), never by editing its SQL. Each
//! test is also the example to copy: a leader's write commits; after a
//! forced release (a successor's epoch) the same write changes nothing.
//!
//! PostgreSQL at 127.0.0.1:5432 (database `test`; the tests fail, not
//! skip, when it is down), SQLite in a temporary file.
//!
//! `cargo test -p picolease-tests --test integration fence_in_your_client::`

use crate::pg_support;

use std::time::Duration;

use pg_support::{admin, contender, drop_table, unique_table, url};
use picolease::sqlite::{Database, LeaseTable, SqliteLease};
use picolease::{Config, HolderId, Leadership, LeaseName};
// The fence's SQL is the library's own text and placeholders, never data:
// every value it needs is bound.
use sqlx::{AssertSqlSafe, Connection};

const TTL: Duration = Duration::from_secs(5);

/// A PostgreSQL test's ground: its lease table, a jobs table beside it
/// (`id` 7, `done` and `expired` false) and a lease `name` led by "a",
/// with the term's fence.
struct Leading {
    admin: tokio_postgres::Client,
    table: picolease::TableName,
    jobs: String,
    lease: picolease::postgres::PgLease,
    fence: picolease::postgres::Fence,
}

impl Leading {
    async fn start(test: &str, name: &str) -> Leading {
        let admin = admin().await;
        let table = unique_table(test);
        let jobs = format!("{}_jobs", table.table());
        admin
            .batch_execute(&format!(
                "CREATE TABLE \"{jobs}\" (id bigint PRIMARY KEY, \
                 done boolean NOT NULL DEFAULT false, expired boolean NOT NULL DEFAULT false);
                 INSERT INTO \"{jobs}\" (id) VALUES (7)"
            ))
            .await
            .unwrap();
        let lease = contender(&table, name, "a", TTL).start().unwrap();
        let mut watch = lease.watch();
        pg_support::wait_for(&mut watch, TTL, "leads", Leadership::is_leader).await;
        let fence = lease.fence().expect("a fence while leading");
        Leading {
            admin,
            table,
            jobs,
            lease,
            fence,
        }
    }
}

/// A successor's term, as far as a fence can tell: a forced release of
/// `name` bumps its epoch.
async fn end_the_term(admin: &tokio_postgres::Client, table: &picolease::TableName, name: &str) {
    picolease::postgres::force_release(
        admin,
        table,
        &LeaseName::new(name).unwrap(),
        std::time::Duration::from_secs(10),
    )
    .await
    .unwrap();
}

/// Drops what [`Leading::start`] made.
async fn finish(admin: &tokio_postgres::Client, table: &picolease::TableName, jobs: &str) {
    admin
        .batch_execute(&format!("DROP TABLE \"{jobs}\""))
        .await
        .unwrap();
    drop_table(admin, table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_postgres_commits_a_fenced_write_and_a_stale_one_changes_nothing() {
    let Leading {
        admin,
        table,
        jobs,
        lease,
        fence,
    } = Leading::start("sqlx_fence", "sqlx").await;

    let mut conn = sqlx::PgConnection::connect(&url()).await.unwrap();
    let update = format!(
        "UPDATE \"{jobs}\" SET done = true WHERE id = $1 AND {}",
        fence.condition(2)
    );
    let mut tx = conn.begin().await.unwrap();
    let done = fence
        .bind_sqlx(sqlx::query(AssertSqlSafe(update.clone())).bind(7i64))
        .execute(&mut *tx)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1, "the leader's write goes through");
    tx.commit().await.unwrap();

    // A successor's term (a forced release bumps the epoch): the same
    // write, fenced by the old term, changes nothing.
    end_the_term(&admin, &table, "sqlx").await;
    let mut tx = conn.begin().await.unwrap();
    let stale = fence
        .bind_sqlx(sqlx::query(AssertSqlSafe(update.clone())).bind(7i64))
        .execute(&mut *tx)
        .await
        .unwrap();
    assert_eq!(stale.rows_affected(), 0, "a stale fence refuses the write");
    tx.rollback().await.unwrap();

    lease.shutdown().await.unwrap();
    finish(&admin, &table, &jobs).await;
}

/// One pass of gated work in the user's own sqlx transaction, opened by
/// `Fence::begin_sqlx` (feature `sqlx`): bounded by the leader's time
/// left, the term checked, then `write` (no condition needed). The rows
/// it touched, or `None` when the term is over.
async fn checked_pass(
    conn: &mut sqlx::PgConnection,
    fence: &picolease::postgres::Fence,
    write: &str,
    time_left: Duration,
) -> Option<u64> {
    use sqlx::Row;
    let mut tx = fence.begin_sqlx(&mut *conn, time_left).await.unwrap()?;
    // The server's bounds are armed: the transaction ends by the deadline.
    let armed: String = sqlx::query("SELECT current_setting('statement_timeout')")
        .fetch_one(&mut *tx)
        .await
        .unwrap()
        .get(0);
    assert_ne!(armed, "0", "statement_timeout is set from the time left");
    let touched = sqlx::query(AssertSqlSafe(write))
        .execute(&mut *tx)
        .await
        .unwrap()
        .rows_affected();
    tx.commit().await.unwrap();
    Some(touched)
}

/// A write that may touch no row anyway (a bulk `DELETE` of what has
/// expired, when nothing has) cannot say whether the term is over. The
/// transaction checks the term first (`Fence::begin_sqlx`: the bounds and
/// `Fence::check`), as `Fence::transaction` does, and its writes need no condition: the
/// check locks the lease row until the commit, so no successor's term
/// begins before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_postgres_tells_an_empty_bulk_delete_from_a_lost_term() {
    let Leading {
        admin,
        table,
        jobs,
        lease,
        fence,
    } = Leading::start("sqlx_check", "sqlx_check").await;
    let mut conn = sqlx::PgConnection::connect(&url()).await.unwrap();
    let delete = format!("DELETE FROM \"{jobs}\" WHERE expired");

    // A task's `ctx.time_left()`; outside one, the handle's.
    let time_left = || lease.time_left().unwrap_or_default();
    assert_eq!(
        checked_pass(&mut conn, &fence, &delete, time_left()).await,
        Some(0),
        "the term holds; nothing had expired"
    );

    // The pass starts with the time left it read before the term ended
    // (a task that has not yet heard): read after, it may be zero once
    // the driver has demoted, and the bounds would end the transaction
    // before its check runs.
    let left = time_left();
    end_the_term(&admin, &table, "sqlx_check").await;
    assert_eq!(
        checked_pass(&mut conn, &fence, &delete, left).await,
        None,
        "the check refuses a stale term"
    );

    lease.shutdown().await.unwrap();
    finish(&admin, &table, &jobs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadpool_postgres_commits_a_fenced_write_and_a_stale_one_changes_nothing() {
    let Leading {
        admin,
        table,
        jobs,
        lease,
        fence,
    } = Leading::start("deadpool_fence", "deadpool").await;

    let config: tokio_postgres::Config = url().parse().unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(2)
        .build()
        .unwrap();
    let update = format!(
        "UPDATE \"{jobs}\" SET done = true WHERE id = $1 AND {}",
        fence.condition(2)
    );
    let write = |fence: picolease::postgres::Fence| {
        let (pool, update) = (pool.clone(), update.clone());
        async move {
            let mut client = pool.get().await.unwrap();
            let tx = client.transaction().await.unwrap();
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&7i64];
            params.extend(fence.params());
            let changed = tx.execute(update.as_str(), &params).await.unwrap();
            tx.commit().await.unwrap();
            changed
        }
    };
    assert_eq!(
        write(fence.clone()).await,
        1,
        "the leader's write goes through"
    );
    end_the_term(&admin, &table, "deadpool").await;
    assert_eq!(write(fence).await, 0, "a stale fence refuses the write");

    lease.shutdown().await.unwrap();
    finish(&admin, &table, &jobs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_sqlite_commits_a_fenced_write_and_a_stale_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let config = Config::with_ttl(
        LeaseName::new("sqlx").unwrap(),
        HolderId::new("a").unwrap(),
        TTL,
    );
    let lease = SqliteLease::builder(config, Database::file(&path))
        .start()
        .unwrap();
    lease
        .wait_for(TTL, Leadership::is_leader)
        .expect("the only contender leads");
    let fence = lease.fence().expect("a fence while leading");

    let url = format!("sqlite://{}", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE jobs (id INTEGER PRIMARY KEY, done INTEGER NOT NULL DEFAULT 0)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO jobs (id) VALUES (7)")
        .execute(&mut conn)
        .await
        .unwrap();
    // SQLite's placeholders are positional: the fence's `?`s follow yours.
    let update = format!("UPDATE jobs SET done = 1 WHERE id = ? AND {}", fence.sql());
    let bound = |fence: &picolease::sqlite::Fence| {
        let mut query = sqlx::query(AssertSqlSafe(update.clone())).bind(7i64);
        for value in fence.values() {
            query = match value {
                rusqlite::types::Value::Integer(int) => query.bind(*int),
                rusqlite::types::Value::Text(text) => query.bind(text.clone()),
                other => panic!("a fence binds text and integers, not {other:?}"),
            };
        }
        query
    };
    let mut tx = conn.begin().await.unwrap();
    let done = bound(&fence).execute(&mut *tx).await.unwrap();
    assert_eq!(done.rows_affected(), 1, "the leader's write goes through");
    tx.commit().await.unwrap();

    LeaseTable::open_existing(&Database::file(&path))
        .unwrap()
        .force_release(&LeaseName::new("sqlx").unwrap())
        .unwrap();
    let mut tx = conn.begin().await.unwrap();
    let stale = bound(&fence).execute(&mut *tx).await.unwrap();
    assert_eq!(stale.rows_affected(), 0, "a stale fence refuses the write");
    tx.rollback().await.unwrap();
    drop(conn);
    lease.shutdown().unwrap();
}
