//! A PostgreSQL lease set's work is a lone lease's: async tasks with the
//! lone lease's `LeaderContext`, whose fenced transactions land inside the
//! term and are refused after it; the set handle fences per lease too.

mod pg_support;

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
    let table = unique_table("set_fence");
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
    let template = SetConfig::with_ttl(
        HolderId::new(&format!("sf-{}", std::process::id())).unwrap(),
        Duration::from_millis(1_000),
    )
    .interval(Duration::from_millis(200));
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
