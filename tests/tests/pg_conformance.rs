//! The driver conformance cases (the same list the SQLite driver runs),
//! against the async driver and the real PostgreSQL at 127.0.0.1:5432.
//! Each test has its own table, so they run in parallel.

mod pg_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pg_support::*;
use picolease::postgres::{force_release, init, status, PgConnector, PgError, PgLease};
use picolease::{Demotion, Epoch, LeaseName, Role, RowError};

const TTL: Duration = Duration::from_millis(1000);
const PATIENCE: Duration = Duration::from_secs(10);

/// (1) A single contender on a fresh (auto-created) table leads at epoch 1.
#[tokio::test]
async fn a_single_contender_leads_at_epoch_1_on_a_fresh_table() {
    let table = unique_table("single");
    let a = contender(&table, "l", "a", TTL).start().unwrap();
    let mut rx = a.watch();
    let l = wait_for(&mut rx, PATIENCE, "a leads", |l| l.is_leader()).await;
    assert_eq!(l.epoch, Some(Epoch::new(1)));
    assert_eq!(l.holder.as_ref().map(|h| h.as_str()), Some("a"));
    let admin = admin().await;
    let rows = status(&admin, &table).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].holder.as_deref(), Some("a"));
    a.shutdown().await.unwrap();
    let rows = status(&admin, &table).await.unwrap();
    assert_eq!(rows[0].holder, None, "shutdown releases the lease");
    drop_table(&admin, &table).await;
}

/// (2) Of N contenders exactly one leads; the others see its holder id and
/// epoch.
#[tokio::test]
async fn of_n_contenders_exactly_one_leads_and_the_others_see_it() {
    let table = unique_table("n");
    let names = ["n0", "n1", "n2", "n3"];
    let leases: Vec<PgLease> = names
        .iter()
        .map(|n| contender(&table, "l", n, TTL).start().unwrap())
        .collect();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let views: Vec<_> = leases.iter().map(|l| l.watch().borrow().clone()).collect();
        let leaders: Vec<_> = views.iter().filter(|v| v.is_leader()).collect();
        assert!(leaders.len() <= 1, "two leaders at once: {views:?}");
        if let [leader] = leaders.as_slice() {
            let agreed = views
                .iter()
                .all(|v| v.holder == leader.holder && v.epoch == leader.epoch);
            if agreed {
                assert_eq!(leader.epoch, Some(Epoch::new(1)));
                break;
            }
        }
        assert!(Instant::now() < deadline, "no agreement: {views:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for l in leases {
        l.shutdown().await.unwrap();
    }
    drop_table(&admin().await, &table).await;
}

/// (3) After a clean shutdown a successor leads at a higher epoch.
#[tokio::test]
async fn clean_shutdown_hands_over_to_a_successor_at_a_higher_epoch() {
    let table = unique_table("clean");
    let a = contender(&table, "l", "a", TTL).start().unwrap();
    let first = wait_for(&mut a.watch(), PATIENCE, "a leads", |l| l.is_leader()).await;
    let b = contender(&table, "l", "b", TTL).start().unwrap();
    let mut rx = b.watch();
    wait_for(&mut rx, PATIENCE, "b sees a", |l| {
        l.holder.as_ref().map(|h| h.as_str()) == Some("a")
    })
    .await;
    a.shutdown().await.unwrap();
    let second = wait_for(&mut rx, PATIENCE, "b leads", |l| l.is_leader()).await;
    assert!(second.epoch > first.epoch, "{second:?} after {first:?}");
    b.shutdown().await.unwrap();
    drop_table(&admin().await, &table).await;
}

/// (4) A holder that crashes (no release) is replaced once its ttl lapses,
/// not before.
#[tokio::test]
async fn a_crashed_holder_is_taken_over_after_the_ttl() {
    let table = unique_table("crash");
    let a = contender(&table, "l", "a", TTL).start().unwrap();
    let first = wait_for(&mut a.watch(), PATIENCE, "a leads", |l| l.is_leader()).await;
    let b = contender(&table, "l", "b", TTL).start().unwrap();
    let mut rx = b.watch();
    wait_for(&mut rx, PATIENCE, "b sees a", |l| {
        l.holder.as_ref().map(|h| h.as_str()) == Some("a")
    })
    .await;
    let crashed = Instant::now();
    a.abort();
    let second = wait_for(&mut rx, PATIENCE, "b takes over", |l| l.is_leader()).await;
    let gap = crashed.elapsed();
    assert!(second.epoch > first.epoch);
    // The row was last renewed at most one interval before the crash.
    assert!(
        gap >= TTL - TTL / 4 - Duration::from_millis(50),
        "took over after only {gap:?}"
    );
    assert!(gap <= TTL + Duration::from_millis(500), "took {gap:?}");
    b.shutdown().await.unwrap();
    drop_table(&admin().await, &table).await;
}

/// (5) An administrator's force release makes the leader demote itself
/// with reason `lost`.
#[tokio::test]
async fn force_release_demotes_the_leader_with_reason_lost() {
    let table = unique_table("force");
    let a = contender(&table, "l", "a", TTL).start().unwrap();
    let mut changes = a.subscribe();
    let first = wait_for(&mut a.watch(), PATIENCE, "a leads", |l| l.is_leader()).await;
    let admin = admin().await;
    let bumped = force_release(&admin, &table, &LeaseName::new("l").unwrap())
        .await
        .unwrap()
        .expect("the lease exists");
    assert!(Some(bumped) > first.epoch);
    let lost = tokio::time::timeout(PATIENCE, async {
        while let Ok(t) = changes.recv().await {
            if t.leadership.role == Role::Follower && t.leadership.reason.is_some() {
                return t.leadership;
            }
        }
        panic!("driver stopped");
    })
    .await
    .expect("a demotes");
    assert_eq!(lost.reason, Some(Demotion::Lost));
    assert_eq!(lost.epoch, first.epoch);
    let unknown = force_release(&admin, &table, &LeaseName::new("nope").unwrap())
        .await
        .unwrap();
    assert_eq!(unknown, None);
    a.shutdown().await.unwrap();
    drop_table(&admin, &table).await;
}

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Start {
        task: u8,
        epoch: u64,
        leader_epoch: Option<u64>,
    },
    End {
        task: u8,
        epoch: u64,
        row_holder: Option<String>,
    },
}

/// (6) Gated work runs only while leading, with the term's epoch; it is
/// cancelled on demotion and awaited before the next term starts; on
/// shutdown it is stopped before the lease is released.
#[tokio::test]
async fn gated_work_follows_leadership_and_stops_before_the_release() {
    let table = unique_table("gated");
    let events = Arc::new(Mutex::new(Vec::<(Instant, Event)>::new()));
    let mut builder = contender(&table, "l", "a", TTL);
    let admin = Arc::new(admin().await);
    for task in [1u8, 2] {
        let events = events.clone();
        let admin = admin.clone();
        let table = table.clone();
        builder = builder.while_leader(move |ctx| {
            let events = events.clone();
            let admin = admin.clone();
            let table = table.clone();
            async move {
                let epoch = ctx.epoch().get();
                events.lock().unwrap().push((
                    Instant::now(),
                    Event::Start {
                        task,
                        epoch,
                        leader_epoch: None,
                    },
                ));
                ctx.cancelled().await;
                // Wind down slowly: the next term must wait for this.
                tokio::time::sleep(Duration::from_millis(150)).await;
                let rows = status(&admin, &table).await.unwrap();
                let row_holder = rows[0].holder.clone();
                events.lock().unwrap().push((
                    Instant::now(),
                    Event::End {
                        task,
                        epoch,
                        row_holder,
                    },
                ));
            }
        });
    }
    let a = builder.start().unwrap();
    let mut rx = a.watch();
    let first = wait_for(&mut rx, PATIENCE, "a leads", |l| l.is_leader()).await;
    // Demote it: the next renew is rejected, then it takes the free row
    // back at a new epoch.
    force_release(&admin, &table, &LeaseName::new("l").unwrap())
        .await
        .unwrap();
    let second = wait_for(&mut rx, PATIENCE, "a leads again", |l| {
        l.is_leader() && l.epoch > first.epoch
    })
    .await;
    // Both tasks of the second term have started.
    let deadline = Instant::now() + PATIENCE;
    while events
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, e)| matches!(e, Event::Start { .. }))
        .count()
        < 4
    {
        assert!(
            Instant::now() < deadline,
            "second term's tasks did not start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.shutdown().await.unwrap();

    let events = events.lock().unwrap().clone();
    let (e1, e2) = (first.epoch.unwrap().get(), second.epoch.unwrap().get());
    let starts: Vec<_> = events
        .iter()
        .filter(|(_, e)| matches!(e, Event::Start { .. }))
        .collect();
    let ends: Vec<_> = events
        .iter()
        .filter(|(_, e)| matches!(e, Event::End { .. }))
        .collect();
    assert_eq!(starts.len(), 4, "{events:?}");
    assert_eq!(ends.len(), 4, "{events:?}");
    for (_, e) in &starts[..2] {
        assert!(
            matches!(e, Event::Start { epoch, .. } if *epoch == e1),
            "{events:?}"
        );
    }
    for (_, e) in &starts[2..] {
        assert!(
            matches!(e, Event::Start { epoch, .. } if *epoch == e2),
            "{events:?}"
        );
    }
    // The second term started only after the first term's tasks ended.
    let first_ended = ends
        .iter()
        .filter(|(_, e)| matches!(e, Event::End { epoch, .. } if *epoch == e1))
        .map(|(t, _)| *t)
        .max()
        .unwrap();
    let second_started = starts[2..].iter().map(|(t, _)| *t).min().unwrap();
    assert!(first_ended <= second_started, "{events:?}");
    // On shutdown the tasks ended while the row was still ours: the release
    // came after them.
    for (_, e) in ends
        .iter()
        .filter(|(_, e)| matches!(e, Event::End { epoch, .. } if *epoch == e2))
    {
        assert!(
            matches!(e, Event::End { row_holder: Some(h), .. } if h == "a"),
            "{events:?}"
        );
    }
    let rows = status(&admin, &table).await.unwrap();
    assert_eq!(rows[0].holder, None, "released after the work stopped");
    drop_table(&admin, &table).await;
}

/// (7) A fenced write succeeds at the current epoch and is rejected once a
/// successor took over (the ex-leader was "paused": it never learnt).
#[tokio::test]
async fn a_fenced_write_is_rejected_after_takeover() {
    let table = unique_table("fence");
    let jobs = format!("{}_jobs", table.table());
    let admin = admin().await;
    admin
        .batch_execute(&format!("CREATE TABLE {jobs} (id bigint PRIMARY KEY, done_by text); INSERT INTO {jobs} VALUES (1, NULL)"))
        .await
        .unwrap();
    let a = contender(&table, "l", "a", TTL).start().unwrap();
    wait_for(&mut a.watch(), PATIENCE, "a leads", |l| l.is_leader()).await;
    let fence = a.fence().expect("a leads");
    let write = |by: &'static str, fence: picolease::postgres::Fence| {
        let admin = &admin;
        let jobs = jobs.clone();
        async move {
            let sql = format!(
                "UPDATE {jobs} SET done_by = $1 WHERE id = $2 AND {}",
                fence.condition(3)
            );
            let id: i64 = 1;
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&by, &id];
            params.extend(fence.params());
            admin.execute(&sql, &params).await.unwrap()
        }
    };
    assert_eq!(
        write("a", fence.clone()).await,
        1,
        "the leader's fenced write applies"
    );

    // "Pause" a: it stops renewing without knowing; b takes over after the ttl.
    a.abort();
    let b = contender(&table, "l", "b", TTL).start().unwrap();
    wait_for(&mut b.watch(), PATIENCE, "b takes over", |l| l.is_leader()).await;
    assert_eq!(
        write("a-late", fence).await,
        0,
        "the ex-leader's write is rejected"
    );
    assert_eq!(write("b", b.fence().unwrap()).await, 1);
    let done_by: String = admin
        .query_one(&format!("SELECT done_by FROM {jobs}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(done_by, "b");
    b.shutdown().await.unwrap();
    admin
        .batch_execute(&format!("DROP TABLE {jobs}"))
        .await
        .unwrap();
    drop_table(&admin, &table).await;
}

/// (8a) A row with a NULL epoch (in a table created without NOT NULL) is a
/// typed error naming the column; nothing is written.
#[tokio::test]
async fn a_null_epoch_is_a_typed_error_and_nothing_is_written() {
    let table = unique_table("nullep");
    let admin = admin().await;
    admin
        .batch_execute(&format!(
            "CREATE TABLE {table} (name text PRIMARY KEY, holder text, epoch bigint, expires_at bigint);
             INSERT INTO {table} VALUES ('l', 'someone', NULL, 0)"
        ))
        .await
        .unwrap();
    let mut a = contender(&table, "l", "a", TTL).start().unwrap();
    let rx = a.watch();
    let err = tokio::time::timeout(PATIENCE, a.stopped())
        .await
        .expect("the driver stops")
        .unwrap_err();
    assert!(
        matches!(
            &err,
            PgError::Row {
                source: RowError::Null {
                    column: "epoch",
                    ..
                },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("lease \"l\": column epoch is NULL"),
        "{err}"
    );
    assert!(!rx.borrow().is_leader());
    let row = admin
        .query_one(
            &format!("SELECT holder, epoch, expires_at FROM {table}"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0).as_deref(), Some("someone"));
    assert_eq!(row.get::<_, Option<i64>>(1), None);
    assert_eq!(row.get::<_, Option<i64>>(2), Some(0));
    let err = status(&admin, &table).await.unwrap_err();
    assert!(matches!(err, PgError::Row { .. }), "{err:?}");
    // A forced release, through the library, leaves the row as it is (the
    // statement itself refuses it) and names what is wrong.
    let err = force_release(&admin, &table, &LeaseName::new("l").unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PgError::Row { source: RowError::Null { column: "epoch", lease }, .. } if lease == "l"),
        "{err:?}"
    );
    let row = admin
        .query_one(
            &format!("SELECT holder, epoch, expires_at FROM {table}"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0).as_deref(), Some("someone"));
    assert_eq!(row.get::<_, Option<i64>>(1), None);
    assert_eq!(row.get::<_, Option<i64>>(2), Some(0));
    drop_table(&admin, &table).await;
}

/// (8b) A table whose columns have the wrong types is a typed error; no row
/// is written.
#[tokio::test]
async fn wrong_column_types_are_a_typed_error() {
    let table = unique_table("types");
    let admin = admin().await;
    admin
        .batch_execute(&format!(
            "CREATE TABLE {table} (name text PRIMARY KEY, holder text, epoch text NOT NULL, expires_at timestamptz NOT NULL)"
        ))
        .await
        .unwrap();
    let mut a = contender(&table, "l", "a", TTL).start().unwrap();
    let err = tokio::time::timeout(PATIENCE, a.stopped())
        .await
        .expect("the driver stops")
        .unwrap_err();
    assert!(
        matches!(&err, PgError::Schema { table: t, .. } if *t == table.to_string()),
        "{err:?}"
    );
    let count: i64 = admin
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 0, "nothing written");
    drop_table(&admin, &table).await;
}

/// (8c) A missing table with auto-create off is a typed error, and the table
/// is not created; `init` creates it.
#[tokio::test]
async fn a_missing_table_with_auto_create_off_is_a_typed_error() {
    let table = unique_table("missing");
    let mut a = contender(&table, "l", "a", TTL)
        .auto_create(false)
        .start()
        .unwrap();
    // `stopped` reports the error and leaves the handle usable.
    let err = tokio::time::timeout(PATIENCE, a.stopped())
        .await
        .expect("the driver stops")
        .unwrap_err();
    assert!(!a.watch().borrow().is_leader());
    assert_eq!(a.shutdown().await, Ok(()), "reported once, by `stopped`");
    assert_eq!(
        err,
        PgError::MissingTable {
            table: table.to_string()
        }
    );
    let admin = admin().await;
    let err = status(&admin, &table).await.unwrap_err();
    assert_eq!(
        err,
        PgError::MissingTable {
            table: table.to_string()
        }
    );
    init(&admin, &table).await.unwrap();
    init(&admin, &table).await.unwrap();
    assert_eq!(status(&admin, &table).await.unwrap(), vec![]);
    drop_table(&admin, &table).await;
}

/// (8d) Malformed and unreachable URLs: typed errors, no panic; a driver
/// against an unreachable server keeps trying, reports the error, and
/// shuts down promptly.
#[tokio::test]
async fn malformed_and_unreachable_urls_are_typed_errors() {
    for bad in ["postgres://[::1", "host=", "postgres://h:notaport/db"] {
        let err = PgConnector::new(bad).unwrap_err();
        assert!(matches!(err, PgError::InvalidUrl { .. }), "{bad}: {err:?}");
    }
    let err = PgConnector::new("postgres://u:secret@[::1").unwrap_err();
    assert!(!err.to_string().contains("secret"), "{err}");

    // Port 1 on localhost: connection refused.
    let unreachable =
        PgConnector::new("postgres://postgres@127.0.0.1:1/test?connect_timeout=1").unwrap();
    let err = unreachable.connect_client().await.unwrap_err();
    assert!(matches!(err, PgError::Connect { .. }), "{err:?}");

    let a = PgLease::builder(config("l", "a", TTL), unreachable)
        .start()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while a.last_error().is_none() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        matches!(
            a.last_error(),
            Some(PgError::Connect { .. } | PgError::Timeout { .. })
        ),
        "{:?}",
        a.last_error()
    );
    assert!(!a.watch().borrow().is_leader());
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), a.shutdown())
        .await
        .expect("shutdown does not hang")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// (8e) A user that does not exist: a login error from the admin helpers and
/// from the driver, which stops instead of retrying forever.
#[tokio::test]
async fn wrong_credentials_are_a_login_error() {
    let table = unique_table("creds");
    let url = "postgres://no_such_user_picolease@127.0.0.1:5432/test";
    let connector = PgConnector::new(url).unwrap();
    let err = connector.connect_client().await.unwrap_err();
    assert!(
        matches!(&err, PgError::Login { code, .. } if code == "28000"),
        "{err:?}"
    );
    let mut a = PgLease::builder(config("l", "a", TTL), connector)
        .table(table.clone())
        .start()
        .unwrap();
    let err = tokio::time::timeout(PATIENCE, a.stopped())
        .await
        .expect("the driver stops")
        .unwrap_err();
    assert!(matches!(err, PgError::Login { .. }), "{err:?}");
    let admin = admin().await;
    assert_eq!(
        status(&admin, &table).await.unwrap_err(),
        PgError::MissingTable {
            table: table.to_string()
        }
    );
}

/// Dropping the handle without `shutdown` neither hangs nor leaks the
/// lease: the driver shuts down in the background (releasing), and a
/// runtime dropped right after does not wait for it.
#[test]
fn dropping_the_handle_releases_in_the_background_and_never_hangs_the_runtime() {
    let table = unique_table("drop");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let held = runtime.block_on(async {
        let a = contender(&table, "l", "a", TTL).start().unwrap();
        wait_for(&mut a.watch(), PATIENCE, "a leads", |l| l.is_leader()).await;
        let mut rx = a.watch();
        drop(a);
        // The background shutdown publishes the demotion, then releases.
        wait_for(&mut rx, PATIENCE, "a steps down", |l| !l.is_leader()).await;
        let admin = admin().await;
        let deadline = Instant::now() + PATIENCE;
        loop {
            let rows = status(&admin, &table).await.unwrap();
            if rows[0].holder.is_none() {
                break rows[0].holder.clone();
            }
            assert!(Instant::now() < deadline, "not released: {rows:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert_eq!(held, None);

    // A leader whose runtime is dropped at once: nothing waits for it.
    let started = Instant::now();
    let b_table = table.clone();
    runtime.block_on(async {
        let b = contender(&b_table, "l", "b", TTL).start().unwrap();
        wait_for(&mut b.watch(), PATIENCE, "b leads", |l| l.is_leader()).await;
        drop(b);
    });
    drop(runtime);
    assert!(started.elapsed() < PATIENCE);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async { drop_table(&admin().await, &table).await });
}

/// A task registered on the running handle starts at once in the current
/// term, with that term's epoch, and is cancelled on shutdown.
#[tokio::test]
async fn a_task_added_while_leading_starts_in_the_current_term() {
    let table = unique_table("addtask");
    let a = contender(&table, "l", "a", TTL).start().unwrap();
    let leading = wait_for(&mut a.watch(), PATIENCE, "a leads", |l| l.is_leader()).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    a.while_leader(move |ctx| {
        let tx = tx.clone();
        async move {
            tx.send(("start", ctx.epoch())).unwrap();
            ctx.cancelled().await;
            tx.send(("stop", ctx.epoch())).unwrap();
        }
    });
    let started = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(started, ("start", leading.epoch.unwrap()));
    a.shutdown().await.unwrap();
    assert_eq!(rx.recv().await.unwrap(), ("stop", leading.epoch.unwrap()));
    drop_table(&admin().await, &table).await;
}
