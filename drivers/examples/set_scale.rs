//! Lease sets at scale: K contenders share N leases (10 and 10,000 by
//! default) on SQLite and PostgreSQL. Measures how long until every lease
//! is held and the shares are balanced, the statements each contender
//! sends per interval in steady state, its connections, the recovery
//! after one contender crashes, and how the batch statements' time grows
//! with the number of leases (on plain connections, prepared statements).
//! Each figure is printed beside its goal with PASS or MISS. A benchmark:
//! nothing here asserts a timing.
//!
//! Reproduce with:
//!
//! ```text
//! cargo run --release -p picolease --example set_scale -- [--db sqlite|postgres|both] [--leases N] [--contenders K]
//! ```
//!
//! PostgreSQL at `postgres://postgres@127.0.0.1:5432/test` (or
//! `PICOLEASE_PG_URL`), in a scratch table `picolease_scale_<pid>` dropped
//! at the end; SQLite in a temporary file.

use std::time::{Duration, Instant};

use picolease::postgres::{PgConnector, PgLeaseSet};
use picolease::set::SetSnapshot;
use picolease::sql::{
    batch_names, batch_pairs, BatchBindings, Dialect, Param, Statement, Statements, Value,
};
use picolease::sqlite::{Database, LeaseTable, SqliteLeaseSet};
use picolease::{Epoch, HolderId, LeaseName, SetConfig, TableName};
use tokio::runtime::Runtime;
use tokio_postgres::types::{ToSql, Type};

const TTL: Duration = Duration::from_secs(2);
const INTERVAL: Duration = Duration::from_millis(500);
/// How often the harness reads the contenders' status.
const POLL: Duration = Duration::from_millis(25);
/// Give up waiting for a state after this many intervals.
const WAIT_LIMIT: u32 = 120;
/// Steady state is measured over this many intervals.
const STEADY: u32 = 12;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn url() -> String {
    std::env::var("PICOLEASE_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

struct Args {
    sqlite: bool,
    postgres: bool,
    leases: usize,
    contenders: usize,
}

fn args() -> Result<Args> {
    let mut out = Args {
        sqlite: true,
        postgres: true,
        leases: 10_000,
        contenders: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--db" => match value()?.as_str() {
                "sqlite" => (out.sqlite, out.postgres) = (true, false),
                "postgres" => (out.sqlite, out.postgres) = (false, true),
                "both" => (out.sqlite, out.postgres) = (true, true),
                other => return Err(format!("--db {other}: sqlite, postgres or both").into()),
            },
            "--leases" => out.leases = value()?.parse()?,
            "--contenders" => out.contenders = value()?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if out.contenders < 2 || out.leases == 0 {
        return Err("need at least 2 contenders and 1 lease".into());
    }
    Ok(out)
}

fn template(holder: &str) -> SetConfig {
    SetConfig::with_ttl(HolderId::new(holder).unwrap(), TTL).interval(INTERVAL)
}

fn lease_names(n: usize) -> Vec<LeaseName> {
    (0..n)
        .map(|i| LeaseName::new(&format!("lease-{i:05}")).unwrap())
        .collect()
}

fn iv(d: Duration) -> f64 {
    d.as_secs_f64() / INTERVAL.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One contender of either kind.
enum Node {
    Sqlite(SqliteLeaseSet),
    Pg(PgLeaseSet),
}

impl Node {
    fn status(&self) -> SetSnapshot {
        match self {
            Node::Sqlite(s) => s.snapshot(),
            Node::Pg(s) => s.snapshot(),
        }
    }

    fn abort(self) {
        match self {
            Node::Sqlite(s) => s.abort(),
            Node::Pg(s) => s.abort(),
        }
    }

    fn shutdown(self, rt: Option<&Runtime>) -> Result<()> {
        match self {
            Node::Sqlite(s) => s.shutdown()?,
            Node::Pg(s) => rt
                .expect("a runtime for PostgreSQL")
                .block_on(s.shutdown())?,
        }
        Ok(())
    }
}

/// Held counts and statements sent, per contender.
fn snapshot(nodes: &[Node]) -> Vec<(usize, u64)> {
    nodes
        .iter()
        .map(|n| {
            let s = n.status();
            (s.held.len(), s.statements)
        })
        .collect()
}

fn all_held(snap: &[(usize, u64)], n: usize) -> bool {
    snap.iter().map(|s| s.0).sum::<usize>() == n
}

fn balanced(snap: &[(usize, u64)], n: usize) -> bool {
    let max = snap.iter().map(|s| s.0).max().unwrap_or(0);
    let min = snap.iter().map(|s| s.0).min().unwrap_or(0);
    all_held(snap, n) && max - min <= 1
}

/// Polls until `done`, at most [`WAIT_LIMIT`] intervals after `from`:
/// the time since `from`, or `None`.
fn wait_for(
    nodes: &[Node],
    from: Instant,
    probe: &mut dyn FnMut(),
    mut done: impl FnMut(&[(usize, u64)]) -> bool,
) -> Option<Duration> {
    let mut polls = 0u32;
    loop {
        polls += 1;
        if polls % 10 == 0 {
            probe();
        }
        let snap = snapshot(nodes);
        if done(&snap) {
            return Some(from.elapsed());
        }
        if from.elapsed() > INTERVAL * WAIT_LIMIT {
            eprintln!("  gave up; held per contender: {:?}", counts(&snap));
            return None;
        }
        std::thread::sleep(POLL);
    }
}

fn counts(snap: &[(usize, u64)]) -> Vec<usize> {
    snap.iter().map(|s| s.0).collect()
}

/// The measured figures of one database's contenders.
#[derive(Default)]
struct Figures {
    held: Option<Duration>,
    balanced: Option<Duration>,
    balanced_counts: Vec<usize>,
    statements_per_interval: Option<(f64, f64, f64)>,
    connections: Option<f64>,
    after_abort_held: Option<Duration>,
    after_abort_balanced: Option<Duration>,
    after_abort_counts: Vec<usize>,
    /// Balanced at both ends of the steady window (else figure 3 is not
    /// a steady-state figure).
    steady_valid: bool,
    /// Every lease held and balanced just before the abort (else figure 5
    /// measures something else).
    abort_valid: bool,
    /// What the database's backends were doing meanwhile.
    note: Option<String>,
}

/// Starts the contenders, measures 1 to 5, shuts them down.
fn contend(
    label: &str,
    n: usize,
    k: usize,
    start: &mut dyn FnMut(usize) -> Result<Node>,
    connections: &mut dyn FnMut() -> Option<i64>,
    probe: &mut dyn FnMut(),
    rt: Option<&Runtime>,
) -> Result<Figures> {
    let mut f = Figures::default();
    let before = connections();
    eprintln!("[{label}] starting {k} contenders on {n} leases…");
    let t0 = Instant::now();
    let mut nodes = Vec::with_capacity(k);
    for i in 0..k {
        nodes.push(start(i)?);
    }
    eprintln!(
        "[{label}] started in {:.1} ms; waiting for all {n} leases to be held…",
        ms(t0.elapsed())
    );
    f.held = wait_for(&nodes, t0, probe, |s| all_held(s, n));
    eprintln!("[{label}] all held: {:?}; waiting for balance…", f.held);
    f.balanced = wait_for(&nodes, t0, probe, |s| balanced(s, n));
    f.balanced_counts = counts(&snapshot(&nodes));
    eprintln!(
        "[{label}] balanced: {:?} {:?}; steady state for {STEADY} intervals…",
        f.balanced, f.balanced_counts
    );
    let s0 = snapshot(&nodes);
    let t1 = Instant::now();
    std::thread::sleep(INTERVAL * STEADY);
    let s1 = snapshot(&nodes);
    let intervals = iv(t1.elapsed());
    let rates: Vec<f64> = s0
        .iter()
        .zip(&s1)
        .map(|(a, b)| (b.1 - a.1) as f64 / intervals)
        .collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let max = rates.iter().copied().fold(0.0, f64::max);
    f.statements_per_interval = Some((mean, min, max));
    f.steady_valid = balanced(&s0, n) && balanced(&s1, n);
    if !balanced(&s1, n) {
        eprintln!(
            "[{label}] note: not balanced at the end of the steady window: {:?}",
            counts(&s1)
        );
    }
    if let (Some(b), Some(a)) = (before, connections()) {
        f.connections = Some((a - b) as f64 / k as f64);
    }
    eprintln!("[{label}] aborting contender 0 (a crash)…");
    f.abort_valid = balanced(&snapshot(&nodes), n);
    let crashed = nodes.remove(0);
    let t2 = Instant::now();
    crashed.abort();
    f.after_abort_held = wait_for(&nodes, t2, probe, |s| all_held(s, n));
    eprintln!(
        "[{label}] all held again: {:?}; waiting for balance…",
        f.after_abort_held
    );
    f.after_abort_balanced = wait_for(&nodes, t2, probe, |s| balanced(s, n));
    f.after_abort_counts = counts(&snapshot(&nodes));
    eprintln!(
        "[{label}] balanced again: {:?} {:?}; shutting down…",
        f.after_abort_balanced, f.after_abort_counts
    );
    let mut first_error = None;
    for node in nodes {
        if let Err(e) = node.shutdown(rt) {
            eprintln!("[{label}] shutdown: {e}");
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(f),
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

fn row(figure: &str, measured: &str, goal: &str, pass: Option<bool>) {
    let v = pass.map_or("-", verdict);
    println!("  {figure:<48} {measured:<42} {goal:<22} {v}");
}

fn time_row(figure: &str, d: Option<Duration>, goal_iv: f64) {
    let goal = format!("≤ {goal_iv} intervals");
    match d {
        Some(d) => row(
            figure,
            &format!("{:.2} s = {:.2} intervals", d.as_secs_f64(), iv(d)),
            &goal,
            Some(iv(d) <= goal_iv),
        ),
        None => row(
            figure,
            &format!("not within {WAIT_LIMIT} intervals"),
            &goal,
            Some(false),
        ),
    }
}

fn print_figures(name: &str, n: usize, k: usize, f: &Figures, renew_1000: Option<Duration>) {
    println!();
    println!(
        "## {name}: {n} leases, {k} contenders, ttl {TTL:?}, interval {INTERVAL:?} (status polled every {POLL:?})"
    );
    println!(
        "  {:<48} {:<42} {:<22} result",
        "figure", "measured", "goal"
    );
    time_row("1 all leases held, after start", f.held, 3.0);
    time_row("2 balanced (max-min <= 1), after start", f.balanced, 10.0);
    println!("    held per contender at balance: {:?}", f.balanced_counts);
    match f.statements_per_interval {
        Some((mean, min, max)) if f.steady_valid => row(
            &format!("3 statements/contender/interval (steady, {STEADY} iv)"),
            &format!("mean {mean:.2} (min {min:.2}, max {max:.2})"),
            "≤ 3",
            Some(max <= 3.0),
        ),
        Some((mean, min, max)) => println!(
            "  {:<48} {:<42} {:<22} n/a: never balanced, no steady state",
            format!("3 statements/contender/interval ({STEADY} iv)"),
            format!("mean {mean:.2} (min {min:.2}, max {max:.2})"),
            "≤ 3",
        ),
        None => row("3 statements/contender/interval", "n/a", "≤ 3", Some(false)),
    }
    match f.connections {
        Some(c) => row(
            "4 connections per contender",
            &format!("{c:.2} (pg_stat_activity delta / {k})"),
            "≤ 2",
            Some(c <= 2.0),
        ),
        None => row(
            "4 connections per contender",
            "1 by construction (one thread, one conn)",
            "≤ 2",
            Some(true),
        ),
    }
    let goal = TTL + INTERVAL;
    match f.after_abort_held {
        Some(d) if f.abort_valid => row(
            "5a after abort of one: all held again",
            &format!("{:.2} s = {:.2} intervals", d.as_secs_f64(), iv(d)),
            &format!("≤ ttl + 1 iv = {:.1} s", goal.as_secs_f64()),
            Some(d <= goal),
        ),
        Some(d) => println!(
            "  {:<48} {:<42} {:<22} n/a: not balanced before the abort",
            "5a after abort of one: all held again",
            format!("{:.2} s = {:.2} intervals", d.as_secs_f64(), iv(d)),
            format!("≤ ttl + 1 iv = {:.1} s", goal.as_secs_f64()),
        ),
        None => row(
            "5a after abort of one: all held again",
            &format!("not within {WAIT_LIMIT} intervals"),
            &format!("≤ ttl + 1 iv = {:.1} s", goal.as_secs_f64()),
            Some(false),
        ),
    }
    match f.after_abort_balanced {
        Some(d) => row(
            "5b after abort of one: balanced again",
            &format!("{:.2} s = {:.2} intervals", d.as_secs_f64(), iv(d)),
            "(no goal stated)",
            None,
        ),
        None => row(
            "5b after abort of one: balanced again",
            &format!("not within {WAIT_LIMIT} intervals"),
            "(no goal stated)",
            None,
        ),
    }
    println!(
        "    held per remaining contender: {:?}",
        f.after_abort_counts
    );
    if let Some(note) = &f.note {
        println!("    {note}");
    }
    if let Some(d) = renew_1000 {
        row(
            "6 one renew_batch of 1,000 leases (median/20)",
            &format!("{:.3} ms", ms(d)),
            "≤ 10 ms",
            Some(d <= Duration::from_millis(10)),
        );
    }
}

// ---------------------------------------------------------------- SQLite

fn sqlite_values<'a>(
    statement: &'a Statement,
    bindings: &'a BatchBindings<'a>,
) -> Vec<rusqlite::types::Value> {
    statement
        .bind_batch(bindings)
        .map(|v| match v {
            Value::Text(s) => rusqlite::types::Value::Text(s.into()),
            Value::Int(i) => rusqlite::types::Value::Integer(i),
        })
        .collect()
}

/// Runs `statement` to completion; its time and its `(name, epoch)` rows
/// (epoch from column `epoch_col`, when given).
fn sqlite_run(
    conn: &rusqlite::Connection,
    statement: &Statement,
    bindings: &BatchBindings<'_>,
    epoch_col: Option<usize>,
) -> Result<(Duration, Vec<(String, i64)>)> {
    let values = sqlite_values(statement, bindings);
    let started = Instant::now();
    let mut stmt = conn.prepare_cached(statement.sql())?;
    let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let name: String = r.get(0)?;
        let epoch = match epoch_col {
            Some(c) => r.get(c)?,
            None => 0,
        };
        out.push((name, epoch));
    }
    Ok((started.elapsed(), out))
}

const SIZES: [usize; 4] = [1, 100, 1_000, 10_000];
const RUNS: usize = 5;

/// Medians per size: acquire, renew, survey (all held), survey (all free).
type Growth = Vec<(usize, [Duration; 4])>;

fn growth_sqlite(path: &std::path::Path) -> Result<Growth> {
    let db = Database::file(path);
    let table = LeaseTable::open(&db)?;
    let conn = table.connection();
    let statements = Statements::new(Dialect::Sqlite, &db.table);
    let mut out = Vec::new();
    for n in SIZES {
        eprintln!("[sqlite] statement growth at {n} leases…");
        let names: Vec<String> = (0..n).map(|i| format!("g{n}-{i:05}")).collect();
        let json_names = batch_names(names.iter().map(String::as_str));
        let mut times: [Vec<Duration>; 4] = Default::default();
        for _ in 0..RUNS {
            let b = BatchBindings {
                holder: "bench",
                ttl_millis: TTL.as_millis() as i64,
                batch: &json_names,
                stale_millis: 1000,
            };
            let (t, rows) = sqlite_run(conn, statements.acquire_batch(), &b, Some(2))?;
            assert_eq!(rows.len(), n, "acquire answers every name");
            times[0].push(t);
            let pairs = batch_pairs(
                rows.iter()
                    .map(|(name, e)| (name.as_str(), Epoch::new(*e as u64))),
            );
            let b = BatchBindings { batch: &pairs, ..b };
            let (t, rows) = sqlite_run(conn, statements.renew_batch(), &b, None)?;
            assert_eq!(rows.len(), n, "renew renews every held name");
            times[1].push(t);
            let (t, _) = sqlite_run(conn, statements.survey(), &b, None)?;
            times[2].push(t);
            let (_, rows) = sqlite_run(conn, statements.release_batch(), &b, None)?;
            assert_eq!(rows.len(), n, "release frees every held name");
            let (t, rows) = sqlite_run(conn, statements.survey(), &b, None)?;
            assert!(rows.len() >= n, "the survey lists every free row");
            times[3].push(t);
        }
        conn.execute(&format!("DELETE FROM {}", db.table), [])?;
        out.push((n, times.map(median)));
    }
    Ok(out)
}

fn run_sqlite(a: &Args) -> Result<(Figures, Growth)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("scale.db");
    let db = Database::file(&path);
    // Create the file and table once, before the contenders race for it.
    drop(LeaseTable::open(&db)?);
    let names = lease_names(a.leases);
    let mut start = |i: usize| -> Result<Node> {
        let set = SqliteLeaseSet::builder(template(&format!("c{i}")), names.clone(), db.clone())
            .start()?;
        Ok(Node::Sqlite(set))
    };
    let figures = contend(
        "sqlite",
        a.leases,
        a.contenders,
        &mut start,
        &mut || None,
        &mut || {},
        None,
    )?;
    let growth = growth_sqlite(&dir.path().join("growth.db"))?;
    Ok((figures, growth))
}

// ------------------------------------------------------------ PostgreSQL

fn pg_type(p: Param) -> Type {
    match p {
        Param::Lease | Param::Holder | Param::Batch => Type::TEXT,
        _ => Type::INT8,
    }
}

struct Prepared {
    acquire: tokio_postgres::Statement,
    renew: tokio_postgres::Statement,
    release: tokio_postgres::Statement,
    survey: tokio_postgres::Statement,
}

async fn prepare(client: &tokio_postgres::Client, s: &Statements) -> Result<Prepared> {
    let p = |st: &Statement| {
        let types: Vec<Type> = st.params().iter().copied().map(pg_type).collect();
        let sql = st.sql().to_string();
        async move { client.prepare_typed(&sql, &types).await }
    };
    Ok(Prepared {
        acquire: p(s.acquire_batch()).await?,
        renew: p(s.renew_batch()).await?,
        release: p(s.release_batch()).await?,
        survey: p(s.survey()).await?,
    })
}

async fn pg_run(
    client: &tokio_postgres::Client,
    prepared: &tokio_postgres::Statement,
    statement: &Statement,
    bindings: &BatchBindings<'_>,
    epoch_col: Option<usize>,
) -> Result<(Duration, Vec<(String, i64)>)> {
    let values: Vec<Value> = statement.bind_batch(bindings).collect();
    let params: Vec<&(dyn ToSql + Sync)> = values
        .iter()
        .map(|v| match v {
            Value::Text(s) => s as &(dyn ToSql + Sync),
            Value::Int(i) => i,
        })
        .collect();
    let started = Instant::now();
    let rows = client.query(prepared, &params).await?;
    let took = started.elapsed();
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let epoch = match epoch_col {
            Some(c) => r.try_get::<_, i64>(c)?,
            None => 0,
        };
        out.push((r.try_get::<_, String>(0)?, epoch));
    }
    Ok((took, out))
}

/// Figure 6: one renew batch of 1,000 leases held by one holder, median
/// of 20 runs.
async fn renew_1000(client: &tokio_postgres::Client, table: &TableName) -> Result<Duration> {
    let s = Statements::new(Dialect::Postgres, table);
    let p = prepare(client, &s).await?;
    let names: Vec<String> = (0..1000).map(|i| format!("r-{i:04}")).collect();
    let json = batch_names(names.iter().map(String::as_str));
    let b = BatchBindings {
        holder: "renewer",
        ttl_millis: TTL.as_millis() as i64,
        batch: &json,
        stale_millis: 1000,
    };
    let (_, rows) = pg_run(client, &p.acquire, s.acquire_batch(), &b, Some(2)).await?;
    assert_eq!(rows.len(), 1000);
    let pairs = batch_pairs(
        rows.iter()
            .map(|(name, e)| (name.as_str(), Epoch::new(*e as u64))),
    );
    let b = BatchBindings { batch: &pairs, ..b };
    let mut times = Vec::new();
    for _ in 0..20 {
        let (t, rows) = pg_run(client, &p.renew, s.renew_batch(), &b, None).await?;
        assert_eq!(rows.len(), 1000, "every lease renewed");
        times.push(t);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pg_run(client, &p.release, s.release_batch(), &b, None).await?;
    client.batch_execute(&format!("TRUNCATE {table}")).await?;
    Ok(median(times))
}

async fn growth_pg(client: &tokio_postgres::Client, table: &TableName) -> Result<Growth> {
    let s = Statements::new(Dialect::Postgres, table);
    let p = prepare(client, &s).await?;
    let mut out = Vec::new();
    for n in SIZES {
        eprintln!("[postgres] statement growth at {n} leases…");
        let names: Vec<String> = (0..n).map(|i| format!("g{n}-{i:05}")).collect();
        let json_names = batch_names(names.iter().map(String::as_str));
        let mut times: [Vec<Duration>; 4] = Default::default();
        for _ in 0..RUNS {
            let b = BatchBindings {
                holder: "bench",
                ttl_millis: TTL.as_millis() as i64,
                batch: &json_names,
                stale_millis: 1000,
            };
            let (t, rows) = pg_run(client, &p.acquire, s.acquire_batch(), &b, Some(2)).await?;
            assert_eq!(rows.len(), n, "acquire answers every name");
            times[0].push(t);
            let pairs = batch_pairs(
                rows.iter()
                    .map(|(name, e)| (name.as_str(), Epoch::new(*e as u64))),
            );
            let b = BatchBindings { batch: &pairs, ..b };
            let (t, rows) = pg_run(client, &p.renew, s.renew_batch(), &b, None).await?;
            assert_eq!(rows.len(), n, "renew renews every held name");
            times[1].push(t);
            let (t, _) = pg_run(client, &p.survey, s.survey(), &b, None).await?;
            times[2].push(t);
            let (_, rows) = pg_run(client, &p.release, s.release_batch(), &b, None).await?;
            assert_eq!(rows.len(), n, "release frees every held name");
            let (t, rows) = pg_run(client, &p.survey, s.survey(), &b, None).await?;
            assert!(rows.len() >= n, "the survey lists every free row");
            times[3].push(t);
        }
        client.batch_execute(&format!("TRUNCATE {table}")).await?;
        out.push((n, times.map(median)));
    }
    Ok(out)
}

/// Drops the scratch table however the run ends (a panic included).
struct DropTable(TableName);

impl Drop for DropTable {
    fn drop(&mut self) {
        let table = self.0.clone();
        let done = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let client = PgConnector::new(&url())?.connect_client().await?;
                client
                    .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
                    .await?;
                Ok(())
            })
        })
        .join();
        match done {
            Ok(Ok(())) => eprintln!("[postgres] dropped table {}", self.0),
            Ok(Err(e)) => eprintln!("[postgres] could not drop table {}: {e}", self.0),
            Err(_) => eprintln!("[postgres] could not drop table {}", self.0),
        }
    }
}

/// What the picolease backends were doing while the harness waited for a
/// state (sampled every ten polls).
#[derive(Default)]
struct Diag {
    samples: u32,
    active: i64,
    lock_waits: i64,
    oldest_ms: f64,
    pids: std::collections::BTreeSet<i32>,
    /// Samples in which two picolease statements waited on each other (a
    /// deadlock the request timeout cancels before PostgreSQL's
    /// `deadlock_timeout` would detect it), and the statements' kinds.
    cycles: u32,
    cycle_kinds: std::collections::BTreeSet<String>,
}

impl Diag {
    fn sample(&mut self, rt: &Runtime, admin: &tokio_postgres::Client) {
        let rows = rt.block_on(admin.query(
            "SELECT pid, coalesce(state = 'active', false), coalesce(wait_event_type = 'Lock', false), \
                    coalesce(extract(epoch from now() - query_start) * 1000, 0)::float8, \
                    pg_blocking_pids(pid), split_part(ltrim(query), ' ', 1) \
             FROM pg_stat_activity \
             WHERE application_name = 'picolease' AND datname = current_database()",
            &[],
        ));
        let Ok(rows) = rows else { return };
        self.samples += 1;
        let blocked_by: std::collections::HashMap<i32, (Vec<i32>, String)> = rows
            .iter()
            .map(|r| (r.get(0), (r.get(4), r.get(5))))
            .collect();
        let mut cycle = false;
        for (pid, (blockers, kind)) in &blocked_by {
            for b in blockers {
                if let Some((theirs, their_kind)) = blocked_by.get(b) {
                    if theirs.contains(pid) {
                        cycle = true;
                        let mut pair = [kind.as_str(), their_kind.as_str()];
                        pair.sort();
                        self.cycle_kinds.insert(pair.join(" <-> "));
                    }
                }
            }
        }
        self.cycles += u32::from(cycle);
        for r in rows {
            self.pids.insert(r.get(0));
            if r.get::<_, bool>(1) {
                self.active += 1;
                self.oldest_ms = self.oldest_ms.max(r.get(3));
                if r.get::<_, bool>(2) {
                    self.lock_waits += 1;
                }
            }
        }
    }

    fn report(&self) -> Option<String> {
        if self.samples == 0 {
            return None;
        }
        let n = f64::from(self.samples);
        Some(format!(
            "while waiting ({} samples): {:.1} picolease statements running on average, \
             {:.1} of them waiting on a lock; longest running {:.0} ms; {} distinct backends seen \
             (each reconnect after a cancelled statement is a new one); two statements waiting \
             on each other (a deadlock, cancelled by the request timeout before deadlock_timeout \
             detects it) in {} samples: {:?}",
            self.samples,
            self.active as f64 / n,
            self.lock_waits as f64 / n,
            self.oldest_ms,
            self.pids.len(),
            self.cycles,
            self.cycle_kinds
        ))
    }
}

async fn picolease_connections(client: &tokio_postgres::Client) -> Option<i64> {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name = 'picolease' AND datname = current_database()",
            &[],
        )
        .await
        .ok()
        .map(|r| r.get(0))
}

fn run_pg(a: &Args) -> Result<(Figures, Duration, Growth)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let table = TableName::new(&format!("picolease_scale_{}", std::process::id()))?;
    let admin = rt.block_on(async { PgConnector::new(&url())?.connect_client().await })?;
    rt.block_on(picolease::postgres::init(&admin, &table))?;
    let _drop = DropTable(table.clone());
    let names = lease_names(a.leases);
    let connector = PgConnector::new(&url())?;
    let mut start = |i: usize| -> Result<Node> {
        let _enter = rt.enter();
        let set = PgLeaseSet::builder(template(&format!("c{i}")), names.clone(), connector.clone())
            .table(table.clone())
            .start()?;
        Ok(Node::Pg(set))
    };
    let mut connections = || rt.block_on(picolease_connections(&admin));
    let mut diag = Diag::default();
    let mut probe = || diag.sample(&rt, &admin);
    let figures = contend(
        "postgres",
        a.leases,
        a.contenders,
        &mut start,
        &mut connections,
        &mut probe,
        Some(&rt),
    )?;
    let mut figures = figures;
    figures.note = diag.report();
    rt.block_on(async { admin.batch_execute(&format!("TRUNCATE {table}")).await })?;
    eprintln!("[postgres] renew_batch of 1,000 leases, 20 runs…");
    let plain = rt.block_on(async { PgConnector::new(&url())?.connect_client().await })?;
    let renew = rt.block_on(renew_1000(&plain, &table))?;
    let growth = rt.block_on(growth_pg(&plain, &table))?;
    Ok((figures, renew, growth))
}

fn print_growth(name: &str, g: &Growth) {
    println!();
    println!("## {name}: batch statement time by number of leases (plain connection, prepared, median of {RUNS})");
    println!(
        "  {:>7} {:>14} {:>14} {:>18} {:>18}",
        "leases", "acquire_batch", "renew_batch", "survey (all held)", "survey (all free)"
    );
    for (n, [a, r, sh, sf]) in g {
        println!(
            "  {n:>7} {:>11.3} ms {:>11.3} ms {:>15.3} ms {:>15.3} ms",
            ms(*a),
            ms(*r),
            ms(*sh),
            ms(*sf)
        );
    }
}

fn main() -> Result<()> {
    let a = args()?;
    println!("# cargo run --release -p picolease --example set_scale -- --db {} --leases {} --contenders {}",
        match (a.sqlite, a.postgres) {
            (true, true) => "both",
            (true, false) => "sqlite",
            _ => "postgres",
        },
        a.leases,
        a.contenders
    );
    println!(
        "# {} CPUs; goals from the issue; a benchmark, no assertions",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if a.sqlite {
        let (f, g) = run_sqlite(&a)?;
        print_figures("SQLite (temp file)", a.leases, a.contenders, &f, None);
        print_growth("SQLite", &g);
    }
    if a.postgres {
        let (f, renew, g) = run_pg(&a)?;
        print_figures(
            &format!("PostgreSQL ({})", url()),
            a.leases,
            a.contenders,
            &f,
            Some(renew),
        );
        print_growth("PostgreSQL", &g);
    }
    Ok(())
}
