//! DESIGN §10 "A set's renewal by liveness" (issue 45, designed, not yet
//! built): its one race on the MariaDB server at 127.0.0.1:3306 (FAILS,
//! not skips, when it is down), with the shape's statements written here
//! by hand, as `pg_liveness_race.rs` does on PostgreSQL. MySQL has no
//! `UPDATE … RETURNING`, so each side is a transaction of two statements:
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
//! library will write the kill anyway, so one argument holds on every
//! database.
//!
//! `cargo test -p picolease-tests --test integration mysql_liveness_race::`

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, TxOpts};
use picolease::mysql::{init, MysqlConnector};
use picolease::sql::{db_now_millis, Dialect};
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
