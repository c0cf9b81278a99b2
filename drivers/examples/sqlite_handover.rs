//! Takeover after a crash and handover after a clean stop on SQLite, over
//! 5 runs each, next to the bounds of DESIGN §4.
//!
//! Two contenders share a file. Crash: the leader is abandoned (no
//! release), measured from the abandon to the other's leadership. Clean
//! stop: the leader shuts down (work stopped, released), measured from the
//! release to the other's leadership, which a release notice brings. The baseline printed beside each is
//! the bound the design promises, computed from the same configuration.
//!
//! Reproduce: `cargo run --release -p picolease --no-default-features --features sqlite --example sqlite_handover`

use std::time::{Duration, Instant};

use picolease::sqlite::{Database, SqliteLease};
use picolease::{Config, HolderId, LeaseName};

const RUNS: usize = 5;
const TTL: Duration = Duration::from_secs(1);

fn config(holder: &str, seed: u64) -> Result<Config, Box<dyn std::error::Error>> {
    let mut c = Config::with_ttl(LeaseName::new("handover")?, HolderId::new(holder)?, TTL);
    c.seed = seed;
    Ok(c)
}

/// One run: returns the gap between stopping the leader and the other
/// leading.
fn run(crash: bool, seed: u64) -> Result<Duration, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Database::file(dir.path().join("leases.db"));
    let a = SqliteLease::builder(config("a", seed)?, db.clone()).start()?;
    let first = a
        .wait_for(Duration::from_secs(10), |l| l.is_leader())
        .ok_or("a never led")?;
    let b = SqliteLease::builder(config("b", seed + 1)?, db).start()?;
    b.wait_for(Duration::from_secs(10), |l| l.epoch == first.epoch)
        .ok_or("b never saw a")?;
    // Stop at a random point of the renew cycle.
    std::thread::sleep(TTL / 4 + Duration::from_millis(seed * 37 % 250));
    let stopped_at = if crash {
        let at = Instant::now();
        a.abort();
        at
    } else {
        a.shutdown()?;
        Instant::now()
    };
    b.wait_for(Duration::from_secs(10), |l| l.is_leader())
        .ok_or("b never took over")?;
    let gap = stopped_at.elapsed();
    b.shutdown()?;
    Ok(gap)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("reproduce: cargo run --release -p picolease --no-default-features --features sqlite --example sqlite_handover");
    let interval = TTL / 4;
    for (crash, what, bound) in [
        (
            true,
            "takeover after a crash",
            format!(
                "ttl + RTT = {TTL:?} + RTT (seed bound ttl + interval = {:?})",
                TTL + interval
            ),
        ),
        (
            false,
            "handover after a clean stop",
            format!(
                "the release notice (a file watch on Linux; a poll of PRAGMA data_version every {:?} elsewhere), at most interval = {interval:?} without either",
                picolease::sqlite::DEFAULT_CHANGE_CHECK
            ),
        ),
    ] {
        let mut gaps = Vec::new();
        for i in 0..RUNS {
            gaps.push(run(crash, i as u64 + 1)?);
        }
        let ms: Vec<String> = gaps
            .iter()
            .map(|g| format!("{:.1}ms", g.as_secs_f64() * 1e3))
            .collect();
        let mean = gaps.iter().sum::<Duration>() / RUNS as u32;
        let max = gaps.iter().max().copied().unwrap_or_default();
        println!(
            "{what}: runs [{}], mean {:.1}ms, max {:.1}ms; bound {bound}",
            ms.join(", "),
            mean.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
