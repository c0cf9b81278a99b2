//! A PostgreSQL lease set's work is a lone lease's: async tasks with the
//! lone lease's `LeaderContext`, whose fenced transactions land inside the
//! term and are refused after it; the set handle fences per lease too.

use crate::pg_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pg_support::*;
use picolease::postgres::{init, PgConnector, PgError, PgLeaseSet};
use picolease::{Epoch, HolderId, LeaseName, SetConfig};
use tokio_postgres::types::ToSql;

/// What each term's work saw: (lease, epoch, rows its fenced update
/// changed, whether a fenced transaction after the term was refused).
type Seen = Arc<Mutex<Vec<(String, Epoch, u64, bool)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_work_writes_through_fenced_transactions_only_inside_its_term() {
    fenced_set_work(false).await;
}

/// The same, the set renewing by liveness (DESIGN §9 "Renewal by liveness"): its lease rows
/// are linked to its membership row, and the fence reads their expiry
/// through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_work_renewing_by_liveness_writes_through_fenced_transactions_only_inside_its_term() {
    fenced_set_work(true).await;
}

async fn fenced_set_work(by_liveness: bool) {
    let table = unique_table(if by_liveness {
        "set_fence_live"
    } else {
        "set_fence"
    });
    let admin = admin().await;
    init(&admin, &table).await.unwrap();
    let app = format!("\"{}_app\"", table.table());
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {app}; \
             CREATE TABLE {app} (lease text PRIMARY KEY, epoch bigint); \
             INSERT INTO {app} VALUES ('f0', NULL), ('f1', NULL)"
        ))
        .await
        .unwrap();
    let names: Vec<LeaseName> = ["f0", "f1"]
        .iter()
        .map(|n| LeaseName::new(n).unwrap())
        .collect();
    let mut template = SetConfig::with_ttl(
        HolderId::new(&format!("sf-{}", std::process::id())).unwrap(),
        Duration::from_millis(1_000),
    )
    .interval(Duration::from_millis(200));
    template.by_liveness = by_liveness;
    let seen: Seen = Arc::default();
    let connector = PgConnector::new(&url_for(PG_ADDR, "set-fence")).unwrap();
    let set = PgLeaseSet::builder(template, names.clone(), connector)
        .table(table.clone())
        .while_leader({
            let seen = Arc::clone(&seen);
            let app = app.clone();
            move |ctx| {
                let seen = Arc::clone(&seen);
                let app = app.clone();
                async move {
                    let mut client = PgConnector::new(&url_for(PG_ADDR, "set-fence-work"))
                        .unwrap()
                        .connect_client()
                        .await
                        .unwrap();
                    let lease = ctx.lease().to_string();
                    let tx = ctx.fenced_transaction(&mut client).await.expect("leading");
                    let sql = format!(
                        "UPDATE {app} SET epoch = $1 WHERE lease = $2 AND {}",
                        tx.fence().condition(3)
                    );
                    let epoch = ctx.epoch().to_i64();
                    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&epoch, &lease];
                    params.extend(tx.fence().params());
                    let changed = tx.execute(sql.as_str(), &params).await.unwrap();
                    tx.commit().await.unwrap();
                    ctx.cancelled().await;
                    let refused = matches!(
                        ctx.fenced_transaction(&mut client).await,
                        Err(PgError::Fenced { .. })
                    );
                    seen.lock()
                        .unwrap()
                        .push((lease, ctx.epoch(), changed, refused));
                }
            }
        })
        .start()
        .unwrap();

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while set.watch().borrow().len() < 2 {
        assert!(std::time::Instant::now() < deadline, "never held both");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let held = set.watch().borrow().clone();
    // Each term's work wrote its epoch, fenced.
    let written = loop {
        let rows = admin
            .query(
                &format!("SELECT lease, epoch FROM {app} ORDER BY lease"),
                &[],
            )
            .await
            .unwrap();
        let rows: Vec<(String, Option<i64>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        if rows.iter().all(|(_, e)| e.is_some()) {
            break rows;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not written: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Renewing by liveness, the lease rows are linked (`expires_at` past
    // `LINK_BASE`), so the fence above went through the liveness.
    let linked = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM {} WHERE name IN ('f0', 'f1') AND expires_at >= $1",
                table
            ),
            &[&picolease::sql::LINK_BASE],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(linked, if by_liveness { 2 } else { 0 }, "linked rows");
    for (lease, epoch) in &written {
        let name = LeaseName::new(lease).unwrap();
        assert_eq!(Some(held[&name].to_i64()), *epoch, "{lease}");
        assert_eq!(set.fence(&name).map(|f| f.epoch()), Some(held[&name]));
    }
    // The handle opens one per lease too; a lease outside the set is refused.
    let mut client = PgConnector::new(&url_for(PG_ADDR, "set-fence-handle"))
        .unwrap()
        .connect_client()
        .await
        .unwrap();
    let tx = set
        .fenced_transaction(&names[0], &mut client)
        .await
        .unwrap();
    assert_eq!(tx.fence().epoch(), held[&names[0]]);
    tx.rollback().await.unwrap();
    let outside = LeaseName::new("not-in-the-set").unwrap();
    assert!(matches!(
        set.fenced_transaction(&outside, &mut client).await,
        Err(PgError::Fenced { .. })
    ));

    set.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "each lease's work returned: {seen:?}");
    for (lease, epoch, changed, refused) in seen {
        assert_eq!(changed, 1, "{lease}@{epoch:?} wrote inside its term");
        assert!(
            refused,
            "{lease}@{epoch:?}: a transaction after the term is refused"
        );
    }
    admin
        .batch_execute(&format!("DROP TABLE {app}"))
        .await
        .unwrap();
}

/// A set's own renewals do not wait for its work's open fenced
/// transactions, as a lone lease's do not (DESIGN §4b): the renew batch
/// locks its rows `FOR NO KEY UPDATE`, which the fence's `FOR KEY SHARE`
/// lets through. The work holds a fenced transaction until the server cuts
/// it at the term's deadline as it stood at the opening; renewals meanwhile
/// must move the lease's deadline on, so the set still leads the lease at
/// the same epoch after that first deadline. (With the batch locking `FOR
/// UPDATE`, every renewal waited behind the transaction and the set lost
/// the lease at that deadline.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sets_renewals_do_not_wait_for_its_open_fenced_transactions() {
    let table = unique_table("set_fence_hold");
    let admin = admin().await;
    init(&admin, &table).await.unwrap();
    let lease = LeaseName::new("held-open").unwrap();
    let template = SetConfig::with_ttl(
        HolderId::new(&format!("sfh-{}", std::process::id())).unwrap(),
        Duration::from_millis(1_000),
    )
    .interval(Duration::from_millis(200));
    // When the work's transaction opened, the deadline it was bound by, and
    // how the transaction ended.
    type Held = Arc<Mutex<Option<(std::time::Instant, Duration, bool)>>>;
    let held: Held = Arc::default();
    let connector = PgConnector::new(&url_for(PG_ADDR, "set-fence-hold")).unwrap();
    let builder =
        PgLeaseSet::builder(template, vec![lease.clone()], connector).table(table.clone());
    let mut changes = builder.subscribe();
    let set = builder
        .while_leader({
            let held = Arc::clone(&held);
            move |ctx| {
                let held = Arc::clone(&held);
                async move {
                    if held.lock().unwrap().is_some() {
                        return ctx.cancelled().await; // one hold is enough
                    }
                    let mut client = PgConnector::new(&url_for(PG_ADDR, "set-fence-hold-work"))
                        .unwrap()
                        .connect_client()
                        .await
                        .unwrap();
                    let opened = std::time::Instant::now();
                    let left = ctx.time_left();
                    let tx = ctx.fenced_transaction(&mut client).await.expect("leading");
                    let cut = tx.execute("SELECT pg_sleep(30)", &[]).await.is_err();
                    drop(tx);
                    *held.lock().unwrap() = Some((opened, left, cut));
                    ctx.cancelled().await;
                }
            }
        })
        .start()
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let (opened, left, cut) = loop {
        if let Some(found) = *held.lock().unwrap() {
            break found;
        }
        assert!(
            std::time::Instant::now() < until,
            "the work never held its transaction"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        cut,
        "the server cut the 30 s statement at the term's deadline"
    );
    assert!(
        opened.elapsed() >= left,
        "the transaction lasted until the deadline it was bound by ({left:?})"
    );
    // Past the deadline as it stood at the opening, the set still leads
    // the lease in the term the work ran in: from the start, one leader
    // transition and nothing after it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut seen = Vec::new();
    while let Ok(t) = changes.try_recv() {
        seen.push(t.leadership);
    }
    let led = seen
        .iter()
        .position(|l| l.is_leader())
        .expect("the set led the lease");
    assert_eq!(
        seen.len(),
        led + 1,
        "the lease was lost behind the transaction: {seen:?}"
    );
    let now = set.leadership(&lease).unwrap();
    assert!(
        now.is_leader() && now.epoch == seen[led].epoch,
        "{now:?} after {seen:?}"
    );
    set.shutdown().await.unwrap();
}
