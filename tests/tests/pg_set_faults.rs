//! The end of a term for a lease SET's work on PostgreSQL, when the
//! database turns read-only under it (the set counterpart of
//! `pg_faults.rs::a_read_only_session_is_retired_and_the_node_leads_again_once_writable`,
//! DESIGN §4b).
//!
//! The set's own database is made read-only (what an address still
//! pointing at a demoted primary looks like: SQLSTATE 25006 on every
//! write) and its backends are killed. One statement session serves every
//! lease, so one failure fails every renewal at once; what must hold:
//!
//! - every held lease demotes with `expired` (a 25006 is neither a lost
//!   row nor fatal), and each lease's work ends by its term's deadline,
//!   which it watches itself;
//! - while read-only, no lease is led: the set holds nothing, publishes
//!   no new term, every row in the database has lapsed, and the set keeps
//!   trying (25006 errors, more batches) instead of finishing;
//! - once the database is writable again (only NEW sessions see that:
//!   nothing is terminated this time), the set leads every lease again at
//!   a higher epoch within a few intervals, which it can only do if it
//!   retired each read-only session instead of retrying on it.
//!
//! The test creates and drops its own database (a guard drops it on
//! failure too); the shared server is never reconfigured.

use crate::pg_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pg_support::*;
use picolease::postgres::{PgConnector, PgError, PgLeaseSet};
use picolease::{boottime, Demotion, Epoch, LeaseName, Role};

const TTL: Duration = Duration::from_millis(1000);
const PATIENCE: Duration = Duration::from_secs(15);
/// How late a work may end past its deadline on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_millis(100);

/// A database of this test's own, dropped (with its sessions) when the
/// guard goes, on failure too.
struct ScratchDatabase {
    name: String,
}

impl ScratchDatabase {
    async fn create(admin: &tokio_postgres::Client, name: &str) -> Self {
        // Two statements: neither may run inside a transaction block.
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        ScratchDatabase {
            name: name.to_string(),
        }
    }

    fn url(&self, app: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:5432/{}?application_name={app}&connect_timeout=2",
            self.name
        )
    }

    /// A fresh session on it.
    async fn client(&self, app: &str) -> tokio_postgres::Client {
        PgConnector::new(&self.url(app))
            .unwrap()
            .connect_client()
            .await
            .unwrap()
    }

    /// Kills every session on it but the caller's; how many there were.
    async fn terminate(&self, admin: &tokio_postgres::Client) -> i64 {
        admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&self.name],
            )
            .await
            .unwrap()
            .get(0)
    }

    async fn read_only(&self, admin: &tokio_postgres::Client, on: bool) {
        let on = if on { "on" } else { "off" };
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {} SET default_transaction_read_only = {on}",
                self.name
            ))
            .await
            .unwrap();
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime (which may be unwinding): a
        // runtime of its own on a thread of its own.
        let name = self.name.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                admin()
                    .await
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop database {}: {e}", self.name),
            Err(_) => eprintln!("could not drop database {}: panicked", self.name),
        }
    }
}

/// One term's work, as it went: the last deadline it read and when it
/// returned (both on the boot-time clock).
#[derive(Clone, Copy, Debug, Default)]
struct Term {
    deadline: Option<Duration>,
    ended: Option<Duration>,
}

type Terms = Arc<Mutex<BTreeMap<(LeaseName, Epoch), Term>>>;

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < PATIENCE,
            "{what}: not after {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_ends_every_term_of_a_pg_set_and_it_leads_again_once_writable() {
    let pid = std::process::id();
    let admin = admin().await;
    let db = ScratchDatabase::create(&admin, &format!("picolease_ro_set_{pid}")).await;
    let table = unique_table("roset");
    let app = format!("ro-set-{pid}");
    let names: Vec<LeaseName> = ["s0", "s1", "s2"]
        .iter()
        .map(|n| LeaseName::new(n).unwrap())
        .collect();
    let terms: Terms = Arc::default();
    let builder = PgLeaseSet::builder(
        config(names[0].as_str(), &app, TTL).without_lease(),
        names.clone(),
        PgConnector::new(&db.url(&app)).unwrap(),
    )
    .table(table.clone())
    .while_leader({
        let terms = Arc::clone(&terms);
        move |ctx| {
            let terms = Arc::clone(&terms);
            async move {
                let key = (ctx.lease().clone(), ctx.epoch());
                let record = |term: Term| terms.lock().unwrap().insert(key.clone(), term);
                let mut term = Term {
                    deadline: ctx.deadline(),
                    ended: None,
                };
                record(term);
                loop {
                    tokio::select! {
                        () = ctx.cancelled() => break,
                        () = tokio::time::sleep(Duration::from_millis(10)) => {
                            term.deadline = ctx.deadline().or(term.deadline);
                        }
                    }
                }
                term.ended = Some(boottime());
                record(term);
            }
        }
    });
    let mut transitions = builder.subscribe();
    let set = builder.start().unwrap();
    wait_until("the set holds its three leases", || {
        set.snapshot().held.len() == 3
    })
    .await;
    let held = set.snapshot().held;
    wait_until("every held lease's work runs", || {
        let terms = terms.lock().unwrap();
        held.iter()
            .all(|(lease, epoch)| terms.contains_key(&(lease.clone(), *epoch)))
    })
    .await;

    // The three terms' starts, read: from here on, a term is a new one.
    while let Ok(t) = transitions.try_recv() {
        assert_eq!(t.leadership.reason, None, "{t:?}");
    }

    // Read-only from the next session on; the sessions there are killed.
    db.read_only(&admin, true).await;
    assert!(db.terminate(&admin).await >= 1, "no session of the set");

    // Every held lease demotes, each with `expired` as its first reason.
    let mut demoted: BTreeMap<LeaseName, (Option<Epoch>, Demotion)> = BTreeMap::new();
    while demoted.len() < held.len() {
        let t = tokio::time::timeout(PATIENCE, transitions.recv())
            .await
            .unwrap_or_else(|_| panic!("a demotion of each lease (got {demoted:?})"))
            .unwrap();
        assert!(
            t.leadership.role != Role::Leader,
            "a term while read-only: {t:?}"
        );
        if let Some(reason) = t.leadership.reason {
            demoted
                .entry(t.lease.clone())
                .or_insert((t.leadership.epoch, reason));
        }
    }
    for (lease, epoch) in &held {
        assert_eq!(
            demoted.get(lease),
            Some(&(Some(*epoch), Demotion::Expired)),
            "{lease}: {demoted:?}"
        );
    }

    // Each term's work ended by its deadline.
    wait_until("every ended term's work returns", || {
        let terms = terms.lock().unwrap();
        held.iter().all(|(lease, epoch)| {
            terms
                .get(&(lease.clone(), *epoch))
                .is_some_and(|t| t.ended.is_some())
        })
    })
    .await;
    for (lease, epoch) in &held {
        let term = terms.lock().unwrap()[&(lease.clone(), *epoch)];
        let deadline = term
            .deadline
            .unwrap_or_else(|| panic!("{lease}: its work never read a deadline"));
        let ended = term.ended.unwrap();
        let late_ms = ms(ended) - ms(deadline);
        eprintln!(
            "figure: {lease} epoch {epoch}: the work ended {late_ms:+.2} ms after its deadline"
        );
        assert!(
            ended <= deadline + MARGIN,
            "{lease} epoch {epoch}: the work ended {late_ms:.1} ms after its deadline"
        );
    }

    // It keeps trying, on fresh sessions that are read-only too, and does
    // not give up.
    wait_until(
        "a read-only error",
        || matches!(set.last_error(), Some(PgError::Database { code, .. }) if code == "25006"),
    )
    .await;
    let statements = set.snapshot().statements;
    wait_until("more batches while read-only", || {
        set.snapshot().statements >= statements + 3
    })
    .await;
    assert!(!set.is_finished(), "a read-only database is not fatal");
    // No lease is led. In the database: the rows lapse (nothing renews them) and no term is
    // written (the epochs stay those of the ended terms). A row linked to its holder's
    // liveness (the set renews by liveness, DESIGN §9) lapses with its membership row.
    let reader = db.client("ro-set-reader").await;
    let now = picolease_core::sql::db_now_millis(picolease_core::sql::Dialect::Postgres);
    let link = picolease_core::sql::LINK_BASE;
    let t = table.table();
    let select = format!(
        "SELECT l.name, l.epoch, CASE WHEN l.expires_at >= {link} THEN COALESCE( \
           (SELECT m.expires_at <= {now} FROM \"{t}\" m \
            WHERE m.name = 'picolease.member:' || l.holder AND m.epoch = l.expires_at - {link}), \
           true) ELSE l.expires_at <= {now} END \
         FROM \"{t}\" l WHERE l.name = ANY($1) ORDER BY l.name"
    );
    let wanted: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
    let started = Instant::now();
    loop {
        let rows = reader.query(&select, &[&wanted]).await.unwrap();
        assert_eq!(rows.len(), 3);
        let mut lapsed = 0;
        for row in rows {
            let (name, epoch, expired): (String, i64, bool) = (row.get(0), row.get(1), row.get(2));
            let lease = LeaseName::new(&name).unwrap();
            assert_eq!(
                u64::try_from(epoch).ok(),
                held.get(&lease).map(|e| e.get()),
                "{name}: a term was written while read-only"
            );
            lapsed += usize::from(expired);
        }
        if lapsed == 3 {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "rows still held while read-only: {lapsed} of 3 lapsed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(reader);
    // Nor by this node: it holds nothing and started no term meanwhile.
    assert!(set.snapshot().held.is_empty(), "{:?}", set.snapshot().held);
    while let Ok(t) = transitions.try_recv() {
        assert!(
            t.leadership.role != Role::Leader,
            "a term while read-only: {t:?}"
        );
    }

    // Writable again for new sessions only: the set's next session after a
    // retired one sees it.
    db.read_only(&admin, false).await;
    let writable = Instant::now();
    wait_until("the set holds every lease again at a higher epoch", || {
        let now = set.snapshot().held;
        held.iter()
            .all(|(lease, epoch)| now.get(lease).is_some_and(|e| e > epoch))
    })
    .await;
    let took = writable.elapsed();
    eprintln!(
        "figure: leading every lease again {:.0} ms after the database became writable (interval {:.0} ms)",
        ms(took),
        ms(TTL / 4)
    );
    assert!(took <= TTL * 4, "took {took:?} to lead again once writable");
    let again = set.snapshot().held;
    wait_until("every new term's work runs", || {
        let terms = terms.lock().unwrap();
        again
            .iter()
            .all(|(lease, epoch)| terms.contains_key(&(lease.clone(), *epoch)))
    })
    .await;
    set.shutdown().await.unwrap();
    drop(db);
}
