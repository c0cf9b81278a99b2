//! A contender that reads its leadership through the library's `watch()`
//! and nothing else, for `tests/tests/watch_pause.rs`, which SIGSTOPs and
//! SIGCONTs it: `watch_contender URL [TABLE]`, URL `sqlite://PATH`,
//! `postgres://…` or `mysql://…`; one lone lease `job`, ttl 1 s. Each
//! change the watch shows is printed as one JSON line, stamped when the
//! receiver saw it: `{"leader":true,"epoch":3,"reason":null,"unix_ms":…}`.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use picolease::mysql::MysqlLease;
use picolease::postgres::PgLease;
use picolease::server::{Builder, Database};
use picolease::{unique_holder_id, Config, Leadership, LeaseName, LeaseView, TableName};
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
        let connector = picolease::postgres::PgConnector::new(&url)?;
        runtime.block_on(watch_server(PgLease::builder(config, connector), table))?;
    } else {
        let connector = picolease::mysql::MysqlConnector::new(&url)?;
        runtime.block_on(watch_server(MysqlLease::builder(config, connector), table))?;
    }
    Ok(())
}

/// A server database's lone lease on `table` (the default without one),
/// its watch printed until its driver finishes: the driver's one generic
/// handle, whichever the database.
async fn watch_server<D: Database>(
    builder: Builder<D, LeaseView>,
    table: Option<TableName>,
) -> Result<(), Box<dyn std::error::Error>> {
    let builder = match table {
        Some(table) => builder.table(table),
        None => builder,
    };
    let lease = builder.start()?;
    print_changes(lease.watch()).await;
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
