//! Fenced writes: making the application's own statement conditional on
//! the lease, so a paused or partitioned ex-leader's write changes nothing.
//!
//! A gated task marks jobs done with `UPDATE … WHERE id = $1 AND <fence>`.
//! The fence is evaluated by the database in the same statement, against
//! the lease row, on the database's clock: once a successor has bumped the
//! epoch (or the ttl has lapsed), the write matches no row — the
//! affected-row count says so — however long the old leader was paused.
//!
//! The fence also locks the lease row (`FOR KEY SHARE`) until the write's
//! transaction ends, and anything that bumps the epoch waits for that lock:
//! a write cannot commit into a successor's term. The last part shows it
//! with a fenced transaction (`PgLease::fenced_transaction`, bounded by the
//! leader's deadline): a forced release issued while it is open waits for
//! its commit.
//!
//! Run against the PostgreSQL at 127.0.0.1:5432 (or `PICOLEASE_PG_URL`):
//!
//! ```text
//! cargo run -p picolease --example pg_fenced_write
//! ```

mod example {
    use std::time::Duration;

    use picolease::postgres::{force_release, PgConnector, PgLease};
    use picolease::{Config, HolderId, LeaseName, TableName};
    use tokio_postgres::types::ToSql;
    use tokio_postgres::Client;

    /// Marks job `id` done by `worker`, only if `fence` still holds.
    /// Returns whether the write applied.
    async fn mark_done(
        client: &Client,
        fence: &picolease::postgres::Fence,
        id: i64,
        worker: &str,
    ) -> Result<bool, tokio_postgres::Error> {
        // Our placeholders are $1 and $2; the fence's are numbered from $3.
        let sql = format!(
            "UPDATE pl_example_jobs SET done_by = $1 WHERE id = $2 AND done_by IS NULL AND {}",
            fence.condition(3)
        );
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&worker, &id];
        params.extend(fence.params());
        Ok(client.execute(&sql, &params).await? == 1)
    }

    pub async fn run() -> Result<(), Box<dyn std::error::Error>> {
        let url = std::env::var("PICOLEASE_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
        let connector = PgConnector::new(&url)?;
        let client = connector.connect_client().await?;
        client
            .batch_execute(
                "DROP TABLE IF EXISTS pl_example_jobs;
                 CREATE TABLE pl_example_jobs (id bigint PRIMARY KEY, done_by text);
                 INSERT INTO pl_example_jobs VALUES (1, NULL), (2, NULL);",
            )
            .await?;
        let table = TableName::new("pl_example_leases")?;
        let lease_name = LeaseName::new("jobs")?;
        let config = Config::with_ttl(
            lease_name.clone(),
            HolderId::new("example-node")?,
            Duration::from_secs(2),
        );
        let lease = PgLease::builder(config, connector)
            .table(table.clone())
            .start()?;
        lease.watch().wait_for(|l| l.is_leader()).await?;
        let fence = lease.fence().expect("leading");
        println!(
            "leading at epoch {}: job 1 applied = {}",
            fence.epoch(),
            mark_done(&client, &fence, 1, "example-node").await?
        );

        // Simulate a pause: an operator force-releases the lease (bumping
        // the epoch) while this node still holds the old fence.
        force_release(&client, &table, &lease_name, Duration::from_secs(2)).await?;
        println!(
            "after the epoch moved on: job 2 applied = {} (rejected by the database)",
            mark_done(&client, &fence, 2, "example-node").await?
        );

        // A fenced transaction in the next term: the forced release waits
        // for its commit, so its write lands before the epoch moves on.
        lease
            .watch()
            .wait_for(|l| l.is_leader() && l.epoch > Some(fence.epoch()))
            .await?;
        let mut writer = PgConnector::new(&url)?.connect_client().await?;
        let tx = lease.fenced_transaction(&mut writer).await?;
        let sql = format!(
            "UPDATE pl_example_jobs SET done_by = $1 WHERE id = 2 AND done_by IS NULL AND {}",
            tx.fence().condition(2)
        );
        let worker = "example-node (transaction)";
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&worker];
        params.extend(tx.fence().params());
        let applied = tx.execute(sql.as_str(), &params).await? == 1;
        let admin = PgConnector::new(&url)?.connect_client().await?;
        let (table2, lease2) = (table.clone(), lease_name.clone());
        let started = std::time::Instant::now();
        let release = tokio::spawn(async move {
            let epoch = force_release(&admin, &table2, &lease2, Duration::from_secs(2)).await;
            (epoch, started.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        tx.commit().await?;
        let (epoch, waited) = release.await?;
        println!(
            "fenced transaction: job 2 applied = {applied}; the forced release (to epoch {}) waited {:.0} ms for its commit",
            epoch?.map_or(0, |e| e.get()),
            waited.as_secs_f64() * 1000.0
        );

        lease.shutdown().await?;
        client
            .batch_execute("DROP TABLE pl_example_jobs; DROP TABLE pl_example_leases;")
            .await?;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    example::run().await
}
