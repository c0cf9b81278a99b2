//! The PostgreSQL driver behind a transaction pooler: a private PgBouncer
//! (Debian's `pgbouncer`, which `.ci/run` installs when missing) started
//! by each test on a free port in transaction mode with a pool of 2
//! server connections, in front of the shared server at 127.0.0.1:5432.
//!
//! PgBouncer refuses to run as root, so it runs as `postgres`; it is
//! killed when the test ends, also on failure. These tests fail when
//! `pgbouncer` or the server is missing.
//!
//! `cargo test -p picolease-tests --test integration pg_pooler::`

use crate::pg_support;
use crate::tls_support;

use std::time::{Duration, Instant};

use pg_support::bouncer::Bouncer;
use pg_support::{admin, config, drop_table, unique_table, wait_for};
use picolease::postgres::{Connect, PgConnector, PgLease, Pooler};
use picolease::TableName;

const TTL: Duration = Duration::from_millis(1000);

const POOLED: &str = "&picolease_pooler=transaction";

fn start(url: &str, table: &TableName, holder: &str) -> PgLease {
    let connector = PgConnector::new(url).unwrap();
    PgLease::builder(config("pooled", holder, TTL), connector)
        .table(table.clone())
        .start()
        .unwrap()
}

/// A contender for each of `holders` through `bouncer`, with `extra` URL
/// parameters.
fn contenders(bouncer: &Bouncer, table: &TableName, holders: &[&str], extra: &str) -> Vec<PgLease> {
    holders
        .iter()
        .map(|h| start(&bouncer.url(h, extra), table, h))
        .collect()
}

/// Elects a leader through the pooler, hands over on shutdown at the next
/// epoch, and no contender finishes with an error on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_lease_elects_and_hands_over_through_the_pooler() {
    let bouncer = Bouncer::start();
    elect_and_hand_over(&bouncer, POOLED).await;
}

/// The same through a PgBouncer that terminates TLS on both sides: the
/// contenders check its certificate (`verify-full`, a CA the test makes),
/// and it reaches the server over TLS (`server_tls_sslmode = require`:
/// PgBouncer refuses a server without TLS). Its clients may still come
/// in plain text (`client_tls_sslmode = allow`: the readiness probe
/// does); ours cannot, under `verify-full`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_lease_elects_and_hands_over_over_tls_on_both_sides() {
    let pki = tls_support::Pki::new("postgres", "postgres");
    let bouncer = Bouncer::start_with(&format!(
        "client_tls_sslmode = allow\nclient_tls_cert_file = {}\nclient_tls_key_file = {}\n\
         server_tls_sslmode = require\n",
        pki.file("server.pem"),
        pki.file("server.key")
    ));
    let tls = format!(
        "{POOLED}&sslmode=verify-full&sslrootcert={}",
        pki.file("ca.pem")
    );
    elect_and_hand_over(&bouncer, &tls).await;
}

/// Elects a leader of three contenders through `bouncer` (URL parameters
/// `extra`), hands over on shutdown at the next epoch, and no contender
/// finishes with an error on the way.
async fn elect_and_hand_over(bouncer: &Bouncer, extra: &str) {
    let admin = admin().await;
    let table = unique_table("pooled_handover");
    let leases = contenders(bouncer, &table, &["a", "b", "c"], extra);
    let started = Instant::now();
    let mut leader = None;
    while leader.is_none() {
        assert!(started.elapsed() < Duration::from_secs(10), "no leader");
        leader = leases.iter().position(|l| l.leadership().is_leader());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let leader = leader.unwrap();
    let first = leases[leader].leadership().leader_epoch().unwrap();
    // Renewals go on through the pooler for a few intervals.
    tokio::time::sleep(TTL).await;
    assert!(leases[leader].leadership().is_leader(), "kept the lease");
    assert_eq!(
        leases.iter().filter(|l| l.leadership().is_leader()).count(),
        1
    );
    let mut leases = leases;
    let old = leases.remove(leader);
    old.shutdown().await.expect("a clean shutdown");
    let mut watches: Vec<_> = leases.iter().map(|l| l.watch()).collect();
    let taken = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            for w in &mut watches {
                if let Some(e) = w.borrow().leader_epoch() {
                    return e;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a successor within 5 s");
    assert!(
        taken > first,
        "the successor's epoch {taken:?} exceeds {first:?}"
    );
    for lease in leases {
        assert!(!lease.is_finished(), "no contender finished");
        lease.shutdown().await.unwrap();
    }
    drop_table(&admin, &table).await;
}

/// With `picolease_pooler=none` (a promise that no pooler is in the way,
/// broken here), named statements collide behind the pooler (SQLSTATE
/// 42P05/26000): the driver names the pooler, retires the session,
/// switches to unnamed statements, and goes on; no contender finishes,
/// and one leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooler_behind_a_broken_promise_is_survived_not_fatal() {
    let bouncer = Bouncer::start();
    let admin = admin().await;
    let table = unique_table("pooled_unannounced");
    let leases = contenders(
        &bouncer,
        &table,
        &["a", "b", "c", "d"],
        "&picolease_pooler=none",
    );
    tokio::time::sleep(4 * TTL).await;
    for lease in &leases {
        assert!(!lease.is_finished(), "a pooler's errors are not fatal");
    }
    // One leads: at the moment of a look, a session being retired may have
    // just cost a term, so look until one leads.
    let looked = Instant::now();
    loop {
        let leaders = leases.iter().filter(|l| l.leadership().is_leader()).count();
        if leaders == 1 {
            break;
        }
        assert!(looked.elapsed() < 4 * TTL, "no leader behind the pooler");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for lease in leases {
        lease.shutdown().await.unwrap();
    }
    drop_table(&admin, &table).await;
}

/// A fenced transaction through the pooler: one transaction, one server
/// connection; its write commits while the fence holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_transaction_commits_through_the_pooler() {
    let bouncer = Bouncer::start();
    let admin = admin().await;
    let table = unique_table("pooled_fence");
    let jobs = format!("{}_jobs", table.table());
    admin
        .batch_execute(&format!(
            "CREATE TABLE \"{jobs}\" (id bigint PRIMARY KEY, done boolean); \
             INSERT INTO \"{jobs}\" VALUES (1, false)"
        ))
        .await
        .unwrap();
    let lease = start(&bouncer.url("a", POOLED), &table, "a");
    let mut rx = lease.watch();
    wait_for(&mut rx, Duration::from_secs(10), "leads", |l| l.is_leader()).await;
    let fence = lease.fence().expect("a fence while leading");
    let mut client = PgConnector::new(&bouncer.url("a_work", POOLED))
        .unwrap()
        .connect_client()
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    let tx = fence.transaction(&mut client, deadline).await.unwrap();
    let sql = format!(
        "UPDATE \"{jobs}\" SET done = true WHERE id = 1 AND {}",
        tx.fence().condition(1)
    );
    assert_eq!(
        tx.execute(sql.as_str(), &tx.fence().params())
            .await
            .unwrap(),
        1
    );
    tx.commit().await.unwrap();
    let done: bool = admin
        .query_one(&format!("SELECT done FROM \"{jobs}\" WHERE id = 1"), &[])
        .await
        .unwrap()
        .get(0);
    assert!(done);
    assert_eq!(
        Connect::pooler(&PgConnector::new(&bouncer.url("x", POOLED)).unwrap()),
        Pooler::Transaction
    );
    lease.shutdown().await.unwrap();
    admin
        .batch_execute(&format!("DROP TABLE \"{jobs}\""))
        .await
        .unwrap();
    drop_table(&admin, &table).await;
}
