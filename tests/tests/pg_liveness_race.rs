//! DESIGN §9 "Renewal by liveness" (issue 45, designed, not yet
//! built): its one race, tried on the PostgreSQL server at 127.0.0.1:5432
//! (FAILS, not skips, when it is down) with the shape's statements written
//! here by hand, before the library's are built on them.
//!
//! In that shape a holder renews one row per interval, its *liveness* (its
//! membership row, `picolease.member:h1` at epoch 3 here), and confirms
//! its leases by reading them: a lease row linked to that liveness keeps
//! `expires_at = 2^62 + 3` and is not written. A taker may take a linked
//! row once the liveness it names is over. The race: the holder's renewal
//! and a taker that judges the liveness lapsed, in flight at once.
//!
//! - With the taker's **kill-write** (it ends the lapsed liveness with an
//!   `UPDATE` conditioned on its expiry, and takes only rows whose
//!   liveness it ended or found ended), the row lock on the liveness row
//!   orders the two: whichever commits second sees the first. A renewal in
//!   flight makes the taker wait and take nothing; a takeover in flight
//!   makes the renewal wait and confirm nothing.
//! - **Without it** (the taker reads the liveness row as lapsed in its
//!   snapshot and takes the lease row), both commit: the holder believes
//!   it renewed the lease and the taker leads it (the negative control).
//! - A fenced transaction of a linked lease (the lease row and the
//!   liveness row `FOR KEY SHARE`) orders the takeover after its commit:
//!   the epoch bump of the lease row waits for it.
//!
//! `cargo test -p picolease-tests --test integration pg_liveness_race::`

use crate::pg_support;

use std::time::{Duration, Instant};

use pg_support::*;
use picolease::postgres::init;
use picolease::sql::{db_now_millis, Dialect};
use picolease::TableName;
use tokio_postgres::Client;

/// The base of a linked row's `expires_at`: 2^62 + the liveness term.
const LINK_BASE: i64 = 1 << 62;

const PATIENCE: Duration = Duration::from_secs(15);

/// The membership range, byte-wise.
const MEMBER: &str =
    "m.name COLLATE \"C\" >= 'picolease.member:' AND m.name COLLATE \"C\" < 'picolease.member;'";

async fn connect(app: &str) -> Client {
    picolease::postgres::PgConnector::new(&url_for(PG_ADDR, app))
        .unwrap()
        .connect_client()
        .await
        .expect("the PostgreSQL server at 127.0.0.1:5432 must be running")
}

/// A table with h1's liveness row (epoch 3, expiring in `liveness_ms`,
/// negative: lapsed) and the lease `s0` at epoch 5 linked to it.
async fn ground(test: &str, liveness_ms: i64) -> (Client, TableName, String) {
    let admin = admin().await;
    let table = unique_table(test);
    init(&admin, &table).await.unwrap();
    let t = format!("\"{}\"", table.table());
    let now = db_now_millis(Dialect::Postgres);
    admin
        .batch_execute(&format!(
            "INSERT INTO {t} (name, holder, epoch, expires_at) VALUES \
             ('picolease.member:h1', 'h1', 3, {now} + ({liveness_ms})), \
             ('s0', 'h1', 5, {LINK_BASE} + 3)"
        ))
        .await
        .unwrap();
    (admin, table, t)
}

/// h1's renewal: its liveness row (epoch 3) extended, and `s0` confirmed
/// at epoch 5 only if that row was: the names returned.
fn renewal(t: &str) -> String {
    let now = db_now_millis(Dialect::Postgres);
    format!(
        "WITH live AS (UPDATE {t} SET expires_at = {now} + 10000 \
           WHERE name = 'picolease.member:h1' AND holder = 'h1' AND epoch = 3 \
           RETURNING name) \
         SELECT name FROM live UNION ALL \
         SELECT l.name FROM {t} l WHERE l.name = 's0' AND l.holder = 'h1' AND l.epoch = 5 \
           AND l.expires_at = {LINK_BASE} + 3 AND EXISTS (SELECT 1 FROM live)"
    )
}

/// h2 takes `s0` (linking it to its own liveness, term 7) if the liveness
/// it is linked to is over: ended by this statement's kill-write (an
/// `UPDATE` of the lapsed liveness row, rechecked on the row's latest
/// version once its lock is had), or found ended (no liveness row of that
/// holder at that term). The take itself is conditioned on the lease row
/// being what was judged, so a concurrent change is rechecked too.
fn takeover(t: &str) -> String {
    let now = db_now_millis(Dialect::Postgres);
    format!(
        "WITH linked AS (SELECT l.name, l.holder, l.epoch, l.expires_at, \
           l.expires_at - {LINK_BASE} AS term FROM {t} l \
           WHERE l.name IN ('s0') AND l.expires_at >= {LINK_BASE} AND l.holder <> 'h2'), \
         killed AS (UPDATE {t} m SET holder = NULL, expires_at = {now} \
           FROM (SELECT DISTINCT holder, term FROM linked) c \
           WHERE {MEMBER} AND m.holder = c.holder AND m.epoch = c.term \
           AND m.expires_at <= {now} RETURNING c.holder, c.term), \
         dead AS (SELECT * FROM linked d WHERE \
           EXISTS (SELECT 1 FROM killed k WHERE k.holder = d.holder AND k.term = d.term) \
           OR NOT EXISTS (SELECT 1 FROM {t} m WHERE {MEMBER} AND m.holder = d.holder \
             AND m.epoch = d.term AND m.expires_at < {LINK_BASE})) \
         UPDATE {t} SET holder = 'h2', epoch = {t}.epoch + 1, expires_at = {LINK_BASE} + 7 \
         FROM dead WHERE {t}.name = dead.name AND {t}.holder = dead.holder \
           AND {t}.epoch = dead.epoch AND {t}.expires_at = dead.expires_at \
         RETURNING {t}.name"
    )
}

/// The obvious takeover, without the kill-write: `s0` taken if, in the
/// statement's snapshot, its holder's liveness row at its term is not
/// live.
fn naive_takeover(t: &str) -> String {
    let now = db_now_millis(Dialect::Postgres);
    format!(
        "UPDATE {t} l SET holder = 'h2', epoch = l.epoch + 1, expires_at = {LINK_BASE} + 7 \
         WHERE l.name = 's0' AND l.expires_at >= {LINK_BASE} AND l.holder <> 'h2' \
         AND NOT EXISTS (SELECT 1 FROM {t} m WHERE {MEMBER} AND m.holder = l.holder \
           AND m.epoch = l.expires_at - {LINK_BASE} AND m.expires_at > {now} \
           AND m.expires_at < {LINK_BASE}) \
         RETURNING l.name"
    )
}

/// The check of a fenced transaction of `s0` at epoch 5 held by h1: the
/// lease row and its liveness row, both `FOR KEY SHARE`.
fn fence_check(t: &str) -> String {
    let now = db_now_millis(Dialect::Postgres);
    format!(
        "SELECT EXISTS (SELECT 1 FROM {t} l WHERE l.name = 's0' AND l.holder = 'h1' \
           AND l.epoch = 5 AND l.expires_at >= {LINK_BASE} \
           AND EXISTS (SELECT 1 FROM {t} m WHERE {MEMBER} AND m.holder = l.holder \
             AND m.epoch = l.expires_at - {LINK_BASE} AND m.expires_at > {now} \
             AND m.expires_at < {LINK_BASE} FOR KEY SHARE) \
           FOR KEY SHARE)"
    )
}

async fn names(client: &Client, sql: &str) -> Vec<String> {
    let mut names: Vec<String> = client
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    names.sort();
    names
}

/// The lease row: (holder, epoch).
async fn lease(admin: &Client, t: &str) -> (Option<String>, i64) {
    let row = admin
        .query_one(
            &format!("SELECT holder, epoch FROM {t} WHERE name = 's0'"),
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Waits until a backend of `app` waits on a lock.
async fn waits_on_a_lock(admin: &Client, app: &str) {
    wait_for_sessions(
        admin,
        app,
        "wait_event_type = 'Lock'",
        1,
        PATIENCE,
        &format!("{app} waits on a lock"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_in_flight_makes_the_takers_kill_wait_and_it_takes_nothing() {
    let (admin, table, t) = ground("live_renew_first", -1000).await;
    let pid = std::process::id();
    let mut holder = connect(&format!("live-renew-first-h1-{pid}")).await;
    let tx = holder.transaction().await.unwrap();
    let renewed = names(tx.client(), &renewal(&t)).await;
    assert_eq!(renewed, ["picolease.member:h1", "s0"], "the holder renews");

    let taker_app = format!("live-renew-first-h2-{pid}");
    let taker = connect(&taker_app).await;
    let sql = takeover(&t);
    let taking = tokio::spawn(async move { names(&taker, &sql).await });
    waits_on_a_lock(&admin, &taker_app).await;
    tx.commit().await.unwrap();
    let taken = tokio::time::timeout(PATIENCE, taking)
        .await
        .unwrap()
        .unwrap();
    assert!(taken.is_empty(), "the renewal committed first: {taken:?}");
    assert_eq!(lease(&admin, &t).await, (Some("h1".into()), 5));
    drop_table(&admin, &table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_in_flight_makes_the_renewal_wait_and_it_confirms_nothing() {
    let (admin, table, t) = ground("live_take_first", -1000).await;
    let pid = std::process::id();
    let mut taker = connect(&format!("live-take-first-h2-{pid}")).await;
    let tx = taker.transaction().await.unwrap();
    let taken = names(tx.client(), &takeover(&t)).await;
    assert_eq!(
        taken,
        ["s0"],
        "the lapsed liveness is ended, its lease taken"
    );

    let holder_app = format!("live-take-first-h1-{pid}");
    let holder = connect(&holder_app).await;
    let sql = renewal(&t);
    let renewing = tokio::spawn(async move { names(&holder, &sql).await });
    waits_on_a_lock(&admin, &holder_app).await;
    tx.commit().await.unwrap();
    let renewed = tokio::time::timeout(PATIENCE, renewing)
        .await
        .unwrap()
        .unwrap();
    assert!(
        renewed.is_empty(),
        "the takeover committed first: the holder's liveness is over, its lease not confirmed: {renewed:?}"
    );
    assert_eq!(lease(&admin, &t).await, (Some("h2".into()), 6));
    // Ended stays ended: the holder's next renewal of term 3 finds nothing.
    assert!(names(&admin, &renewal(&t)).await.is_empty());
    drop_table(&admin, &table).await;
}

/// The negative control: without the kill-write, a renewal in flight and
/// a taker both commit, and the lease has two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_kill_write_a_renewal_and_a_takeover_both_commit() {
    let (admin, table, t) = ground("live_naive", -1000).await;
    let pid = std::process::id();
    let mut holder = connect(&format!("live-naive-h1-{pid}")).await;
    let tx = holder.transaction().await.unwrap();
    let renewed = names(tx.client(), &renewal(&t)).await;
    assert_eq!(renewed, ["picolease.member:h1", "s0"]);

    let taker = connect(&format!("live-naive-h2-{pid}")).await;
    let taken = tokio::time::timeout(PATIENCE, names(&taker, &naive_takeover(&t)))
        .await
        .expect("the naive takeover does not wait for the renewal");
    tx.commit().await.unwrap();
    assert_eq!(
        taken,
        ["s0"],
        "the naive taker took the lease the holder just confirmed"
    );
    assert_eq!(lease(&admin, &t).await, (Some("h2".into()), 6));
    drop_table(&admin, &table).await;
}

/// A fenced transaction of a linked lease, open when the liveness lapses:
/// the takeover's epoch bump waits for its commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_transaction_of_a_linked_lease_orders_the_takeover_after_it() {
    let (admin, table, t) = ground("live_fence", 400).await;
    let pid = std::process::id();
    let mut writer = connect(&format!("live-fence-w-{pid}")).await;
    let tx = writer.transaction().await.unwrap();
    let holds: bool = tx.query_one(&fence_check(&t), &[]).await.unwrap().get(0);
    assert!(holds, "the term holds while its liveness is live");

    let lapsed = format!(
        "SELECT expires_at <= {} FROM {t} WHERE name = 'picolease.member:h1'",
        db_now_millis(Dialect::Postgres)
    );
    let deadline = Instant::now() + PATIENCE;
    while !admin
        .query_one(&lapsed, &[])
        .await
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(Instant::now() < deadline, "the liveness lapses");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let taker_app = format!("live-fence-h2-{pid}");
    let taker = connect(&taker_app).await;
    let sql = takeover(&t);
    let taking = tokio::spawn(async move { (names(&taker, &sql).await, Instant::now()) });
    waits_on_a_lock(&admin, &taker_app).await;
    let committing = Instant::now();
    tx.commit().await.unwrap();
    let (taken, at) = tokio::time::timeout(PATIENCE, taking)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken, ["s0"], "taken once the fenced transaction is over");
    assert!(at >= committing);
    drop_table(&admin, &table).await;
}
