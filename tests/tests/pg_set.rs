//! Lease sets on PostgreSQL (DESIGN §9): three nodes share 30 leases ten
//! each over two connections per node, a crashed node's leases are taken
//! at their expiry, a clean shutdown hands its leases over at once (by
//! NOTIFY), and the work of each lease runs on exactly one node. Then two
//! nodes share 1,000 leases, and a set that released lingers before
//! closing its connections.

use crate::pg_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pg_support::*;
use picolease::postgres::{PgConnector, PgLeaseSet};
use picolease::{HolderId, LeaseName, SetConfig, TableName};

fn leases(prefix: &str, n: usize) -> Vec<LeaseName> {
    (0..n)
        .map(|i| LeaseName::new(&format!("{prefix}{i}")).unwrap())
        .collect()
}

fn template(holder: &str) -> SetConfig {
    SetConfig::with_ttl(HolderId::new(holder).unwrap(), Duration::from_millis(1_000))
        .interval(Duration::from_millis(200))
}

/// Which node runs each lease's work, as the work itself records it.
type Running = Arc<Mutex<BTreeMap<String, Vec<String>>>>;

fn start(table: &TableName, holder: &str, names: Vec<LeaseName>, running: &Running) -> PgLeaseSet {
    let running = Arc::clone(running);
    let connector = PgConnector::new(&url_for(PG_ADDR, holder)).unwrap();
    PgLeaseSet::builder(template(holder), names, connector)
        .table(table.clone())
        .while_leader(move |ctx| {
            let running = Arc::clone(&running);
            async move {
                let key = ctx.lease().to_string();
                running
                    .lock()
                    .unwrap()
                    .entry(key.clone())
                    .or_default()
                    .push(ctx.holder().to_string());
                let twice = running.lock().unwrap()[&key].len() > 1;
                assert!(!twice, "lease {key} worked twice");
                ctx.cancelled().await;
                running
                    .lock()
                    .unwrap()
                    .get_mut(&key)
                    .unwrap()
                    .retain(|h| h != ctx.holder().as_str());
            }
        })
        .start()
        .expect("start")
}

async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not after {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

fn counts(sets: &[&PgLeaseSet]) -> Vec<usize> {
    sets.iter().map(|s| s.snapshot().held.len()).collect()
}

/// Backends named `picolease` whose last query names `table` (the
/// statement connection runs the batches on it, the listening connection
/// listens on its release channel).
async fn picolease_backends(admin: &tokio_postgres::Client, table: &TableName) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name LIKE 'node-%' AND position($1 in query) > 0",
            &[&table.table()],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_pg_nodes_share_thirty_leases_over_two_connections_each() {
    let admin = admin().await;
    let table = unique_table("set");
    let running: Running = Arc::default();
    let a = start(&table, "node-a", leases("s", 30), &running);
    let b = start(&table, "node-b", leases("s", 30), &running);
    let c = start(&table, "node-c", leases("s", 30), &running);
    let took = wait_until("balanced 10/10/10", Duration::from_secs(15), || {
        counts(&[&a, &b, &c]) == vec![10, 10, 10]
    })
    .await;
    eprintln!(
        "balanced after {took:?}; statements {:?}",
        [&a, &b, &c].map(|s| s.snapshot().statements)
    );
    assert_eq!(a.snapshot().members.len(), 3);
    // Work runs exactly once per held lease.
    let workers = |running: &Running| {
        running
            .lock()
            .unwrap()
            .values()
            .filter(|v| v.len() == 1)
            .count()
    };
    wait_until("30 works", Duration::from_secs(2), || {
        workers(&running) == 30
    })
    .await;

    // Two connections per node at most, both named as the URL says.
    let backends = picolease_backends(&admin, &table).await;
    eprintln!("pg_stat_activity: {backends} picolease backends for 3 sets of 30 leases");
    assert!(
        (3..=6).contains(&backends),
        "{backends} backends for 3 sets"
    );

    // A crash: c's leases lapse and a and b take 15 each.
    let crashed_at = Instant::now();
    c.abort();
    let took = wait_until("15/15 after the crash", Duration::from_secs(10), || {
        counts(&[&a, &b]) == vec![15, 15]
    })
    .await;
    eprintln!("crash taken over and rebalanced after {took:?} (ttl 1 s)");
    assert!(
        took >= Duration::from_millis(700),
        "taken before the ttl ran out: {took:?}"
    );
    assert!(crashed_at.elapsed() >= Duration::from_millis(700));

    // A clean shutdown: b releases and notifies, a takes all 30 at once.
    let stopping_at = Instant::now();
    b.shutdown().await.unwrap();
    let shut = stopping_at.elapsed();
    let took = wait_until("30 on a after b's shutdown", Duration::from_secs(5), || {
        counts(&[&a]) == vec![30]
    })
    .await;
    eprintln!(
        "clean shutdown took {shut:?}, handed over {took:?} after it ({:?} in all)",
        stopping_at.elapsed()
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
    let statements = a.snapshot().statements;
    a.shutdown().await.unwrap();
    eprintln!("node-a sent {statements} statements");
    assert_eq!(workers(&running), 0, "work stopped on shutdown");
    drop_table(&admin, &table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pg_nodes_share_a_thousand_leases() {
    let admin = admin().await;
    let table = unique_table("set1k");
    let running: Running = Arc::default();
    let started = Instant::now();
    let a = start(&table, "node-a", leases("k", 1_000), &running);
    let b = start(&table, "node-b", leases("k", 1_000), &running);
    let took = wait_until("balanced 500/500", Duration::from_secs(60), || {
        counts(&[&a, &b]) == vec![500, 500]
    })
    .await;
    eprintln!(
        "1,000 leases on 2 nodes balanced after {took:?}; statements {:?}",
        [&a, &b].map(|s| s.snapshot().statements)
    );
    let backends = picolease_backends(&admin, &table).await;
    eprintln!("pg_stat_activity: {backends} picolease backends for 2 sets of 1,000 leases");
    assert!(
        (2..=4).contains(&backends),
        "{backends} backends for 2 sets"
    );
    // Settled: a few more seconds add a renew batch per interval, not one
    // statement per lease.
    let before = [&a, &b].map(|s| s.snapshot().statements);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = [&a, &b].map(|s| s.snapshot().statements);
    eprintln!(
        "statements over 2 s settled: {:?}",
        [after[0] - before[0], after[1] - before[1]]
    );
    assert!(after[0] - before[0] < 100 && after[1] - before[1] < 100);
    assert_eq!(counts(&[&a, &b]), vec![500, 500]);
    let stopping = Instant::now();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    eprintln!(
        "both shut down in {:?} ({:?} since the start)",
        stopping.elapsed(),
        started.elapsed()
    );
    assert!(running.lock().unwrap().values().all(Vec::is_empty));
    drop_table(&admin, &table).await;
}

/// A set whose connections go through `proxy`, with no work.
fn start_via(proxy: &Proxy, table: &TableName, holder: &str, names: Vec<LeaseName>) -> PgLeaseSet {
    let connector = PgConnector::new(&url_for(&proxy.addr(), holder)).unwrap();
    PgLeaseSet::builder(template(holder), names, connector)
        .table(table.clone())
        .start()
        .expect("start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_set_reconnects_after_a_reset_and_a_stall() {
    let admin = admin().await;
    let table = unique_table("setfault");
    let running: Running = Arc::default();
    let proxy = Proxy::start().await;
    let a = start_via(&proxy, &table, "node-a", leases("f", 10));
    let b = start(&table, "node-b", leases("f", 10), &running);
    wait_until("balanced 5/5", Duration::from_secs(15), || {
        counts(&[&a, &b]) == vec![5, 5]
    })
    .await;
    assert_eq!(
        proxy.accepted(),
        2,
        "one statement and one LISTEN connection"
    );

    // Both of a's connections reset: the next batch reconnects, in time
    // to renew, and the listener comes back.
    let held = a.snapshot().held;
    proxy.reset();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    eprintln!(
        "after a reset: {} connections accepted in all, a holds {}",
        proxy.accepted(),
        a.snapshot().held.len()
    );
    assert_eq!(
        a.snapshot().held,
        held,
        "a kept its terms through the reset"
    );
    // The listener comes back after its retry delay: wait for it.
    wait_until(
        "both connections made again",
        Duration::from_secs(10),
        || proxy.accepted() >= 4,
    )
    .await;
    assert_eq!(proxy.accepted(), 4, "both connections made again, once");

    // A stall: a's batches time out (and are cancelled), its leases lapse
    // and b takes all ten; once the network is back a reconnects and the
    // share is 5/5 again.
    let stalled_at = Instant::now();
    proxy.set(Mode::Stall);
    wait_until("a lets go while stalled", Duration::from_secs(5), || {
        counts(&[&a]) == vec![0]
    })
    .await;
    let let_go = stalled_at.elapsed();
    wait_until("b takes all 10", Duration::from_secs(10), || {
        counts(&[&b]) == vec![10]
    })
    .await;
    let taken = stalled_at.elapsed();
    eprintln!(
        "stalled: a held nothing after {let_go:?} ({} statements sent), b held 10 after {taken:?} (ttl 1 s)",
        a.snapshot().statements
    );
    assert!(let_go < Duration::from_secs(2), "a held on for {let_go:?}");
    assert!(
        taken >= Duration::from_millis(700),
        "b took a's leases before they lapsed: {taken:?}"
    );
    proxy.set(Mode::Pass);
    let took = wait_until("5/5 after the stall", Duration::from_secs(15), || {
        counts(&[&a, &b]) == vec![5, 5]
    })
    .await;
    eprintln!(
        "healed: 5/5 again after {took:?}; {} connections accepted in all",
        proxy.accepted()
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    drop_table(&admin, &table).await;
}

/// A set that released leases on shutdown keeps its two connections for
/// the linger: the other node takes every lease while that shutdown is
/// still lingering, and the shutdown returns no sooner than the linger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_set_lingers_after_releasing_on_shutdown() {
    const LINGER: Duration = Duration::from_secs(1);
    let admin = admin().await;
    let table = unique_table("set_linger");
    let build = |holder: &str| {
        let connector = PgConnector::new(&url_for(PG_ADDR, holder)).unwrap();
        PgLeaseSet::builder(template(holder), leases("g", 4), connector)
            .table(table.clone())
            .linger(LINGER)
            .start()
            .expect("start")
    };
    let a = build("linger-a");
    let b = build("linger-b");
    wait_until("2 and 2", Duration::from_secs(15), || {
        counts(&[&a, &b]) == vec![2, 2]
    })
    .await;
    let stopped = Instant::now();
    let shutdown = tokio::spawn(b.shutdown());
    wait_until("4 on a", Duration::from_secs(5), || {
        counts(&[&a]) == vec![4]
    })
    .await;
    assert!(
        !shutdown.is_finished(),
        "b's shutdown returned before its linger ({:?} after it began)",
        stopped.elapsed()
    );
    shutdown.await.unwrap().expect("b shuts down cleanly");
    assert!(stopped.elapsed() >= LINGER, "{:?}", stopped.elapsed());
    a.shutdown().await.unwrap();
    drop_table(&admin, &table).await;
}

/// A set's lease whose work takes longer than the request timeout to stop
/// (but stops within the lease) is still released on shutdown, as a lone
/// lease's is (`pg_handover.rs::a_release_after_slow_stopping_work_still_hands_over_at_once`):
/// waiting for the work is not part of the release batch's timeout, so the
/// other node, told by NOTIFY, leads the lease as soon as the work has
/// stopped, long before the row would have lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_release_after_slow_stopping_work_still_hands_over_at_once() {
    const SLOW_TTL: Duration = Duration::from_secs(4); // interval and timeout 1 s
    const STOPPING: Duration = Duration::from_millis(1_500);
    let admin = admin().await;
    let table = unique_table("set_slow_stop");
    let names = leases("slow", 1);
    let lease = names[0].clone();
    let build = |holder: &str| {
        let connector = PgConnector::new(&url_for(PG_ADDR, holder)).unwrap();
        PgLeaseSet::builder(
            SetConfig::with_ttl(HolderId::new(holder).unwrap(), SLOW_TTL),
            names.clone(),
            connector,
        )
        .table(table.clone())
    };
    let a = build("set-slow-a")
        .while_leader(|ctx| async move {
            ctx.cancelled().await;
            // Cleaning up after the term: longer than a request timeout.
            tokio::time::sleep(STOPPING).await;
        })
        .start()
        .expect("start a");
    wait_until("a leads", Duration::from_secs(15), || {
        counts(&[&a]) == vec![1]
    })
    .await;
    let b = build("set-slow-b").start().expect("start b");
    // b has planned its share with a (nothing: a holds the one lease).
    wait_until("b sees a", Duration::from_secs(15), || {
        b.snapshot().members.len() == 2 && b.snapshot().target.is_some()
    })
    .await;
    assert!(a.config().request_timeout < STOPPING);
    let left = a.time_left(&lease).expect("a leads");
    let mut changes = b.subscribe();
    let stopped = tokio::time::Instant::now();
    let led = tokio::spawn(async move {
        loop {
            let t = changes.recv().await.expect("b runs");
            if t.leadership.is_leader() {
                return t.instant;
            }
        }
    });
    a.shutdown().await.expect("a shuts down cleanly");
    let took = led
        .await
        .unwrap()
        .saturating_duration_since(stopped.into_std());
    eprintln!(
        "figure: b led {took:?} after a's shutdown, whose work took {STOPPING:?} to stop (the term had {left:?} left)"
    );
    assert!(
        took >= STOPPING,
        "the release waited for the work: {took:?}"
    );
    assert!(
        took < left.min(STOPPING + Duration::from_millis(700)),
        "released, not lapsed: {took:?} (the term had {left:?} left)"
    );
    b.shutdown().await.unwrap();
    drop_table(&admin, &table).await;
}
