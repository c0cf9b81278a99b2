//! Measures the async driver on the PostgreSQL at 127.0.0.1:5432 (or
//! `PICOLEASE_PG_URL`): clean handover latency with and without release
//! notifications, the takeover gap after a crash, and the driver's renew
//! latency next to the same bare UPDATE run directly with tokio-postgres
//! (the baseline, measured in the same run).
//!
//! Reproduce with:
//!
//! ```text
//! cargo run --release -p picolease --example pg_handover -- [ROUNDS]
//! ```
//!
//! Every lease statement commits, so on a server with
//! `synchronous_commit = on` each round trip includes a WAL flush; to see
//! the driver without the disk, point it at the same server with
//! `PICOLEASE_PG_URL='postgres://postgres@127.0.0.1:5432/test?options=-c%20synchronous_commit%3Doff'`.

mod bench {
    use std::time::{Duration, Instant};

    use picolease::postgres::{PgConnector, PgLease};
    use picolease::sql::{Bindings, Dialect, Statements, Value};
    use picolease::{Config, Demotion, Epoch, HolderId, LeaseName, TableName};
    use tokio_postgres::types::ToSql;

    const COMMAND: &str = "cargo run --release -p picolease --example pg_handover -- [ROUNDS]";

    fn url() -> String {
        std::env::var("PICOLEASE_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
    }

    fn contender(table: &TableName, holder: &str, ttl: Duration, notify: bool) -> PgLease {
        let config = Config::with_ttl(
            LeaseName::new("bench").unwrap(),
            HolderId::new(holder).unwrap(),
            ttl,
        );
        PgLease::builder(config, PgConnector::new(&url()).unwrap())
            .table(table.clone())
            .notifications(notify)
            .start()
            .unwrap()
    }

    async fn until_leader(lease: &PgLease) -> Instant {
        let mut changes = lease.subscribe();
        if lease.watch().borrow().is_leader() {
            return Instant::now();
        }
        loop {
            let t = changes.recv().await.expect("driver running");
            if t.leadership.is_leader() {
                return t.instant;
            }
        }
    }

    /// Clean handovers: from the old leader's demotion (`released`, just
    /// before its release statement) to the successor's leadership update.
    async fn clean(table: &TableName, rounds: usize, notify: bool) -> Vec<Duration> {
        let ttl = Duration::from_secs(2);
        let tag = if notify { "n" } else { "p" };
        let mut leader = contender(table, &format!("{tag}0"), ttl, notify);
        until_leader(&leader).await;
        let mut out = Vec::new();
        for round in 1..=rounds {
            let successor = contender(table, &format!("{tag}{round}"), ttl, notify);
            let mut rx = successor.watch();
            let id = leader.config().holder.clone();
            rx.wait_for(|l| l.holder.as_ref() == Some(&id))
                .await
                .unwrap();
            // Let the successor settle into its polling rhythm at a random phase.
            tokio::time::sleep(Duration::from_millis(37 * round as u64 % 500)).await;
            let mut old = leader.subscribe();
            let led = tokio::spawn({
                let mut changes = successor.subscribe();
                async move {
                    loop {
                        let t = changes.recv().await.expect("driver running");
                        if t.leadership.is_leader() {
                            return t.instant;
                        }
                    }
                }
            });
            leader.shutdown().await.unwrap();
            let demoted = loop {
                let t = old.recv().await.unwrap();
                if t.leadership.reason == Some(Demotion::Released) {
                    break t.instant;
                }
            };
            let led = led.await.unwrap();
            out.push(led.saturating_duration_since(demoted));
            leader = successor;
        }
        leader.shutdown().await.unwrap();
        out
    }

    /// Crash takeovers: from the leader's abort to the successor's update.
    async fn crash(table: &TableName, rounds: usize, ttl: Duration) -> Vec<Duration> {
        let mut leader = contender(table, "c0", ttl, true);
        until_leader(&leader).await;
        let mut out = Vec::new();
        for round in 1..=rounds {
            let successor = contender(table, &format!("c{round}"), ttl, true);
            let mut rx = successor.watch();
            let id = leader.config().holder.clone();
            rx.wait_for(|l| l.holder.as_ref() == Some(&id))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(53 * round as u64 % 300)).await;
            let led = tokio::spawn({
                let mut changes = successor.subscribe();
                async move {
                    loop {
                        let t = changes.recv().await.expect("driver running");
                        if t.leadership.is_leader() {
                            return t.instant;
                        }
                    }
                }
            });
            let crashed = Instant::now();
            leader.abort();
            out.push(led.await.unwrap().saturating_duration_since(crashed));
            leader = successor;
        }
        leader.shutdown().await.unwrap();
        out
    }

    /// The driver's renewals, and the same renew UPDATE prepared and run in a
    /// loop on a plain tokio-postgres client.
    async fn renew(table: &TableName, samples: usize) -> (Vec<Duration>, Vec<Duration>) {
        let ttl = Duration::from_millis(200);
        let lease = contender(table, "r", ttl, false);
        until_leader(&lease).await;
        while lease.renew_latencies().len() < samples {
            tokio::time::sleep(ttl / 4).await;
        }
        let driver = lease.renew_latencies();
        lease.shutdown().await.unwrap();

        let client = PgConnector::new(&url())
            .unwrap()
            .connect_client()
            .await
            .unwrap();
        let statements = Statements::new(Dialect::Postgres, table);
        // The baseline holds its own row (same table, same statements, bound
        // the same way), so each bare UPDATE really updates and commits, as
        // the driver's renewals do.
        let bindings = Bindings {
            lease: "bench-bare",
            holder: "bare",
            ttl_millis: 200,
            ..Default::default()
        };
        let values: Vec<Value> = statements.acquire().bind(&bindings, None).collect();
        let acquired = client
            .query_one(statements.acquire().sql(), &to_sql(&values))
            .await
            .unwrap();
        let epoch = Epoch::new(acquired.get::<_, i64>(1) as u64);
        let renew = statements.renew();
        let prepared = client.prepare(renew.sql()).await.unwrap();
        let values: Vec<Value> = renew.bind(&bindings, Some(epoch)).collect();
        let params = to_sql(&values);
        let mut bare = Vec::new();
        for _ in 0..samples {
            let start = Instant::now();
            let rows = client.query(&prepared, &params).await.unwrap();
            bare.push(start.elapsed());
            assert_eq!(rows.len(), 1, "the baseline renews its own row");
            tokio::time::sleep(ttl / 4).await;
        }
        (driver, bare)
    }

    fn to_sql<'a>(values: &'a [Value<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
        values
            .iter()
            .map(|v| match v {
                Value::Text(s) => s as &(dyn ToSql + Sync),
                Value::Int(i) => i,
            })
            .collect()
    }

    fn stats(v: &[Duration]) -> (f64, f64) {
        let mut v = v.to_vec();
        v.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        (ms(v[v.len() / 2]), ms(*v.last().unwrap()))
    }

    pub async fn run() {
        let rounds: usize = std::env::args()
            .nth(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(20);
        let table = TableName::new(&format!("pl_bench_{}", std::process::id())).unwrap();
        println!("# picolease async driver on PostgreSQL: {rounds} rounds each");
        println!("# reproduce: {COMMAND}");

        let with_notify = clean(&table, rounds, true).await;
        let (m, x) = stats(&with_notify);
        println!("clean handover, notify on:  median {m:8.2} ms  max {x:8.2} ms  (ttl 2s; target: one round trip)");
        let without = clean(&table, rounds, false).await;
        let (m, x) = stats(&without);
        println!("clean handover, notify off: median {m:8.2} ms  max {x:8.2} ms  (interval 500 ms; bound: one interval)");
        let crash_ttl = Duration::from_millis(1000);
        let gaps = crash(&table, rounds, crash_ttl).await;
        let (m, x) = stats(&gaps);
        println!("crash takeover gap:         median {m:8.2} ms  max {x:8.2} ms  (ttl {crash_ttl:?}; bound: ttl + one round trip)");
        let (driver, bare) = renew(&table, rounds.max(20) * 3).await;
        let (dm, dx) = stats(&driver);
        let (bm, bx) = stats(&bare);
        println!(
            "renew, driver:              median {dm:8.3} ms  max {dx:8.3} ms  ({} samples)",
            driver.len()
        );
        println!(
            "renew, bare UPDATE:         median {bm:8.3} ms  max {bx:8.3} ms  ({} samples)",
            bare.len()
        );
        println!("renew ratio driver/bare (medians): {:.2}", dm / bm);

        let client = PgConnector::new(&url())
            .unwrap()
            .connect_client()
            .await
            .unwrap();
        let _ = client
            .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
            .await;
    }
}

#[tokio::main]
async fn main() {
    bench::run().await
}
