//! `leader_until()` and `until_not_leader()` on the async driver end a
//! wait at the term's deadline by themselves, with the driver's loop held
//! (the wedge seam) so that it publishes nothing: the way a `watch()`
//! reader is told to wait when it must not act past the deadline
//! (DESIGN §4b). PostgreSQL at 127.0.0.1:5432 must be up (fail, not skip);
//! the test uses a table of its own.

use std::time::{Duration, Instant};

use picolease::postgres::{PgConnector, PgLease};
use picolease::{Config, HolderId, LeaseName, TableName};

const URL: &str = "postgres://postgres@127.0.0.1:5432/test";

async fn sql(statement: &str) {
    let (client, connection) = tokio_postgres::connect(URL, tokio_postgres::NoTls)
        .await
        .expect("the PostgreSQL server at 127.0.0.1:5432 must be running");
    tokio::spawn(connection);
    client.batch_execute(statement).await.unwrap();
}

#[test]
fn until_not_leader_wakes_at_the_deadline_while_the_loop_is_held() {
    let table = format!("pl_leader_until_{}", std::process::id());
    let drop = format!("DROP TABLE IF EXISTS {table}");
    // The lease's driver runs on a runtime of its own thread: held, it
    // blocks that thread for good (and with it that runtime's timers),
    // not the runtime the test waits on.
    let (handed, lease) = std::sync::mpsc::channel();
    let lease_table = TableName::new(&table).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let config = Config::with_ttl(
                LeaseName::new("job").unwrap(),
                HolderId::new("me").unwrap(),
                Duration::from_secs(1),
            );
            let lease = PgLease::builder(config, PgConnector::new(URL).unwrap())
                .table(lease_table)
                .start()
                .unwrap();
            handed.send(lease).unwrap();
            std::future::pending::<()>().await;
        });
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        sql(&drop).await;
        let lease = lease.recv().unwrap();
        let mut watch = lease.watch();
        tokio::time::timeout(Duration::from_secs(10), watch.wait_for(|l| l.is_leader()))
            .await
            .expect("leads within 10 s")
            .unwrap();
        lease.snapshots().wedge_loop_for_tests();
        // The loop blocks at its next step; the deadline it published last
        // is the one that holds.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let until = lease.leader_until().expect("still leading");
        assert!(until > Instant::now());
        tokio::time::timeout(Duration::from_secs(5), lease.until_not_leader())
            .await
            .expect("until_not_leader wakes at the deadline, not at a publication");
        let woke = Instant::now();
        assert!(woke >= until, "not before the deadline");
        assert!(
            woke < until + Duration::from_millis(50),
            "woke {:?} after the deadline",
            woke - until
        );
        assert!(!lease.leadership().is_leader());
        assert!(lease.leader_until().is_none());
        assert!(
            lease.watch().borrow().is_leader(),
            "the watch is the held loop's last word"
        );
        // The held loop never returns: leave it to the process's end.
        std::mem::forget(lease);
        sql(&drop).await;
    });
}
