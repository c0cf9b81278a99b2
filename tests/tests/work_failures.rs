//! Work that fails (DESIGN §5 "Work that fails") through the library, on
//! a SQLite file, on the PostgreSQL server at 127.0.0.1:5432 and on the
//! MariaDB server at 127.0.0.1:3306 (a table per test; FAILS, not skips,
//! when a server is unreachable):
//!
//! - a leader whose gated task panics at every start ("the object store
//!   is unreachable from this node") restarts it under its restart
//!   policy, escalates, and a healthy contender leads within the policy's
//!   escalation bound + two intervals; the escalated node's `follower`
//!   says `escalated`;
//! - a leader whose `health_probe` starts failing hands the lease to a
//!   healthy contender within the probe's interval + three intervals
//!   (its announcement may be one interval away), by a planned handover
//!   (`follower` reason `unhealthy`);
//! - a lease set's member whose `health_probe` starts failing hands every
//!   lease it leads to the healthy member within the probe's interval +
//!   two intervals (DESIGN §9 "Members' health").
//!
//! The times are printed: `cargo test -p picolease-tests --test
//! integration work_failures:: -- --nocapture`.

use crate::pg_support;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use picolease::server::{self, Connects, Database};
use picolease::set::SetView;
use picolease::sqlite::SqliteLeaseSet;
use picolease::sqlite::{Database as SqliteFile, SqliteLease};
use picolease::supervise::RestartPolicy;
use picolease::{Config, Demotion, HolderId, LeaseName, LeaseView, Role, SetConfig, TableName};

const TTL: Duration = Duration::from_secs(2);
const INTERVAL: Duration = Duration::from_millis(500);
/// A loaded 2-core machine's slack on each bound.
const SLACK: Duration = Duration::from_millis(500);
const MYSQL: &str = "mysql://root@127.0.0.1:3306/test";

fn config(holder: &str) -> Config {
    Config::with_ttl(
        LeaseName::new("work").unwrap(),
        HolderId::new(holder).unwrap(),
        TTL,
    )
}

/// An async probe that passes while `ok` holds, else fails with `reason`.
fn async_probe(
    ok: &Arc<AtomicBool>,
    reason: &'static str,
) -> impl Fn() -> std::future::Ready<Result<(), String>> + Send + Sync + 'static {
    let ok = Arc::clone(ok);
    move || std::future::ready(blocking_probe(&ok, reason)())
}

/// A blocking probe that passes while `ok` holds, else fails with `reason`.
fn blocking_probe(
    ok: &Arc<AtomicBool>,
    reason: &'static str,
) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
    let ok = Arc::clone(ok);
    move || {
        if ok.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(reason.to_string())
        }
    }
}

/// Four leases of a set, `h0` … `h3`.
fn set_leases() -> Vec<LeaseName> {
    (0..4)
        .map(|i| LeaseName::new(&format!("h{i}")).unwrap())
        .collect()
}

fn set_config(holder: &str) -> SetConfig {
    SetConfig::with_ttl(HolderId::new(holder).unwrap(), TTL)
}

/// How many of the set's leases `view` leads.
fn leads(view: &SetView) -> usize {
    set_leases()
        .iter()
        .filter(|l| view.leadership(l).is_some_and(|l| l.is_leader()))
        .count()
}

/// Restarts after 50 ms and 100 ms, then escalates; stands aside 30 s.
fn policy() -> RestartPolicy {
    RestartPolicy {
        intensity: 2,
        period: Duration::from_secs(30),
        backoff: Duration::from_millis(50),
        max_backoff: Duration::from_secs(1),
        cool_down: Duration::from_secs(30),
    }
}

/// Polls `leads` until it holds, at most 15 s.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{what}: timed out"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------- SQLite

#[test]
fn sqlite_a_task_that_panics_on_every_start_moves_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let file = || SqliteFile::file(dir.path().join("leases.db"));
    let starts = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&starts);
    let sick = SqliteLease::builder(config("sick"), file())
        .restart_policy(policy())
        .while_leader(move |_ctx| -> () {
            counted.fetch_add(1, Ordering::SeqCst);
            panic!("the object store is unreachable from this node");
        })
        .start()
        .unwrap();
    let transitions = sick.subscribe();
    wait_until("sick leads", || sick.leadership().is_leader());
    let healthy = SqliteLease::builder(config("healthy"), file())
        .while_leader(|ctx| {
            ctx.cancellation().wait();
        })
        .start()
        .unwrap();
    let from = Instant::now();
    wait_until("healthy leads", || healthy.leadership().is_leader());
    let took = from.elapsed();
    let bound = policy().escalation_bound() + INTERVAL * 2 + SLACK;
    println!("SQLite: a task that panics at every start: the healthy node led {took:?} after it started (bound {bound:?})");
    assert!(took <= bound, "{took:?} > {bound:?}");
    assert_eq!(
        starts.load(Ordering::SeqCst),
        3,
        "one start and two restarts"
    );
    let reasons = reasons(transitions);
    assert!(reasons.contains(&Demotion::Escalated), "{reasons:?}");
    sick.shutdown().unwrap();
    healthy.shutdown().unwrap();
}

#[test]
fn sqlite_an_unhealthy_leader_hands_over() {
    let dir = tempfile::tempdir().unwrap();
    let file = || SqliteFile::file(dir.path().join("leases.db"));
    let ok = Arc::new(AtomicBool::new(true));
    let sick = SqliteLease::builder(config("sick"), file())
        .health_probe(
            Duration::from_millis(50),
            Duration::from_secs(1),
            blocking_probe(&ok, "the disk is full"),
        )
        .start()
        .unwrap();
    wait_until("sick leads", || sick.leadership().is_leader());
    let healthy = SqliteLease::builder(config("healthy"), file())
        .health_probe(Duration::from_millis(50), Duration::from_secs(1), || Ok(()))
        .start()
        .unwrap();
    wait_until("healthy follows", || healthy.leadership().epoch.is_some());
    let from = Instant::now();
    ok.store(false, Ordering::SeqCst);
    wait_until("healthy leads", || healthy.leadership().is_leader());
    let took = from.elapsed();
    let bound = Duration::from_millis(50) + INTERVAL * 3 + SLACK;
    println!("SQLite: an unhealthy leader: the healthy node led {took:?} after the probe failed (bound {bound:?})");
    assert!(took <= bound, "{took:?} > {bound:?}");
    assert_eq!(sick.leadership().role, Role::Follower);
    sick.shutdown().unwrap();
    healthy.shutdown().unwrap();
}

#[test]
fn sqlite_an_unhealthy_set_member_hands_its_leases_over() {
    let dir = tempfile::tempdir().unwrap();
    let file = || SqliteFile::file(dir.path().join("leases.db"));
    let ok = Arc::new(AtomicBool::new(true));
    let sick = SqliteLeaseSet::builder(set_config("sick"), set_leases(), file())
        .health_probe(
            Duration::from_millis(50),
            Duration::from_secs(1),
            blocking_probe(&ok, "the object store is unreachable"),
        )
        .start()
        .unwrap();
    let healthy = SqliteLeaseSet::builder(set_config("healthy"), set_leases(), file())
        .health_probe(Duration::from_millis(50), Duration::from_secs(1), || Ok(()))
        .start()
        .unwrap();
    wait_until("two leases each", || {
        leads(&sick) == 2 && leads(&healthy) == 2
    });
    let from = Instant::now();
    ok.store(false, Ordering::SeqCst);
    wait_until("the healthy member leads all four", || leads(&healthy) == 4);
    let took = from.elapsed();
    let bound = Duration::from_millis(50) + INTERVAL * 2 + SLACK;
    println!("SQLite: an unhealthy set member: the healthy one led all four {took:?} after the probe failed (bound {bound:?})");
    assert!(took <= bound, "{took:?} > {bound:?}");
    assert_eq!(leads(&sick), 0);
    // Healthy again, it takes its share back.
    ok.store(true, Ordering::SeqCst);
    wait_until("two leases each again", || {
        leads(&sick) == 2 && leads(&healthy) == 2
    });
    sick.shutdown().unwrap();
    healthy.shutdown().unwrap();
}

/// A lone node whose work fails at every start escalates, has nowhere to
/// hand the lease, and keeps it (a degraded leader): its work is still
/// started again, after the longest backoff each time.
#[test]
fn sqlite_a_degraded_leader_still_tries_its_work() {
    let dir = tempfile::tempdir().unwrap();
    let starts = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&starts);
    let policy = RestartPolicy {
        intensity: 0,
        backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        ..policy()
    };
    let lone = SqliteLease::builder(config("lone"), SqliteFile::file(dir.path().join("l.db")))
        .restart_policy(policy)
        .while_leader(move |_ctx| -> Result<(), String> {
            counted.fetch_add(1, Ordering::SeqCst);
            Err("the object store is unreachable".into())
        })
        .start()
        .unwrap();
    // It escalates at once and releases (no candidate), then takes the
    // lease back after its degraded wait (two intervals), and keeps
    // trying its work every 200 ms.
    wait_until("three starts in a term of its own", || {
        starts.load(Ordering::SeqCst) >= 4 && lone.leadership().is_leader()
    });
    let epoch = lone.leadership().leader_epoch();
    let before = starts.load(Ordering::SeqCst);
    wait_until("two more starts in that term", || {
        starts.load(Ordering::SeqCst) >= before + 2
    });
    assert_eq!(lone.leadership().leader_epoch(), epoch, "the lease stayed");
    lone.shutdown().unwrap();
}

// ------------------------------------------------- PostgreSQL and MariaDB

/// [`sqlite_a_task_that_panics_on_every_start_moves_the_lease`] on a
/// server database, through `connector` and `table`.
async fn panicking_task_moves_the_lease<D: Database>(
    name: &str,
    connector: impl Connects<D> + Clone,
    table: TableName,
) {
    let starts = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&starts);
    let sick = server::Contender::<D, LeaseView>::builder(config("sick"), connector.clone())
        .table(table.clone())
        .restart_policy(policy())
        .while_leader(move |_ctx| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                // An error return is a failure as well as a panic.
                Err::<(), _>("the object store is unreachable from this node")
            }
        })
        .start()
        .unwrap();
    let transitions = sick.subscribe();
    wait_async("sick leads", || sick.leadership().is_leader()).await;
    let healthy = server::Contender::<D, LeaseView>::builder(config("healthy"), connector)
        .table(table)
        .while_leader(|ctx| async move { ctx.cancelled().await })
        .start()
        .unwrap();
    let from = Instant::now();
    wait_async("healthy leads", || healthy.leadership().is_leader()).await;
    let took = from.elapsed();
    let bound = policy().escalation_bound() + INTERVAL * 2 + SLACK;
    println!("{name}: a task that fails at every start: the healthy node led {took:?} after it started (bound {bound:?})");
    assert!(took <= bound, "{took:?} > {bound:?}");
    assert_eq!(
        starts.load(Ordering::SeqCst),
        3,
        "one start and two restarts"
    );
    let reasons = reasons(transitions);
    assert!(reasons.contains(&Demotion::Escalated), "{reasons:?}");
    sick.shutdown().await.unwrap();
    healthy.shutdown().await.unwrap();
}

/// [`sqlite_an_unhealthy_leader_hands_over`] on a server database.
async fn unhealthy_leader_hands_over<D: Database>(
    name: &str,
    connector: impl Connects<D> + Clone,
    table: TableName,
) {
    let ok = Arc::new(AtomicBool::new(true));
    let sick = server::Contender::<D, LeaseView>::builder(config("sick"), connector.clone())
        .table(table.clone())
        .health_probe(
            Duration::from_millis(50),
            Duration::from_secs(1),
            async_probe(&ok, "the disk is full"),
        )
        .start()
        .unwrap();
    wait_async("sick leads", || sick.leadership().is_leader()).await;
    let healthy = server::Contender::<D, LeaseView>::builder(config("healthy"), connector)
        .table(table)
        .health_probe(
            Duration::from_millis(50),
            Duration::from_secs(1),
            || async { Ok(()) },
        )
        .start()
        .unwrap();
    wait_async("healthy follows", || healthy.leadership().epoch.is_some()).await;
    let from = Instant::now();
    ok.store(false, Ordering::SeqCst);
    wait_async("healthy leads", || healthy.leadership().is_leader()).await;
    let took = from.elapsed();
    let bound = Duration::from_millis(50) + INTERVAL * 3 + SLACK;
    println!("{name}: an unhealthy leader: the healthy node led {took:?} after the probe failed (bound {bound:?})");
    assert!(took <= bound, "{took:?} > {bound:?}");
    assert_eq!(sick.leadership().role, Role::Follower);
    sick.shutdown().await.unwrap();
    healthy.shutdown().await.unwrap();
}

async fn unhealthy_set_member_hands_over<D: Database>(
    name: &str,
    connector: impl Connects<D> + Clone,
    table: TableName,
) {
    let ok = Arc::new(AtomicBool::new(true));
    let sick = server::Contender::<D, SetView>::builder(
        set_config("sick"),
        set_leases(),
        connector.clone(),
    )
    .table(table.clone())
    .health_probe(
        Duration::from_millis(50),
        Duration::from_secs(1),
        async_probe(&ok, "the object store is unreachable"),
    )
    .start()
    .unwrap();
    let healthy =
        server::Contender::<D, SetView>::builder(set_config("healthy"), set_leases(), connector)
            .table(table)
            .health_probe(
                Duration::from_millis(50),
                Duration::from_secs(1),
                || async { Ok(()) },
            )
            .start()
            .unwrap();
    wait_async("two leases each", || {
        leads(&sick) == 2 && leads(&healthy) == 2
    })
    .await;
    let from = Instant::now();
    ok.store(false, Ordering::SeqCst);
    wait_async("the healthy member leads all four", || leads(&healthy) == 4).await;
    let took = from.elapsed();
    let bound = Duration::from_millis(50) + INTERVAL * 2 + SLACK;
    println!("{name}: an unhealthy set member: the healthy one led all four {took:?} after the probe failed (bound {bound:?})");
    assert!(took <= bound, "{took:?} > {bound:?}");
    assert_eq!(leads(&sick), 0);
    ok.store(true, Ordering::SeqCst);
    wait_async("two leases each again", || {
        leads(&sick) == 2 && leads(&healthy) == 2
    })
    .await;
    sick.shutdown().await.unwrap();
    healthy.shutdown().await.unwrap();
}

/// The reasons of every demotion published so far.
fn reasons(mut transitions: picolease::Subscription) -> Vec<Demotion> {
    std::iter::from_fn(|| transitions.try_recv().ok())
        .filter_map(|t| t.leadership.reason)
        .collect()
}

async fn wait_async(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{what}: timed out"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn pg_connector() -> picolease::postgres::PgConnector {
    picolease::postgres::PgConnector::new(&pg_support::url()).unwrap()
}

fn mysql_table(test: &str) -> TableName {
    TableName::new(&format!("pl_work_{test}_{}", std::process::id())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_task_that_fails_on_every_start_moves_the_lease() {
    let admin = pg_support::admin().await;
    let table = pg_support::unique_table("work_loop");
    panicking_task_moves_the_lease("PostgreSQL", pg_connector(), table.clone()).await;
    pg_support::drop_table(&admin, &table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_unhealthy_leader_hands_over() {
    let admin = pg_support::admin().await;
    let table = pg_support::unique_table("work_probe");
    unhealthy_leader_hands_over("PostgreSQL", pg_connector(), table.clone()).await;
    pg_support::drop_table(&admin, &table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_unhealthy_set_member_hands_its_leases_over() {
    let admin = pg_support::admin().await;
    let table = pg_support::unique_table("work_set_probe");
    unhealthy_set_member_hands_over("PostgreSQL", pg_connector(), table.clone()).await;
    pg_support::drop_table(&admin, &table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_an_unhealthy_set_member_hands_its_leases_over() {
    let table = mysql_table("set_probe");
    let connector = picolease::mysql::MysqlConnector::new(MYSQL).unwrap();
    unhealthy_set_member_hands_over("MariaDB", connector.clone(), table.clone()).await;
    drop_mysql_table(&table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_task_that_fails_on_every_start_moves_the_lease() {
    let table = mysql_table("loop");
    let connector = picolease::mysql::MysqlConnector::new(MYSQL).unwrap();
    panicking_task_moves_the_lease("MariaDB", connector.clone(), table.clone()).await;
    drop_mysql_table(&table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_an_unhealthy_leader_hands_over() {
    let table = mysql_table("probe");
    let connector = picolease::mysql::MysqlConnector::new(MYSQL).unwrap();
    unhealthy_leader_hands_over("MariaDB", connector.clone(), table.clone()).await;
    drop_mysql_table(&table).await;
}

async fn drop_mysql_table(table: &TableName) {
    use mysql_async::prelude::Queryable;
    let mut conn = mysql_async::Conn::from_url(MYSQL).await.unwrap();
    conn.query_drop(format!("DROP TABLE IF EXISTS {}", table.table()))
        .await
        .unwrap();
    let _ = conn.disconnect().await;
}
