//! Faults between the driver and the server, injected by a TCP proxy in
//! the test (the shared server is never stopped) or by
//! `pg_terminate_backend`: stalls, resets, killed backends, high latency.
//! What must hold: the node demotes itself by its deadline, reconnects and
//! competes again, never hangs past its timeouts, and no two nodes ever
//! claim leadership at the same time.

use crate::pg_support;

use std::time::{Duration, Instant};

use pg_support::*;
use picolease::postgres::PgError;
use picolease::Demotion;

const TTL: Duration = Duration::from_millis(1000);
const PATIENCE: Duration = Duration::from_secs(10);

fn holder_of(l: &picolease::Leadership) -> Option<&str> {
    l.holder.as_ref().map(|h| h.as_str())
}

/// Lets the recorder tasks catch up before the log is checked.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// A leader whose connection stalls (bytes held, sockets open) demotes
/// itself by its deadline; another node takes over after the ttl; their
/// leadership never overlaps; when the network heals the stalled node
/// reconnects and follows.
#[tokio::test]
async fn a_stalled_leader_demotes_by_its_deadline_and_is_replaced_without_overlap() {
    let table = unique_table("stall");
    let proxy = Proxy::start().await;
    let recorder = Recorder::default();
    let a_name = format!("stall-a-{}", std::process::id());
    let a = contender_via(&proxy.addr(), &table, "l", &a_name, TTL)
        .start()
        .unwrap();
    recorder.watch("a", &a);
    wait_for(&mut a.watch(), PATIENCE, "a leads", |l| l.is_leader()).await;
    let b = contender(&table, "l", "b", TTL).start().unwrap();
    recorder.watch("b", &b);
    let mut b_rx = b.watch();
    wait_for(&mut b_rx, PATIENCE, "b follows a", |l| {
        holder_of(l) == Some(&a_name)
    })
    .await;

    let stalled = Instant::now();
    proxy.set(Mode::Stall);
    wait_for(&mut b_rx, PATIENCE, "b takes over", |l| l.is_leader()).await;
    settle().await;
    let demoted = recorder
        .of("a")
        .into_iter()
        .find(|t| t.leadership.reason.is_some())
        .expect("a demoted");
    assert_eq!(demoted.leadership.reason, Some(Demotion::Expired));
    let by = demoted.instant.saturating_duration_since(stalled);
    assert!(by <= TTL, "a demoted {by:?} after the stall, past its ttl");
    assert!(
        matches!(
            a.last_error(),
            Some(PgError::Timeout { .. } | PgError::Connect { .. })
        ),
        "{:?}",
        a.last_error()
    );

    proxy.set(Mode::Pass);
    wait_for(&mut a.watch(), PATIENCE, "a follows b again", |l| {
        !l.is_leader() && holder_of(l) == Some("b")
    })
    .await;
    b.shutdown().await.unwrap();
    wait_for(&mut a.watch(), PATIENCE, "a leads again", |l| l.is_leader()).await;
    a.shutdown().await.unwrap();
    settle().await;
    assert!(recorder.assert_exclusive() >= 3);
    drop_table(&admin().await, &table).await;
}

/// A reset connection is re-established and the driver keeps competing: a
/// lone leader keeps (or retakes) the lease across repeated resets.
#[tokio::test]
async fn a_reset_connection_is_reconnected_and_the_driver_competes_again() {
    let table = unique_table("reset");
    let proxy = Proxy::start().await;
    let recorder = Recorder::default();
    let a = contender_via(&proxy.addr(), &table, "l", "reset-a", TTL)
        .start()
        .unwrap();
    recorder.watch("a", &a);
    let mut rx = a.watch();
    wait_for(&mut rx, PATIENCE, "a leads", |l| l.is_leader()).await;
    for round in 0..3 {
        let accepted = proxy.accepted();
        proxy.reset();
        let deadline = Instant::now() + PATIENCE;
        while proxy.accepted() <= accepted {
            assert!(Instant::now() < deadline, "round {round}: no reconnect");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        wait_for(&mut rx, PATIENCE, "a leads after the reset", |l| {
            l.is_leader()
        })
        .await;
        // Renewals go through again.
        tokio::time::sleep(TTL / 2).await;
        assert!(rx.borrow().is_leader(), "round {round}: {:?}", *rx.borrow());
    }
    a.shutdown().await.unwrap();
    settle().await;
    recorder.assert_exclusive();
    drop_table(&admin().await, &table).await;
}

/// `pg_terminate_backend` on the driver's backends: it reconnects and goes
/// on leading (or retakes the lease), on a new backend.
#[tokio::test]
async fn a_terminated_backend_is_replaced_and_the_driver_leads_on() {
    let table = unique_table("term");
    let app = format!("term-a-{}", std::process::id());
    let admin = admin().await;
    let a = contender(&table, "l", &app, TTL).start().unwrap();
    let mut rx = a.watch();
    wait_for(&mut rx, PATIENCE, "a leads", |l| l.is_leader()).await;
    let killed = terminate_backends(&admin, &app).await;
    assert!(killed >= 1, "no backend found for {app}");
    // Both connections (statements and LISTEN) come back.
    wait_for_sessions(&admin, &app, "TRUE", 2, PATIENCE, "a reconnects").await;
    tokio::time::sleep(TTL / 2).await;
    wait_for(&mut rx, PATIENCE, "a leads on", |l| l.is_leader()).await;
    a.shutdown().await.unwrap();
    drop_table(&admin, &table).await;
}

/// Every statement slower than the request timeout: the slow node times
/// out (and cancels) every statement, never leads, never hangs, and a
/// leader that turns slow demotes itself before its successor leads.
#[tokio::test]
async fn high_latency_times_out_without_hang_or_double_leadership() {
    let table = unique_table("slow");
    let recorder = Recorder::default();

    // A leader that turns slow.
    let proxy = Proxy::start().await;
    let a = contender_via(&proxy.addr(), &table, "l", "slow-a", TTL)
        .start()
        .unwrap();
    recorder.watch("a", &a);
    wait_for(&mut a.watch(), PATIENCE, "a leads", |l| l.is_leader()).await;
    let b = contender(&table, "l", "b", TTL).start().unwrap();
    recorder.watch("b", &b);
    let mut b_rx = b.watch();
    wait_for(&mut b_rx, PATIENCE, "b follows a", |l| {
        holder_of(l) == Some("slow-a")
    })
    .await;
    // 200 ms per chunk each way: a round trip takes 400 ms or more, past
    // the 250 ms request timeout.
    proxy.set(Mode::Latency(Duration::from_millis(200)));
    wait_for(&mut b_rx, PATIENCE, "b takes over", |l| l.is_leader()).await;
    settle().await;
    let reasons: Vec<_> = recorder
        .of("a")
        .iter()
        .filter_map(|t| t.leadership.reason)
        .collect();
    assert_eq!(reasons, vec![Demotion::Expired]);

    // A slow newcomer never leads while b does, and shuts down promptly.
    let c = contender_via(&proxy.addr(), &table, "l", "slow-c", TTL)
        .start()
        .unwrap();
    recorder.watch("c", &c);
    tokio::time::sleep(TTL * 2).await;
    assert!(!c.watch().borrow().is_leader());
    assert!(!a.watch().borrow().is_leader());
    assert!(
        matches!(
            c.last_error(),
            Some(PgError::Timeout { .. } | PgError::Connect { .. })
        ),
        "{:?}",
        c.last_error()
    );
    for (name, lease) in [("a", a), ("c", c)] {
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(3), lease.shutdown())
            .await
            .unwrap_or_else(|_| panic!("{name}'s shutdown hung"))
            .unwrap();
        assert!(
            started.elapsed() < TTL,
            "{name} took {:?} to shut down",
            started.elapsed()
        );
    }
    assert!(b_rx.borrow().is_leader());
    b.shutdown().await.unwrap();
    settle().await;
    assert_eq!(recorder.assert_exclusive(), 2);
    drop_table(&admin().await, &table).await;
}

/// A statement stuck on the server (here: blocked on a row lock an admin
/// holds) is abandoned at the request timeout and cancelled on the server:
/// blocked backends of the driver never pile up, the leader demotes at its
/// deadline, and it leads again once the lock is gone.
#[tokio::test]
async fn a_stuck_statement_is_cancelled_on_the_server() {
    let table = unique_table("stuck");
    let app = format!("stuck-a-{}", std::process::id());
    let a = contender(&table, "l", &app, TTL).start().unwrap();
    let mut changes = a.subscribe();
    let mut rx = a.watch();
    let first = wait_for(&mut rx, PATIENCE, "a leads", |l| l.is_leader()).await;

    let mut locker = admin().await;
    let admin = admin().await;
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        &format!("SELECT 1 FROM {table} WHERE name = 'l' FOR UPDATE"),
        &[],
    )
    .await
    .unwrap();
    let demoted = tokio::time::timeout(PATIENCE, async {
        loop {
            let t = changes.recv().await.unwrap();
            if let Some(reason) = t.leadership.reason {
                return reason;
            }
        }
    })
    .await
    .expect("a demotes");
    assert_eq!(demoted, Demotion::Expired);
    // Several statements have timed out by now; each was cancelled, so at
    // most the current one waits on the lock.
    tokio::time::sleep(TTL).await;
    let waiting = sessions(&admin, &app, "wait_event_type = 'Lock'").await;
    assert!(
        waiting <= 1,
        "{waiting} backends of the driver wait on the lock"
    );
    assert!(
        matches!(a.last_error(), Some(PgError::Timeout { .. })),
        "{:?}",
        a.last_error()
    );
    tx.rollback().await.unwrap();
    let again = wait_for(&mut rx, PATIENCE, "a leads again", |l| l.is_leader()).await;
    assert!(again.epoch > first.epoch);
    a.shutdown().await.unwrap();
    drop_table(&admin, &table).await;
}

/// A session that fails every statement for a reason of its own is
/// replaced, never retried for ever (DESIGN §4b). The driver's database is
/// made read-only (what an address still pointing at a demoted primary
/// looks like: SQLSTATE 25006 on every write) and its backends killed: the
/// new sessions are read-only, the leader cannot renew and demotes by its
/// deadline, and keeps competing (the error stays transient). Once the
/// database is writable again, only *new* sessions see it: the node leads
/// again within a few intervals because every failed session was retired.
#[tokio::test]
async fn a_read_only_session_is_retired_and_the_node_leads_again_once_writable() {
    let pid = std::process::id();
    let db = format!("picolease_ro_{pid}");
    let admin = admin().await;
    let terminate = |db: String| {
        let admin = &admin;
        async move {
            admin
                .query_one(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid()",
                    &[&db],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    terminate(db.clone()).await;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db}"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();

    let table = unique_table("ro");
    let app = format!("ro-a-{pid}");
    let url =
        format!("postgres://postgres@127.0.0.1:5432/{db}?application_name={app}&connect_timeout=2");
    let connector = picolease::postgres::PgConnector::new(&url).unwrap();
    let a = picolease::postgres::PgLease::builder(config("l", &app, TTL), connector)
        .table(table.clone())
        .start()
        .unwrap();
    let mut changes = a.subscribe();
    let mut rx = a.watch();
    let first = wait_for(&mut rx, PATIENCE, "a leads", |l| l.is_leader()).await;

    admin
        .batch_execute(&format!(
            "ALTER DATABASE {db} SET default_transaction_read_only = on"
        ))
        .await
        .unwrap();
    assert!(terminate(db.clone()).await >= 1, "no backend of {db}");
    let demoted = tokio::time::timeout(PATIENCE, async {
        loop {
            let t = changes.recv().await.unwrap();
            if let Some(reason) = t.leadership.reason {
                return reason;
            }
        }
    })
    .await
    .expect("a demotes");
    assert_eq!(demoted, Demotion::Expired);
    // It keeps trying, on fresh sessions that are read-only too.
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(PgError::Database { code, .. }) = a.last_error() {
            if code == "25006" {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no read-only error seen: {:?}",
            a.last_error()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!a.is_finished(), "a read-only database is not fatal");

    admin
        .batch_execute(&format!(
            "ALTER DATABASE {db} RESET default_transaction_read_only"
        ))
        .await
        .unwrap();
    let writable = Instant::now();
    let again = wait_for(&mut rx, PATIENCE, "a leads again", |l| l.is_leader()).await;
    let took = writable.elapsed();
    eprintln!(
        "figure: leading again {:.0} ms after the database became writable (interval {:.0} ms)",
        ms(took),
        ms(TTL / 4)
    );
    assert!(again.epoch > first.epoch);
    assert!(took <= TTL * 4, "took {took:?} to lead again once writable");
    a.shutdown().await.unwrap();
    terminate(db.clone()).await;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db}"))
        .await
        .unwrap();
}
