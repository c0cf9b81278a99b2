//! A contender that reads its leadership through the library's `watch()`
//! and nothing else, for `tests/tests/watch_pause.rs`, which SIGSTOPs and
//! SIGCONTs it: `watch_contender URL [TABLE]`, URL `sqlite://PATH`,
//! `postgres://…` or `mysql://…`; one lone lease `job`, ttl 1 s. Each
//! change the watch shows is printed as one JSON line, stamped when the
//! receiver saw it: `{"leader":true,"epoch":3,"reason":null,"unix_ms":…}`.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use picolease::{unique_holder_id, Config, Leadership, LeaseName, TableName};
use tokio::sync::watch;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or("usage: watch_contender URL [TABLE]")?;
    let table = args.next().map(|t| TableName::new(&t)).transpose()?;
    let config = Config::with_ttl(
        LeaseName::new("job")?,
        unique_holder_id(),
        Duration::from_secs(1),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Some(path) = url.strip_prefix("sqlite://") {
        use picolease::sqlite::{Database, SqliteLease};
        let lease = SqliteLease::builder(config, Database::file(path)).start()?;
        runtime.block_on(print_changes(lease.watch()));
    } else if url.starts_with("postgres://") {
        use picolease::postgres::{PgConnector, PgLease};
        let mut builder = PgLease::builder(config, PgConnector::new(&url)?);
        if let Some(table) = table {
            builder = builder.table(table);
        }
        runtime.block_on(async {
            let lease = builder.start()?;
            print_changes(lease.watch()).await;
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    } else {
        use picolease::mysql::{MysqlConnector, MysqlLease};
        let mut builder = MysqlLease::builder(config, MysqlConnector::new(&url)?);
        if let Some(table) = table {
            builder = builder.table(table);
        }
        runtime.block_on(async {
            let lease = builder.start()?;
            print_changes(lease.watch()).await;
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    }
    Ok(())
}

/// Prints the value the watch shows now (a blocking driver may have
/// published before the receiver existed), then every change until its
/// driver finishes.
async fn print_changes(mut watch: watch::Receiver<Leadership>) {
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) && watch.changed().await.is_err() {
            return;
        }
        let seen = watch.borrow_and_update().clone();
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let line = serde_json::json!({
            "leader": seen.is_leader(),
            "epoch": seen.epoch.map(|e| e.get()),
            "reason": seen.reason.map(|r| r.as_str()),
            "unix_ms": unix_ms,
        });
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}
