//! DESIGN §9 "Renewal by liveness": its one race on the MariaDB
//! server at 127.0.0.1:3306 (FAILS, not skips, when it is down), first
//! with the shape's statements written by hand (as `pg_liveness_race.rs`
//! does on PostgreSQL), then with the library's own
//! (`Statements::renewing_by_liveness`: each batch a chain of statements
//! in one transaction). MySQL has no `UPDATE … RETURNING`, so each side
//! is a transaction of several statements:
//!
//! - the holder's renewal: its liveness row extended (`UPDATE`, one row
//!   affected while it lives), then its lease read (a plain read, after
//!   the `UPDATE` has the liveness row's lock);
//! - the taker: the kill-write (`UPDATE` of the lapsed liveness row), then
//!   the lease row taken if no liveness row of its holder at its term
//!   lives (the subquery of an `UPDATE` is a locking read of the latest
//!   row in InnoDB).
//!
//! A renewal in flight makes the taker wait and take nothing; a takeover
//! in flight makes the renewal wait and confirm nothing. Without the
//! kill-write the taker still waits here, unlike on PostgreSQL: InnoDB
//! reads the liveness row in the take's subquery with a shared lock, so
//! its own condition orders it after the renewal (measured below). The
//! library writes the kill anyway, so one argument holds on every
//! database.
//!
//! `cargo test -p picolease-tests --test integration mysql_liveness_race::`

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, TxOpts};
use picolease::mysql::{init, MysqlConnector};
use picolease::sql::{
    db_now_millis, BatchBindings, Dialect, Statement, Statements, Value, MYSQL_BEGIN,
};
use picolease::TableName;
use tokio::time::Instant;

const LINK_BASE: i64 = 1 << 62;
const PATIENCE: Duration = Duration::from_secs(15);
/// InnoDB refreshes `information_schema.INNODB_TRX` only once it has gone
/// unread for 0.1 s.
const INNODB_TRX_PACE: Duration = Duration::from_millis(200);
const MEMBER: &str = "m.name >= 'picolease.member:' AND m.name < 'picolease.member;'";

fn url() -> String {
    std::env::var("PICOLEASE_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

fn connector() -> MysqlConnector {
    MysqlConnector::new(&url()).expect("PICOLEASE_MYSQL_URL is a MySQL URL")
}

async fn connect() -> Conn {
    connector()
        .connect_client()
        .await
        .unwrap_or_else(|e| panic!("the MySQL/MariaDB server at {} must be running: {e}", url()))
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A table (made by `init`) with h1's liveness row (epoch 3, expiring in
/// `liveness_ms`; negative: lapsed) and the lease `s0` at epoch 5 linked
/// to it.
async fn ground(test: &str, liveness_ms: i64) -> (Conn, TableName, String) {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let table = TableName::new(&format!("lr_{test}_{}_{n}", std::process::id())).unwrap();
    init(&connector(), &table).await.unwrap();
    let t = format!("`{}`", table.table());
    let mut admin = connect().await;
    let now = db_now_millis(Dialect::Mysql);
    admin
        .query_drop(format!(
            "INSERT INTO {t} (name, holder, epoch, expires_at) VALUES \
             ('picolease.member:h1', 'h1', 3, {now} + ({liveness_ms})), \
             ('s0', 'h1', 5, {LINK_BASE} + 3)"
        ))
        .await
        .unwrap();
    (admin, table, t)
}

/// h1's renewal in `tx`: the lease names it confirms (none unless its
/// liveness row was extended).
async fn renew(tx: &mut mysql_async::Transaction<'_>, t: &str) -> Vec<String> {
    let now = db_now_millis(Dialect::Mysql);
    tx.query_drop(format!(
        "UPDATE {t} SET expires_at = {now} + 10000 \
         WHERE name = 'picolease.member:h1' AND holder = 'h1' AND epoch = 3"
    ))
    .await
    .unwrap();
    if tx.affected_rows() != 1 {
        return Vec::new();
    }
    tx.query(format!(
        "SELECT name FROM {t} WHERE name = 's0' AND holder = 'h1' AND epoch = 5 \
         AND expires_at = {LINK_BASE} + 3"
    ))
    .await
    .unwrap()
}

/// h2's takeover of `s0` in `tx`, with or without the kill-write first:
/// how many lease rows it took.
async fn take(tx: &mut mysql_async::Transaction<'_>, t: &str, kill: bool) -> u64 {
    let now = db_now_millis(Dialect::Mysql);
    if kill {
        tx.query_drop(format!(
            "UPDATE {t} m SET holder = NULL, expires_at = {now} \
             WHERE {MEMBER} AND m.holder = 'h1' AND m.epoch = 3 AND m.expires_at <= {now}"
        ))
        .await
        .unwrap();
    }
    tx.query_drop(format!(
        "UPDATE {t} l SET holder = 'h2', epoch = l.epoch + 1, expires_at = {LINK_BASE} + 7 \
         WHERE l.name = 's0' AND l.holder = 'h1' AND l.epoch = 5 AND l.expires_at = {LINK_BASE} + 3 \
         AND NOT EXISTS (SELECT 1 FROM {t} m WHERE {MEMBER} AND m.holder = 'h1' \
           AND m.epoch = 3 AND m.expires_at > {now} AND m.expires_at < {LINK_BASE})"
    ))
    .await
    .unwrap();
    tx.affected_rows()
}

async fn lease(admin: &mut Conn, t: &str) -> (Option<String>, i64) {
    admin
        .query_first(format!("SELECT holder, epoch FROM {t} WHERE name = 's0'"))
        .await
        .unwrap()
        .unwrap()
}

/// Waits until connection `id`'s transaction waits for a row lock.
async fn waits_on_a_lock(admin: &mut Conn, id: u32) {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let state: Option<String> = admin
            .exec_first(
                "SELECT trx_state FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?",
                (id,),
            )
            .await
            .unwrap();
        if state.as_deref() == Some("LOCK WAIT") {
            return;
        }
        assert!(Instant::now() < give_up, "connection {id} never waited");
        tokio::time::sleep(INNODB_TRX_PACE).await;
    }
}

async fn drop_table(admin: &mut Conn, table: &TableName) {
    let _ = admin
        .query_drop(format!("DROP TABLE IF EXISTS `{}`", table.table()))
        .await;
}

/// A renewal in flight, then a taker (with or without the kill-write):
/// the taker waits for the renewal's commit and takes nothing.
async fn renewal_first(test: &str, kill: bool) {
    let (mut admin, table, t) = ground(test, -1000).await;
    let mut holder = connect().await;
    let mut tx = holder.start_transaction(TxOpts::default()).await.unwrap();
    assert_eq!(renew(&mut tx, &t).await, ["s0"], "the holder renews");

    let mut taker = connect().await;
    let taker_id = taker.id();
    let t2 = t.clone();
    let taking = tokio::spawn(async move {
        let mut tx = taker.start_transaction(TxOpts::default()).await.unwrap();
        let taken = take(&mut tx, &t2, kill).await;
        tx.commit().await.unwrap();
        taken
    });
    waits_on_a_lock(&mut admin, taker_id).await;
    tx.commit().await.unwrap();
    let taken = tokio::time::timeout(PATIENCE, taking)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken, 0, "the renewal committed first");
    assert_eq!(lease(&mut admin, &t).await, (Some("h1".into()), 5));
    drop_table(&mut admin, &table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_in_flight_makes_the_takers_kill_wait_and_it_takes_nothing() {
    renewal_first("renew_first", true).await;
}

/// Without the kill-write the taker still waits: InnoDB's locking read of
/// the liveness row in the take's subquery (the contrast with PostgreSQL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_kill_write_innodbs_locking_subquery_still_orders_the_taker() {
    renewal_first("naive", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_in_flight_makes_the_renewal_wait_and_it_confirms_nothing() {
    let (mut admin, table, t) = ground("take_first", -1000).await;
    let mut taker = connect().await;
    let mut tx = taker.start_transaction(TxOpts::default()).await.unwrap();
    assert_eq!(
        take(&mut tx, &t, true).await,
        1,
        "the lapsed liveness is ended, its lease taken"
    );

    let mut holder = connect().await;
    let holder_id = holder.id();
    let t2 = t.clone();
    let renewing = tokio::spawn(async move {
        let mut tx = holder.start_transaction(TxOpts::default()).await.unwrap();
        let renewed = renew(&mut tx, &t2).await;
        tx.commit().await.unwrap();
        renewed
    });
    waits_on_a_lock(&mut admin, holder_id).await;
    tx.commit().await.unwrap();
    let renewed = tokio::time::timeout(PATIENCE, renewing)
        .await
        .unwrap()
        .unwrap();
    assert!(renewed.is_empty(), "the liveness is over: {renewed:?}");
    assert_eq!(lease(&mut admin, &t).await, (Some("h2".into()), 6));
    drop_table(&mut admin, &table).await;
}

/// The library's statements renewing by liveness for `table`.
fn by_liveness(table: &TableName) -> Statements {
    Statements::new(Dialect::Mysql, table).renewing_by_liveness()
}

/// The rows of `statement`'s chain run on `conn` as the driver runs it
/// (`drivers/src/mysql/link.rs::run`), but for its last commit: the
/// first `committed_first` steps each committed in a transaction of its
/// own, the rest in one left open for the caller to commit. Its rows as
/// `(name, holder or epoch)` text.
async fn run_chain(
    conn: &mut Conn,
    statement: &Statement,
    holder: &str,
    batch: &str,
) -> Vec<(String, String)> {
    let bindings = BatchBindings {
        holder,
        ttl_millis: 10_000,
        batch,
        stale_millis: 0,
    };
    let (steps, reply) = statement.in_order();
    let alone = statement.committed_first();
    let mut rows = Vec::new();
    for (at, step) in steps.iter().enumerate() {
        if at <= alone {
            conn.query_drop(MYSQL_BEGIN).await.unwrap();
        }
        let values: Vec<mysql_async::Value> = step
            .bind_batch(&bindings)
            .map(|v| match v {
                Value::Text(s) => mysql_async::Value::Bytes(s.as_bytes().to_vec()),
                Value::Int(n) => mysql_async::Value::Int(n),
            })
            .collect();
        let got: Vec<mysql_async::Row> = conn
            .exec(step.sql(), Params::Positional(values))
            .await
            .unwrap_or_else(|e| panic!("step {at} failed: {e}"));
        if at == reply {
            rows = got;
        }
        if at < alone {
            conn.query_drop("COMMIT").await.unwrap();
        }
    }
    rows.iter()
        .map(|row| {
            let text = |i: usize| match row.as_ref(i) {
                Some(mysql_async::Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(mysql_async::Value::Int(n)) => n.to_string(),
                Some(mysql_async::Value::UInt(n)) => n.to_string(),
                _ => String::new(),
            };
            (text(0), text(1))
        })
        .collect()
}

/// [`ground`], the rows written by this server (as the library writes
/// them), for the library's statements.
async fn ground_here(test: &str, liveness_ms: i64) -> (Conn, TableName, String) {
    let (mut admin, table, t) = ground(test, liveness_ms).await;
    admin
        .query_drop(format!("UPDATE {t} SET incarnation = @@server_id"))
        .await
        .unwrap();
    (admin, table, t)
}

const RENEWAL: &str = r#"[["picolease.member:h1",3],["s0",5]]"#;
const TAKEN: &str = r#"["s0"]"#;

/// `statement`'s chain run as `holder` on a connection of its own, then
/// committed, in a task; returns once that connection waits for a row
/// lock (failing the test if it never does).
async fn waiting_chain(
    admin: &mut Conn,
    statement: &Statement,
    holder: &'static str,
    batch: &'static str,
) -> tokio::task::JoinHandle<Vec<(String, String)>> {
    let mut conn = connect().await;
    let id = conn.id();
    let statement = statement.clone();
    let running = tokio::spawn(async move {
        let rows = run_chain(&mut conn, &statement, holder, batch).await;
        conn.query_drop("COMMIT").await.unwrap();
        rows
    });
    waits_on_a_lock(admin, id).await;
    running
}

/// The rows of a [`waiting_chain`], once it is let through.
async fn its_rows(
    running: tokio::task::JoinHandle<Vec<(String, String)>>,
) -> Vec<(String, String)> {
    tokio::time::timeout(PATIENCE, running)
        .await
        .expect("the chain finishes once let through")
        .unwrap()
}

/// The library's renewal in flight (h1's lapsed liveness in its batch at
/// its epoch, extended, `s0` confirmed), then the library's acquire of
/// `s0` by h2: the acquire's kill waits for the renewal's commit, finds
/// the liveness extended, ends nothing and takes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_librarys_renewal_in_flight_makes_its_acquire_wait_and_take_nothing() {
    let (mut admin, table, t) = ground_here("lib_renew_first", -1000).await;
    let s = by_liveness(&table);
    let mut holder = connect().await;
    let renewed = run_chain(&mut holder, s.renew_batch(), "h1", RENEWAL).await;
    assert!(
        renewed
            .iter()
            .any(|(name, epoch)| name == "s0" && epoch == "5"),
        "the holder renews: {renewed:?}"
    );

    let taking = waiting_chain(&mut admin, s.acquire_batch(), "h2", TAKEN).await;
    holder.query_drop("COMMIT").await.unwrap();
    let rows = its_rows(taking).await;
    assert_eq!(rows, [("s0".to_string(), "h1".to_string())], "still h1's");
    assert_eq!(lease(&mut admin, &t).await, (Some("h1".into()), 5));
    drop_table(&mut admin, &table).await;
}

/// The library's acquire of `s0` by h2 in flight (h1's lapsed liveness
/// ended by the kill, committed on its own; `s0` taken at epoch 6, not
/// committed yet), then h1's renewal: its liveness is ended, so it
/// extends nothing; its write of the plain rows of its batch waits for
/// `s0`'s lock, and once the acquire commits it confirms nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_librarys_acquire_in_flight_makes_the_renewal_wait_and_confirm_nothing() {
    let (mut admin, table, t) = ground_here("lib_take_first", -1000).await;
    let s = by_liveness(&table);
    let mut taker = connect().await;
    let rows = run_chain(&mut taker, s.acquire_batch(), "h2", TAKEN).await;
    assert_eq!(rows, [("s0".to_string(), "h2".to_string())], "taken");

    let renewing = waiting_chain(&mut admin, s.renew_batch(), "h1", RENEWAL).await;
    taker.query_drop("COMMIT").await.unwrap();
    let renewed = its_rows(renewing).await;
    assert!(renewed.is_empty(), "the liveness is over: {renewed:?}");
    assert_eq!(lease(&mut admin, &t).await, (Some("h2".into()), 6));
    drop_table(&mut admin, &table).await;
}

/// A fenced transaction of h1's linked `s0` (the library's fence, its
/// liveness live) holds the row `LOCK IN SHARE MODE`; once the liveness
/// lapses, h2's acquire kills it but waits for the fenced transaction
/// before it takes `s0`, so the fenced write commits first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_librarys_fence_orders_a_takeover_after_the_fenced_transaction() {
    let (mut admin, table, t) = ground_here("lib_fence", 1_500).await;
    let s = by_liveness(&table);
    let mut user = connect().await;
    let mut fenced = user.start_transaction(TxOpts::default()).await.unwrap();
    let (fence, values) = s.fence_bound(
        &picolease::LeaseName::new("s0").unwrap(),
        &picolease::HolderId::new("h1").unwrap(),
        picolease::Epoch::new(5),
        |v| match v {
            Value::Text(s) => mysql_async::Value::Bytes(s.as_bytes().to_vec()),
            Value::Int(n) => mysql_async::Value::Int(n),
        },
    );
    let holds: Option<i64> = fenced
        .exec_first(format!("SELECT {fence}"), Params::Positional(values))
        .await
        .unwrap();
    assert_eq!(holds, Some(1), "the term holds when the fence is checked");
    // The liveness lapses (its expiry is on the database clock, 1.5 s
    // after `ground`), with the fenced transaction still open.
    let now = db_now_millis(Dialect::Mysql);
    let lapse = Instant::now() + PATIENCE;
    loop {
        let left: Option<i64> = admin
            .query_first(format!(
                "SELECT expires_at - {now} FROM {t} WHERE name = 'picolease.member:h1'"
            ))
            .await
            .unwrap();
        if left.unwrap() < 0 {
            break;
        }
        assert!(Instant::now() < lapse, "the liveness never lapsed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Waiting on `s0`, which the fenced transaction holds shared (the
    // kill, committed on its own, waited for nothing).
    let taking = waiting_chain(&mut admin, s.acquire_batch(), "h2", TAKEN).await;
    fenced.commit().await.unwrap();
    let rows = its_rows(taking).await;
    assert_eq!(rows, [("s0".to_string(), "h2".to_string())], "taken after");
    assert_eq!(lease(&mut admin, &t).await, (Some("h2".into()), 6));
    drop_table(&mut admin, &table).await;
}
