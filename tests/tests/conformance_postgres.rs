//! Driver conformance on the real PostgreSQL at 127.0.0.1:5432 (user
//! `postgres`, database `test`): the shared cases of `conformance/mod.rs`
//! (see its docs for the list), then the cases that only apply to
//! PostgreSQL (wrong column types, URLs and logins, dropping the handle
//! and the runtime).
//!
//! These tests **fail** when the server is unreachable: a skipped
//! conformance test proves nothing. Every test has tables of its own
//! (unique names), so they run in parallel, and drops them.
//!
//! The shared cases are blocking code: [`Pg`] owns a multi-thread tokio
//! runtime, starts the async driver on it and blocks on its futures.
//!
//! The shared cases run twice: straight to the server, and (module
//! `pooled`, [`Pooled`]) with every contender behind a private PgBouncer
//! in transaction mode with a pool of 2 (`pg_support/bouncer.rs`, one per
//! test), announced with `picolease_pooler=transaction` and with a direct
//! notice connection (`picolease_notify_url`); the admin connection that
//! checks the rows stays direct.
//!
//! `cargo test -p picolease-tests --test integration conformance_postgres::`

use crate::conformance;
use crate::pg_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use conformance::set::{RunningSet, SetBackend};
use conformance::{
    Backend, Contender, Fault, FaultKind, Options, StatusReader, Work, WorkTerm, LEASE, PATIENCE,
};
use pg_support::bouncer::Bouncer;
use pg_support::{admin, config, contender, drop_table, unique_table, url_for, wait_for, PG_ADDR};
use picolease::postgres::{
    force_release, init, status, Fence, LeaderContext, PgConnector, PgError, PgLease, PgLeaseSet,
};
use picolease::set::SetView;
use picolease::sql::LeaseRow;
use picolease::{
    Config, Epoch, HolderId, Leadership, LeaseName, SetConfig, Subscription, TableName,
};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::watch;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

const TTL: Duration = Duration::from_millis(1000);

/// Tables of this test's own, an admin connection, and the runtime the
/// drivers run on.
struct Pg<const POOLED: bool = false> {
    runtime: Runtime,
    admin: Arc<Client>,
    table: TableName,
    /// The contenders' pooler, when `POOLED`.
    bouncer: Option<Bouncer>,
}

/// The shared cases behind a transaction pooler.
type Pooled = Pg<true>;

/// A pooled contender's URL parameters: the pooler announced, release
/// notices on a direct connection.
const POOLED_PARAMS: &str = "&picolease_pooler=transaction&picolease_notify_url=postgres%3A%2F%2Fpostgres%40127.0.0.1%3A5432%2Ftest";

fn fault(error: PgError) -> Fault {
    let message = error.to_string();
    let kind = match error {
        PgError::Config(e) => FaultKind::Config(e),
        PgError::MissingTable { table } => FaultKind::MissingTable { table },
        PgError::Row { table, source } => FaultKind::Row { table, source },
        _ => FaultKind::Other,
    };
    Fault {
        kind: Box::new(kind),
        message,
    }
}

impl<const POOLED: bool> Pg<POOLED> {
    /// The URL a contender named `app` connects with.
    fn contender_url(&self, app: &str) -> String {
        match &self.bouncer {
            Some(bouncer) => bouncer.url(app, POOLED_PARAMS),
            None => url_for(PG_ADDR, app),
        }
    }

    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The test's other tables.
    fn jobs(&self) -> String {
        format!("{}_jobs", self.table.table())
    }

    fn other(&self) -> String {
        format!("{}_other", self.table.table())
    }

    /// The test's tables that exist now, by name.
    fn existing_tables(&self) -> Vec<String> {
        let names = vec![self.table.table().to_string(), self.jobs(), self.other()];
        self.block_on(self.admin.query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = ANY($1) ORDER BY 1",
            &[&names],
        ))
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    }
}

impl<const POOLED: bool> Drop for Pg<POOLED> {
    fn drop(&mut self) {
        let (admin, table, jobs, other) = (
            self.admin.clone(),
            self.table.clone(),
            self.jobs(),
            self.other(),
        );
        self.runtime.block_on(async move {
            drop_table(&admin, &table).await;
            let _ = admin
                .batch_execute(&format!(
                    "DROP TABLE IF EXISTS \"{jobs}\"; DROP TABLE IF EXISTS \"{other}\""
                ))
                .await;
        });
    }
}

/// A running PostgreSQL contender, driven through its runtime's handle.
struct PgContender {
    lease: PgLease,
    handle: Handle,
    from_start: Option<Subscription>,
}

/// Runs `work` the way a user's task runs on this driver: `started` in
/// the task, then `ctx.cancelled().await`, then `stopping` (blocking) on a
/// blocking thread, awaited by the task.
fn gated(
    work: Work,
) -> impl Fn(LeaderContext) -> futures::future::BoxFuture<'static, ()> + Send + Sync + 'static {
    use futures::FutureExt;
    move |ctx: LeaderContext| {
        let work = work.clone();
        async move {
            let term = |ctx: &LeaderContext| WorkTerm {
                lease: ctx.lease().clone(),
                holder: ctx.holder().clone(),
                epoch: ctx.epoch(),
                fence_epoch: ctx.fence().epoch(),
                cancelled: ctx.is_cancelled(),
            };
            (work.started)(&term(&ctx));
            ctx.cancelled().await;
            let term = term(&ctx);
            tokio::task::spawn_blocking(move || (work.stopping)(&term))
                .await
                .expect("the stopping hook ran");
        }
        .boxed()
    }
}

impl Contender for PgContender {
    type Fence = Fence;

    fn holder(&self) -> &HolderId {
        self.lease.holder()
    }

    fn leadership(&self) -> Leadership {
        self.lease.leadership()
    }

    fn watch(&self) -> watch::Receiver<Leadership> {
        self.lease.watch()
    }

    fn subscribe(&self) -> Subscription {
        self.lease.subscribe()
    }

    fn take_start_subscription(&mut self) -> Subscription {
        self.from_start.take().expect("taken once")
    }

    fn wait_for(
        &self,
        timeout: Duration,
        done: impl FnMut(&Leadership) -> bool,
    ) -> Option<Leadership> {
        let mut rx = self.lease.watch();
        self.handle.block_on(async move {
            match tokio::time::timeout(timeout, rx.wait_for(done)).await {
                Ok(Ok(l)) => Some(l.clone()),
                _ => None,
            }
        })
    }

    fn fence(&self) -> Option<Fence> {
        self.lease.fence()
    }

    fn fence_epoch(fence: &Fence) -> Epoch {
        fence.epoch()
    }

    fn renew_latencies(&self) -> Vec<Duration> {
        self.lease.renew_latencies()
    }

    fn add_work(&self, work: Work) {
        self.lease.while_leader(gated(work));
    }

    fn is_finished(&self) -> bool {
        self.lease.is_finished()
    }

    fn shutdown(self) -> Result<(), Fault> {
        let PgContender { lease, handle, .. } = self;
        handle
            .block_on(async { tokio::time::timeout(PATIENCE, lease.shutdown()).await })
            .expect("shutdown returns")
            .map_err(fault)
    }

    fn abort(self) {
        self.lease.abort();
    }

    fn into_fatal(self) -> Fault {
        let PgContender {
            mut lease, handle, ..
        } = self;
        // `stopped` reports the error and leaves the handle usable.
        let error = handle
            .block_on(async { tokio::time::timeout(PATIENCE, lease.stopped()).await })
            .expect("the driver stops")
            .expect_err("with an error");
        assert!(!lease.watch().borrow().is_leader());
        assert_eq!(
            handle.block_on(lease.shutdown()),
            Ok(()),
            "reported once, by `stopped`"
        );
        fault(error)
    }
}

impl<const POOLED: bool> Backend for Pg<POOLED> {
    type Lease = PgContender;
    const TTL: Duration = TTL;
    const CRASH_EARLY: Duration = Duration::from_millis(50);
    const CRASH_LATE: Duration = Duration::from_millis(500);
    // With notifications the successor takes over in milliseconds.
    const HANDOVER_LATE: Duration = Duration::from_secs(3);
    const CHECKS_TABLE_AT_START: bool = false;
    const MISSING_TABLE_STATUS_IS_ERROR: bool = true;

    fn fresh(test: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        // Panics, failing the test, when the server is unreachable.
        let admin = Arc::new(runtime.block_on(admin()));
        Pg {
            runtime,
            admin,
            table: unique_table(test),
            bouncer: POOLED.then(Bouncer::start),
        }
    }

    fn table_name(&self) -> String {
        self.table.to_string()
    }

    fn config(&self, holder: &str) -> Config {
        pg_support::config(LEASE, holder, TTL)
    }

    fn start_with(&self, config: Config, options: Options) -> Result<PgContender, Fault> {
        // Distinct application names per test, so that no other test's
        // `terminate_backends` can touch these connections.
        let app = format!("{}_{}", self.table.table(), config.holder);
        let connector = PgConnector::new(&self.contender_url(&app)).unwrap();
        let mut builder = PgLease::builder(config, connector)
            .table(self.table.clone())
            .auto_create(options.auto_create);
        for work in options.work {
            builder = builder.while_leader(gated(work));
        }
        let from_start = Some(builder.subscribe());
        let _entered = self.runtime.enter();
        let lease = builder.start().map_err(fault)?;
        Ok(PgContender {
            lease,
            handle: self.runtime.handle().clone(),
            from_start,
        })
    }

    fn status(&self) -> Result<Vec<LeaseRow>, Fault> {
        self.block_on(status(&self.admin, &self.table))
            .map_err(fault)
    }

    fn status_reader(&self) -> StatusReader {
        let (admin, table, handle) = (
            self.admin.clone(),
            self.table.clone(),
            self.runtime.handle().clone(),
        );
        Arc::new(move || handle.block_on(status(&admin, &table)).unwrap())
    }

    fn force_release(&self, lease: &str) -> Result<Option<Epoch>, Fault> {
        self.block_on(force_release(
            &self.admin,
            &self.table,
            &LeaseName::new(lease).unwrap(),
            std::time::Duration::from_secs(10),
        ))
        .map_err(fault)
    }

    fn init(&self) -> Result<(), Fault> {
        self.block_on(init(&self.admin, &self.table)).map_err(fault)
    }

    fn table_exists(&self) -> bool {
        self.existing_tables()
            .contains(&self.table.table().to_string())
    }

    fn untouched(&self) -> bool {
        self.existing_tables().is_empty()
    }

    fn create_malformed(&self, epoch_sql: &str) {
        let table = &self.table;
        self.block_on(self.admin.batch_execute(&format!(
            // With the incarnation column the library adds (DESIGN §3
            // "Failover"), so that starting a driver changes no schema.
            "CREATE TABLE {table} (name text PRIMARY KEY, holder text, epoch bigint, expires_at bigint, \
             incarnation bigint);
             INSERT INTO {table} VALUES ('{LEASE}', 'someone', {epoch_sql}, 0, 7)"
        )))
        .unwrap();
    }

    fn raw_row(&self) -> (Option<String>, Option<i64>, Option<i64>) {
        let row = self
            .block_on(self.admin.query_one(
                &format!(
                    "SELECT holder, epoch, expires_at FROM {} WHERE name = $1",
                    self.table
                ),
                &[&LEASE],
            ))
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    }

    fn create_other_table(&self) {
        let other = self.other();
        self.block_on(self.admin.batch_execute(&format!(
            "CREATE TABLE \"{other}\" (x bigint); INSERT INTO \"{other}\" VALUES (1)"
        )))
        .unwrap();
    }

    fn snapshot(&self) -> Vec<String> {
        let mut out = Vec::new();
        for table in self.existing_tables() {
            let rows = self
                .block_on(self.admin.query(
                    &format!("SELECT t::text FROM \"{table}\" t ORDER BY 1"),
                    &[],
                ))
                .unwrap();
            out.push(table);
            out.extend(rows.iter().map(|r| r.get::<_, String>(0)));
        }
        out
    }

    fn create_jobs(&self) {
        let jobs = self.jobs();
        self.block_on(self.admin.batch_execute(&format!(
            "CREATE TABLE \"{jobs}\" (id bigint PRIMARY KEY, done_by text, done_at_epoch bigint);
             INSERT INTO \"{jobs}\" (id) VALUES (1), (2)"
        )))
        .unwrap();
    }

    fn fenced_write(&self, fence: &Fence, id: i64, by: &str, epoch: Epoch) -> u64 {
        let sql = format!(
            "UPDATE \"{}\" SET done_by = $1, done_at_epoch = $2 WHERE id = $3 AND {}",
            self.jobs(),
            fence.condition(4)
        );
        let epoch = epoch.to_i64();
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&by, &epoch, &id];
        params.extend(fence.params());
        self.block_on(self.admin.execute(&sql, &params)).unwrap()
    }

    fn jobs(&self) -> Vec<(i64, Option<String>, Option<i64>)> {
        self.block_on(self.admin.query(
            &format!(
                "SELECT id, done_by, done_at_epoch FROM \"{}\" ORDER BY id",
                self.jobs()
            ),
            &[],
        ))
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    }
}

conformance_tests!(Pg);
conformance_tests!(set: Pg);

mod pooled {
    use super::Pooled;

    conformance_tests!(Pooled);
    conformance_tests!(set: Pooled);
}

impl<const POOLED: bool> SetBackend for Pg<POOLED> {
    type Set = PgSetContender;

    fn start_set(
        &self,
        template: SetConfig,
        leases: Vec<LeaseName>,
        options: Options,
    ) -> Result<(PgSetContender, Subscription), Fault> {
        let app = format!("{}_{}", self.table.table(), template.holder);
        let connector = PgConnector::new(&self.contender_url(&app)).unwrap();
        let mut builder = PgLeaseSet::builder(template, leases, connector)
            .table(self.table.clone())
            .auto_create(options.auto_create);
        for work in options.work {
            builder = builder.while_leader(gated(work));
        }
        let from_start = builder
            .subscribe_to(&LeaseName::new(LEASE).unwrap())
            .expect("the lease is in the set");
        let _entered = self.runtime.enter();
        let set = builder.start().map_err(fault)?;
        let contender = PgSetContender {
            set,
            handle: self.runtime.handle().clone(),
        };
        Ok((contender, from_start))
    }
}

/// A running PostgreSQL set, driven through its runtime's handle.
struct PgSetContender {
    set: PgLeaseSet,
    handle: Handle,
}

impl RunningSet for PgSetContender {
    type Fence = Fence;

    fn view(&self) -> &SetView {
        &self.set
    }

    fn fence(&self, lease: &LeaseName) -> Option<Fence> {
        self.set.fence(lease)
    }

    fn fence_epoch(fence: &Fence) -> Epoch {
        fence.epoch()
    }

    fn add_work(&self, work: Work) {
        self.set.while_leader(gated(work));
    }

    fn is_finished(&self) -> bool {
        self.set.is_finished()
    }

    fn shutdown(self) -> Result<(), Fault> {
        let PgSetContender { set, handle } = self;
        handle
            .block_on(async { tokio::time::timeout(PATIENCE, set.shutdown()).await })
            .expect("shutdown returns")
            .map_err(fault)
    }

    fn abort(self) {
        self.set.abort();
    }

    fn hand_over(&self, lease: &LeaseName, to: &str) {
        self.set
            .hand_over(lease, Some(to))
            .expect("a valid node name");
    }

    fn into_fatal(self) -> Fault {
        let PgSetContender { mut set, handle } = self;
        // `stopped` reports the error and leaves the handle usable.
        let error = handle
            .block_on(async { tokio::time::timeout(PATIENCE, set.stopped()).await })
            .expect("the set stops")
            .expect_err("with an error");
        assert!(set.watch().borrow().is_empty());
        assert_eq!(
            handle.block_on(set.shutdown()),
            Ok(()),
            "reported once, by `stopped`"
        );
        fault(error)
    }
}

// What only PostgreSQL has. These keep the async form (and the lease name
// "l") of the suite they come from.

/// A table whose columns have the wrong types is a typed error; no row is
/// written.
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

/// Malformed and unreachable URLs: typed errors, no panic; a driver
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

/// A user that does not exist: a login error from the admin helpers and
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
    assert!(started.elapsed() < Duration::from_secs(10));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async { drop_table(&admin().await, &table).await });
}

/// The async flavour of the shared case 11, as users write it: a task
/// registered on the running handle gets the current term's context and
/// is cancelled on shutdown.
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

/// `init` on an existing table (every driver's start runs it) sends the
/// client no NOTICE ("relation … already exists, skipping"), which the
/// user's connection would log on every start.
#[tokio::test]
async fn init_on_an_existing_table_sends_no_notice() {
    let table = unique_table("notice");
    let (client, mut connection) =
        tokio_postgres::connect(&pg_support::url(), tokio_postgres::NoTls)
            .await
            .expect("the PostgreSQL server at 127.0.0.1:5432 must be running");
    let notices = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&notices);
    let driven = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = futures::StreamExt::next(&mut messages).await {
            if let tokio_postgres::AsyncMessage::Notice(notice) = message {
                seen.lock().unwrap().push(notice.message().to_string());
            }
        }
    });
    picolease::postgres::init(&client, &table).await.unwrap();
    picolease::postgres::init(&client, &table).await.unwrap();
    // A notice of our own, after init's, marks that every earlier one
    // has been read off the connection.
    client
        .batch_execute("DO $$ BEGIN RAISE NOTICE 'picolease-test-mark'; END $$")
        .await
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while !notices
        .lock()
        .unwrap()
        .iter()
        .any(|n| n == "picolease-test-mark")
    {
        assert!(Instant::now() < deadline, "our own notice never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        *notices.lock().unwrap(),
        vec!["picolease-test-mark".to_string()],
        "init sent notices"
    );
    drop_table(&client, &table).await;
    drop(client);
    let _ = driven.await;
}
