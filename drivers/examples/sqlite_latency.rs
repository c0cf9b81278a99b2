//! Renew latency of the blocking SQLite driver against the same bare
//! UPDATE, over 5 runs.
//!
//! The driver's figure is what one renewal costs the lease thread: from the
//! start of the statement to the state machine having handled the reply
//! (prepare-cache lookup, bind, step, decode, handle). The baseline is the
//! same renew UPDATE (same text, same values), stepped on the driver's own
//! connection (through `SqliteLease::with_connection`) between its renewals,
//! at the same cadence, in the same run.
//!
//! Reproduce: `cargo run --release -p picolease --no-default-features --features sqlite --example sqlite_latency`

use std::time::{Duration, Instant};

use picolease::sql::{bindings, Dialect, Statements, Value};
use picolease::sqlite::{Database, SqliteLease};
use picolease::{Config, HolderId, LeaseName};

const RUNS: usize = 5;
const TTL: Duration = Duration::from_millis(80);
const RUN_FOR: Duration = Duration::from_secs(2);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("reproduce: cargo run --release -p picolease --no-default-features --features sqlite --example sqlite_latency");
    println!(
        "ttl {TTL:?}, renew interval {:?}, {RUNS} runs of {RUN_FOR:?}",
        TTL / 4
    );
    let mut all_driver = Vec::new();
    let mut all_bare = Vec::new();
    for run in 1..=RUNS {
        let dir = tempfile::tempdir()?;
        let db = Database::file(dir.path().join("leases.db"));
        let lease = LeaseName::new("latency")?;
        // The driver renewing on its own.
        let config = Config::with_ttl(lease.clone(), HolderId::new("driver")?, TTL);
        let interval = config.interval;
        let driver = SqliteLease::builder(config, db.clone()).start()?;
        let leading = driver
            .wait_for(Duration::from_secs(10), |l| l.is_leader())
            .ok_or("the driver never led")?;
        let epoch = leading.epoch.ok_or("a leader has an epoch")?;
        // The bare statement: the driver's own renew UPDATE, same text, same
        // values, stepped on the driver's own connection between its
        // renewals, at the same cadence.
        let holder = HolderId::new("driver")?;
        let b = bindings(&lease, &holder, TTL.as_millis() as i64);
        let renew = Statements::new(Dialect::Sqlite, &db.table).renew().clone();
        let values: Vec<rusqlite::types::Value> = renew
            .bind(&b, Some(epoch))
            .map(|v| match v {
                Value::Text(s) => rusqlite::types::Value::Text(s.into()),
                Value::Int(n) => rusqlite::types::Value::Integer(n),
            })
            .collect();
        let mut bare_samples = Vec::new();
        let until = Instant::now() + RUN_FOR;
        while Instant::now() < until {
            let (sql, values) = (renew.sql().to_string(), values.clone());
            let sample = driver.with_connection(move |conn| -> rusqlite::Result<Duration> {
                let started = Instant::now();
                let mut stmt = conn.prepare_cached(&sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
                while rows.next()?.is_some() {}
                Ok(started.elapsed())
            });
            bare_samples.push(sample.ok_or("the driver stopped")??);
            std::thread::sleep(interval);
        }
        let mut driver_samples = driver.renew_latencies();
        driver.shutdown()?;
        driver_samples.sort();
        bare_samples.sort();
        println!(
            "run {run}: driver renew median {:.0}us p99 {:.0}us (n={}); bare UPDATE median {:.0}us p99 {:.0}us (n={}); ratio of medians {:.2}",
            us(percentile(&driver_samples, 0.5)),
            us(percentile(&driver_samples, 0.99)),
            driver_samples.len(),
            us(percentile(&bare_samples, 0.5)),
            us(percentile(&bare_samples, 0.99)),
            bare_samples.len(),
            us(percentile(&driver_samples, 0.5)) / us(percentile(&bare_samples, 0.5)),
        );
        all_driver.extend(driver_samples);
        all_bare.extend(bare_samples);
    }
    all_driver.sort();
    all_bare.sort();
    println!(
        "all runs: driver renew median {:.0}us p99 {:.0}us; bare UPDATE median {:.0}us p99 {:.0}us; ratio of medians {:.2}",
        us(percentile(&all_driver, 0.5)),
        us(percentile(&all_driver, 0.99)),
        us(percentile(&all_bare, 0.5)),
        us(percentile(&all_bare, 0.99)),
        us(percentile(&all_driver, 0.5)) / us(percentile(&all_bare, 0.5)),
    );
    Ok(())
}
