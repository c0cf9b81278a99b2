//! The README's quick start, with fenced writes through your own sqlx pool:
//! one process per node leads the lease "maintenance"; while it leads, a
//! loop expires stale jobs once a second, each pass one transaction on the
//! pool opened by `Fence::begin_sqlx` (feature `sqlx`), which arms the
//! server's bounds from the term's time left and checks the term (locking
//! the lease row until the commit, so no successor's term begins before it);
//! Ctrl-C stops the work and releases the lease, so another node leads at
//! once. The default timings: ttl 10 s, a renewal every 2.5 s; a crashed
//! leader's lease is taken about 10 s after its last renewal.
//!
//! ```text
//! DATABASE_URL=postgres://USER@HOST/DB cargo run -p picolease --example quick_start_sqlx
//! ```
//!
//! (`tests/tests/quick_start.rs` runs it against the PostgreSQL at
//! 127.0.0.1:5432 until its first pass.)

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use picolease::postgres::{Fence, PgConnector, PgLease};
use picolease::{Config, HolderId, LeaseName};
use sqlx::postgres::PgPool;

/// What the example runs on without `DATABASE_URL`.
pub const LOCAL: &str = "postgres://postgres@127.0.0.1:5432/test";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| LOCAL.into());
    run(&url, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}

/// Contends for "maintenance" on `url` and expires stale jobs while this
/// node leads, until `stop` completes; then stops the work and releases.
pub async fn run(
    url: &str,
    stop: impl Future<Output = ()>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let pool = PgPool::connect(url).await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS quick_start_jobs \
         (id BIGINT PRIMARY KEY, stale BOOLEAN NOT NULL, expired_in_term BIGINT)",
    )
    .execute(&pool)
    .await?;
    // A stable node name, and a per-process suffix (`web-1#3f2a1c`): two
    // processes given one name stay apart.
    let node = std::env::var("HOSTNAME").unwrap_or_else(|_| "web-1".into());
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as u64;
    let config = Config::new(
        LeaseName::new("maintenance")?,
        HolderId::incarnation(&node, nonce)?,
    );
    let mut lease = PgLease::builder(config, PgConnector::new(url)?)
        .while_leader(move |ctx| {
            let pool = pool.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tokio::select! {
                        biased; // the term's end first: no pass after it
                        _ = ctx.cancelled() => break,
                        _ = tick.tick() => {
                            match expire_stale_jobs(&pool, ctx.fence(), ctx.time_left()).await {
                                Ok(Some(expired)) => println!("expired {expired} jobs"),
                                Ok(None) => break, // the term is over
                                Err(e) => eprintln!("a pass failed: {e}"),
                            }
                        }
                    }
                }
            }
        })
        .start()?; // creates the lease table if missing
    tokio::select! {
        result = lease.stopped() => result?, // a fatal error: a bad table, a refused login
        _ = stop => {}
    }
    lease.shutdown().await?; // stop the work, release: a successor leads at once
    Ok(())
}

/// One pass, one fenced transaction (`Fence::begin_sqlx`: the server's
/// bounds from the term's time left, then the term's check), then the
/// writes, which need no condition of their own. `None` when the term is
/// over (nothing written).
async fn expire_stale_jobs(
    pool: &PgPool,
    fence: &Fence,
    time_left: Duration,
) -> Result<Option<u64>, sqlx::Error> {
    let Some(mut tx) = fence.begin_sqlx(pool, time_left).await? else {
        return Ok(None);
    };
    let expired =
        sqlx::query("UPDATE quick_start_jobs SET stale = false, expired_in_term = $1 WHERE stale")
            .bind(fence.epoch().get() as i64)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    tx.commit().await?;
    Ok(Some(expired))
}
