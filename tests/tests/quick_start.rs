//! The README's quick start with a fenced sqlx write
//! (`drivers/examples/quick_start_sqlx.rs`, compiled here as it is) runs
//! as written against the PostgreSQL at 127.0.0.1:5432 (database `test`;
//! FAILS, not skips, when it is unreachable): it leads "maintenance" in
//! the default table, expires the stale job in a fenced transaction at
//! its term's epoch, and on its stop releases the lease.
//!
//! `cargo test -p picolease-tests --test integration quick_start::`

#[path = "../../drivers/examples/quick_start_sqlx.rs"]
#[allow(dead_code)] // its `main`
mod example;

use std::time::Duration;

use sqlx::postgres::PgPool;
use sqlx::Row;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_leads_and_expires_a_job_in_a_fenced_transaction() {
    let pool = PgPool::connect(example::LOCAL)
        .await
        .expect("PostgreSQL at 127.0.0.1:5432");
    // A job to expire, and no row of "maintenance" left by an earlier run
    // (a dead holder's would be taken only at its expiry).
    sqlx::raw_sql(
        "DROP TABLE IF EXISTS quick_start_jobs; \
         CREATE TABLE quick_start_jobs (id BIGINT PRIMARY KEY, stale BOOLEAN NOT NULL, expired_in_term BIGINT); \
         INSERT INTO quick_start_jobs VALUES (1, true, NULL); \
         DO $$ BEGIN IF to_regclass('picolease_leases') IS NOT NULL THEN \
           DELETE FROM picolease_leases WHERE name = 'maintenance'; END IF; END $$",
    )
    .execute(&pool)
    .await
    .unwrap();
    let expired = {
        let pool = pool.clone();
        async move {
            loop {
                let row = sqlx::query("SELECT expired_in_term FROM quick_start_jobs WHERE id = 1")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                if row.get::<Option<i64>, _>(0).is_some() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        example::run(example::LOCAL, expired),
    )
    .await
    .expect("the quick start expired the job within 30 s")
    .expect("the quick start ran");
    let (stale, term): (bool, Option<i64>) =
        sqlx::query_as("SELECT stale, expired_in_term FROM quick_start_jobs WHERE id = 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(!stale);
    // The term it wrote in is the row's epoch, and the row is free again:
    // its shutdown released the lease.
    let (holder, epoch): (Option<String>, i64) =
        sqlx::query_as("SELECT holder, epoch FROM picolease_leases WHERE name = 'maintenance'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(term, Some(epoch));
    assert_eq!(holder, None, "released at the stop");
    sqlx::raw_sql(
        "DROP TABLE quick_start_jobs; DELETE FROM picolease_leases WHERE name = 'maintenance'",
    )
    .execute(&pool)
    .await
    .unwrap();
}
