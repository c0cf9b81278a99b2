//! `picolease bench --leases N --nodes P`: what keeping N leases among P
//! `picolease run` processes costs the database in steady state, on
//! PostgreSQL (DESIGN §9; the measure of a set's writes).
//!
//! It starts P processes of this binary, `run --name 's{0..N-1}'` in a
//! scratch table, lets them settle, then reads over a window what the
//! server's statistics views count: WAL written (`pg_stat_wal`, the whole
//! server), row updates of the table (`pg_stat_user_tables`) and commits
//! (`pg_stat_database`, this database). The floor is the same reading
//! with no process running, taken first in the same run, so other load
//! on the server shows as a floor rather than as picolease's cost. The
//! server flushes these counters lazily (about once a second per busy
//! backend), so a window of many intervals is needed for a steady rate.

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[cfg(feature = "postgres")]
use crate::backend::postgres::{connect, Target};
use crate::backend::{runtime, Backend};
use crate::failure::CliError;

/// What `bench --leases` was asked for.
pub struct CostOptions {
    pub leases: usize,
    pub nodes: usize,
    pub ttl: Duration,
    pub settle: Duration,
    pub window: Duration,
    pub json: bool,
    /// The processes renew by liveness (the default), or every row
    /// (`run --every-row`, DESIGN §9 "Renewal by liveness").
    pub by_liveness: bool,
}

/// The counters read at one instant.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    wal_bytes: f64,
    commits: f64,
    row_updates: f64,
    at: Option<Instant>,
}

/// Per-second rates between two readings.
#[derive(Clone, Copy, Debug, Default)]
struct Rates {
    wal_bytes: f64,
    commits: f64,
    row_updates: f64,
}

impl Rates {
    fn between(a: Counters, b: Counters) -> Rates {
        let seconds = match (a.at, b.at) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64().max(1e-3),
            _ => 1.0,
        };
        Rates {
            wal_bytes: (b.wal_bytes - a.wal_bytes) / seconds,
            commits: (b.commits - a.commits) / seconds,
            row_updates: (b.row_updates - a.row_updates) / seconds,
        }
    }
}

/// The `run` processes, stopped (SIGTERM, then SIGKILL) when dropped, so
/// that a failing bench leaves none behind.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &self.0 {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        let until = Instant::now() + Duration::from_secs(20);
        for child in &mut self.0 {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the cost bench where the database can count it: PostgreSQL.
pub fn dispatch(db: &str, backend: &Backend, options: &CostOptions) -> Result<ExitCode, CliError> {
    match backend {
        #[cfg(feature = "postgres")]
        Backend::Postgres(target) => run(db, target, options),
        _ => Err(CliError::usage(format!(
            "bench --leases reads PostgreSQL's statistics views (pg_stat_wal); {} is not a PostgreSQL database",
            backend.place()
        ))),
    }
}

/// Runs the cost bench on PostgreSQL `target` (`db` as given to `--db`,
/// for the processes): progress on stderr, the figures on stdout.
pub fn run(db: &str, target: &Target, options: &CostOptions) -> Result<ExitCode, CliError> {
    if options.leases == 0 || options.nodes == 0 {
        return Err(CliError::usage(format!(
            "bench: --leases and --nodes must be at least 1 (got {} and {})",
            options.leases, options.nodes
        )));
    }
    let table = format!("picolease_bench_cost_{}", std::process::id());
    let runtime = runtime()?;
    let connector = target.connector().clone();
    let client = runtime.block_on(connect(&connector, target))?;
    let read =
        |table: &str| -> Result<Counters, CliError> { runtime.block_on(counters(&client, table)) };
    let started = Instant::now();
    let floor_window = options.window.min(Duration::from_secs(10));
    eprintln!("bench: the floor, {floor_window:?} with no process running");
    let before = read(&table)?;
    std::thread::sleep(floor_window);
    let floor = Rates::between(before, read(&table)?);

    let exe = std::env::current_exe()
        .map_err(|e| CliError::runtime(format!("bench: cannot find this binary: {e}")))?;
    let names = format!("s{{0..{}}}", options.leases - 1);
    let ttl = format!("{}ms", options.ttl.as_millis());
    let mut processes = Processes(Vec::with_capacity(options.nodes));
    for node in 0..options.nodes {
        let child = Command::new(&exe)
            .args(["--db", db, "--table", &table, "run", "--name", &names])
            .args(["--ttl", &ttl, "--node", &format!("bench-{node}")])
            .args((!options.by_liveness).then_some("--every-row"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| CliError::runtime(format!("bench: cannot start `run`: {e}")))?;
        processes.0.push(child);
    }
    eprintln!(
        "bench: {} processes over {} leases (ttl {ttl}), settling for {:?}",
        options.nodes, options.leases, options.settle
    );
    // How long until every lease was held, read every 100 ms while settling.
    let spawned = Instant::now();
    let mut settled_after: Option<Duration> = None;
    while spawned.elapsed() < options.settle {
        std::thread::sleep(Duration::from_millis(100));
        if settled_after.is_none()
            && runtime.block_on(held(&client, &table)).ok() == Some(options.leases as i64)
        {
            settled_after = Some(spawned.elapsed());
        }
    }
    let from = read(&table)?;
    eprintln!("bench: measuring for {:?}", options.window);
    std::thread::sleep(options.window);
    let to = read(&table)?;
    let held = runtime.block_on(held(&client, &table))?;
    let mut exited = 0;
    for child in &mut processes.0 {
        exited += usize::from(matches!(child.try_wait(), Ok(Some(_))));
    }
    drop(processes);
    let dropped = runtime.block_on(client.batch_execute(&format!("DROP TABLE IF EXISTS {table}")));
    let rates = Rates::between(from, to);
    let interval = options.ttl.as_secs_f64() / 4.0;
    let figures = serde_json::json!({
        "by_liveness": options.by_liveness,
        "leases": options.leases,
        "nodes": options.nodes,
        "ttl_ms": options.ttl.as_millis() as u64,
        "window_s": options.window.as_secs_f64(),
        "held": held,
        "settled_s": settled_after.map(|d| (d.as_secs_f64() * 10.0).round() / 10.0),
        "exited": exited,
        "wal_bytes_per_s": rates.wal_bytes.round(),
        "row_updates_per_s": (rates.row_updates * 10.0).round() / 10.0,
        "row_updates_per_interval": (rates.row_updates * interval * 10.0).round() / 10.0,
        "commits_per_s": (rates.commits * 10.0).round() / 10.0,
        "floor_wal_bytes_per_s": floor.wal_bytes.round(),
        "floor_commits_per_s": (floor.commits * 10.0).round() / 10.0,
    });
    if options.json {
        println!("{figures}");
    } else {
        println!(
            "{} leases among {} processes{}, ttl {ttl} (interval {:.0} ms), held {held} of {}{}",
            options.leases,
            options.nodes,
            if options.by_liveness {
                " renewing by liveness"
            } else {
                " renewing every row"
            },
            interval * 1000.0,
            options.leases,
            if exited > 0 {
                format!(", {exited} processes EXITED early")
            } else {
                String::new()
            }
        );
        match settled_after {
            Some(after) => println!(
                "  every lease held {:.1} s after the start ({:.0} intervals)",
                after.as_secs_f64(),
                after.as_secs_f64() / interval
            ),
            None => println!("  not every lease held within the settling time"),
        }
        println!(
            "  WAL written   {:>10.1} KiB/s   (floor {:.1} KiB/s)",
            rates.wal_bytes / 1024.0,
            floor.wal_bytes / 1024.0
        );
        println!(
            "  row updates   {:>10.1} /s      ({:.1} per interval; the table's own)",
            rates.row_updates,
            rates.row_updates * interval
        );
        println!(
            "  commits       {:>10.1} /s      (floor {:.1} /s)",
            rates.commits, floor.commits
        );
        println!(
            "  measured over {:?} after {:?} of settling; {:.0} s in all: picolease --db … bench --leases {} --nodes {} --ttl {ttl}",
            options.window,
            options.settle,
            started.elapsed().as_secs_f64(),
            options.leases,
            options.nodes
        );
    }
    dropped.map_err(|e| CliError::runtime(format!("bench: dropping {table}: {e}")))?;
    if exited > 0 {
        return Err(CliError::runtime(format!(
            "bench: {exited} of the `run` processes exited during the measure"
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads the counters: the server's WAL, this database's commits and the
/// table's row updates (0 while it does not exist).
async fn counters(client: &tokio_postgres::Client, table: &str) -> Result<Counters, CliError> {
    let failed = |e: tokio_postgres::Error| CliError::runtime(format!("bench: statistics: {e}"));
    let row = client
        .query_one(
            "SELECT (SELECT wal_bytes FROM pg_stat_wal)::float8, \
                    (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())::float8, \
                    COALESCE((SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = to_regclass($1)), 0)::float8",
            &[&table],
        )
        .await
        .map_err(failed)?;
    Ok(Counters {
        wal_bytes: row.get(0),
        commits: row.get(1),
        row_updates: row.get(2),
        at: Some(Instant::now()),
    })
}

/// How many of the set's leases are held and unexpired now: a linked
/// row (renewing by liveness, DESIGN §9 "Renewal by liveness") while its holder's liveness row
/// at its term is.
async fn held(client: &tokio_postgres::Client, table: &str) -> Result<i64, CliError> {
    let link = picolease::sql::LINK_BASE;
    let prefix = picolease::sql::MEMBER_PREFIX;
    let sql = format!(
        "WITH now AS (SELECT (extract(epoch FROM statement_timestamp()) * 1000)::bigint AS ms) \
         SELECT count(*) FROM {table} AS r, now WHERE r.holder IS NOT NULL AND r.name NOT LIKE 'picolease.%' \
         AND CASE WHEN r.expires_at < {link} THEN r.expires_at > now.ms \
         ELSE EXISTS (SELECT 1 FROM {table} AS l WHERE l.holder = r.holder \
         AND l.epoch = r.expires_at - {link} AND l.expires_at < {link} AND l.expires_at > now.ms \
         AND (l.name = '{prefix}' || l.holder OR l.name LIKE '{prefix}' || l.holder || ' %')) END"
    );
    let row = client
        .query_one(&sql, &[])
        .await
        .map_err(|e| CliError::runtime(format!("bench: reading {table}: {e}")))?;
    Ok(row.get(0))
}
