//! Driver conformance on the real MySQL/MariaDB at 127.0.0.1:3306 (user
//! `root`, no password, database `test`; `PICOLEASE_MYSQL_URL` overrides,
//! e.g. `mysql://user:pass@host:3306/db`): the shared cases of
//! `conformance/mod.rs` (see its docs for the list), over a lone lease and
//! over sets of 1 and 3 leases, then the cases that only apply to MySQL
//! (URLs, logins, a killed lease connection).
//!
//! These tests **fail** when the server is unreachable: a skipped
//! conformance test proves nothing. Every test has tables of its own
//! (unique names), so they run in parallel, and drops them.
//!
//! The shared cases are blocking code: [`My`] owns a multi-thread tokio
//! runtime, starts the async driver on it and blocks on its futures. Raw
//! SQL (malformed tables, raw rows, the jobs table, fenced writes) goes
//! through an admin connection of mysql_async's own.
//!
//! `cargo test -p picolease-tests --test integration conformance_mysql::`

use crate::conformance;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conformance::set::{RunningSet, SetBackend};
use conformance::{
    Backend, Contender, Fault, FaultKind, Options, StatusReader, Work, WorkTerm, LEASE, PATIENCE,
};
use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Conn, Opts, OptsBuilder, Params, Value};
use picolease::mysql::{
    force_release, init, status, Fence, LeaderContext, MysqlConnector, MysqlError, MysqlLease,
    MysqlLeaseSet,
};
use picolease::set::SetView;
use picolease::sql::LeaseRow;
use picolease::{
    Config, Epoch, HolderId, Leadership, LeaseName, SetConfig, Subscription, TableName,
};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::watch;

const TTL: Duration = Duration::from_millis(1000);

/// The test server's URL.
fn url() -> String {
    std::env::var("PICOLEASE_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// The test server's URL, parsed.
fn opts() -> Opts {
    let url = url();
    Opts::from_url(&url)
        .unwrap_or_else(|e| panic!("PICOLEASE_MYSQL_URL {url:?} is not a MySQL URL: {e}"))
}

/// The URL of the test server's database with other credentials or
/// another database.
fn url_with(user: &str, password: Option<&str>, db: &str) -> String {
    let opts = opts();
    let credentials = match password {
        Some(password) => format!("{user}:{password}"),
        None => user.to_string(),
    };
    format!(
        "mysql://{credentials}@{}:{}/{db}",
        opts.ip_or_hostname(),
        opts.tcp_port()
    )
}

/// The test database's name.
fn database() -> String {
    opts()
        .db_name()
        .expect("PICOLEASE_MYSQL_URL names a database")
        .to_string()
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A table name unique to this test and process, so tests run in parallel.
fn unique_table(test: &str) -> TableName {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = format!("plm_{}_{}_{}", test, std::process::id(), n);
    TableName::new(&name).expect("valid table name")
}

/// A configuration with `ttl`, the interval a quarter of it, and a drift
/// allowance of 5% (as `pg_support::config`).
fn config(lease: &str, holder: &str, ttl: Duration) -> Config {
    let mut config = Config::with_ttl(
        LeaseName::new(lease).unwrap(),
        HolderId::new(holder).unwrap(),
        ttl,
    );
    config.drift = ttl / 20;
    config.seed = holder
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
    config
}

/// Tables of this test's own, an admin connection, and the runtime the
/// drivers run on.
struct My {
    runtime: Runtime,
    admin: Mutex<Option<Conn>>,
    connector: MysqlConnector,
    table: TableName,
}

fn fault(error: MysqlError) -> Fault {
    let message = error.to_string();
    let kind = match error {
        MysqlError::Config(e) => FaultKind::Config(e),
        MysqlError::MissingTable { table } => FaultKind::MissingTable { table },
        MysqlError::Row { table, source } => FaultKind::Row { table, source },
        _ => FaultKind::Other,
    };
    Fault {
        kind: Box::new(kind),
        message,
    }
}

impl My {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Rows of `sql` on the admin connection (panics on error).
    fn query<T: FromRow + Send + 'static>(&self, sql: &str, params: impl Into<Params>) -> Vec<T> {
        let params = params.into();
        let mut admin = self.admin.lock().unwrap();
        let conn = admin.as_mut().expect("connected");
        self.runtime
            .block_on(conn.exec(sql, params))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs `sql` on the admin connection: the rows it affected.
    fn execute(&self, sql: &str, params: impl Into<Params>) -> u64 {
        let params = params.into();
        let mut admin = self.admin.lock().unwrap();
        let conn = admin.as_mut().expect("connected");
        self.runtime
            .block_on(conn.exec_drop(sql, params))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        conn.affected_rows()
    }

    /// Runs `sql` (no parameters, text protocol) on the admin connection.
    fn batch(&self, sql: &str) -> Result<(), mysql_async::Error> {
        let mut admin = self.admin.lock().unwrap();
        let conn = admin.as_mut().expect("connected");
        self.runtime.block_on(conn.query_drop(sql))
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
        self.query(
            "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name IN (?, ?, ?) ORDER BY 1",
            names,
        )
    }

    /// Starts a lone lease on this test's table through `connector`.
    fn start_on(
        &self,
        connector: MysqlConnector,
        config: Config,
        options: Options,
    ) -> Result<MyContender, Fault> {
        let mut builder = MysqlLease::builder(config, connector)
            .table(self.table.clone())
            .auto_create(options.auto_create);
        for work in options.work {
            builder = builder.while_leader(gated(work));
        }
        let from_start = Some(builder.subscribe());
        let _entered = self.runtime.enter();
        let lease = builder.start().map_err(fault)?;
        Ok(MyContender {
            lease,
            handle: self.runtime.handle().clone(),
            from_start,
        })
    }
}

impl Drop for My {
    fn drop(&mut self) {
        let tables = [self.table.table().to_string(), self.jobs(), self.other()];
        let sql = format!(
            "DROP TABLE IF EXISTS {}",
            tables
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = self.batch(&sql);
        if let Some(conn) = self.admin.lock().unwrap().take() {
            let _ = self.runtime.block_on(conn.disconnect());
        }
    }
}

/// A running MySQL contender, driven through its runtime's handle.
struct MyContender {
    lease: MysqlLease,
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

impl Contender for MyContender {
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
        let MyContender { lease, handle, .. } = self;
        handle
            .block_on(async { tokio::time::timeout(PATIENCE, lease.shutdown()).await })
            .expect("shutdown returns")
            .map_err(fault)
    }

    fn abort(self) {
        self.lease.abort();
    }

    fn into_fatal(self) -> Fault {
        let MyContender {
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

impl Backend for My {
    type Lease = MyContender;
    const TTL: Duration = TTL;
    const CRASH_EARLY: Duration = Duration::from_millis(50);
    const CRASH_LATE: Duration = Duration::from_millis(500);
    // A lone lease's successor is woken by the leader's user lock; a
    // set's takes over at its next poll, within an interval.
    const HANDOVER_LATE: Duration = Duration::from_secs(3);
    const CHECKS_TABLE_AT_START: bool = false;
    const MISSING_TABLE_STATUS_IS_ERROR: bool = true;

    fn fresh(test: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let url = url();
        let admin_opts = OptsBuilder::from_opts(opts()).prefer_socket(false);
        // Panics, failing the test, when the server is unreachable.
        let admin = runtime.block_on(Conn::new(admin_opts)).unwrap_or_else(|e| {
            panic!(
                "MySQL/MariaDB must be reachable at {url:?} for these tests (they never skip): {e}"
            )
        });
        let connector = MysqlConnector::new(&url).expect("a MySQL URL");
        My {
            runtime,
            admin: Mutex::new(Some(admin)),
            connector,
            table: unique_table(test),
        }
    }

    fn table_name(&self) -> String {
        self.table.to_string()
    }

    fn config(&self, holder: &str) -> Config {
        config(LEASE, holder, TTL)
    }

    fn start_with(&self, config: Config, options: Options) -> Result<MyContender, Fault> {
        self.start_on(self.connector.clone(), config, options)
    }

    fn status(&self) -> Result<Vec<LeaseRow>, Fault> {
        self.block_on(status(&self.connector, &self.table))
            .map_err(fault)
    }

    fn status_reader(&self) -> StatusReader {
        let (connector, table, handle) = (
            self.connector.clone(),
            self.table.clone(),
            self.runtime.handle().clone(),
        );
        Arc::new(move || handle.block_on(status(&connector, &table)).unwrap())
    }

    fn force_release(&self, lease: &str) -> Result<Option<Epoch>, Fault> {
        self.block_on(force_release(
            &self.connector,
            &self.table,
            &LeaseName::new(lease).unwrap(),
            std::time::Duration::from_secs(10),
        ))
        .map_err(fault)
    }

    fn init(&self) -> Result<(), Fault> {
        self.block_on(init(&self.connector, &self.table))
            .map_err(fault)
    }

    fn table_exists(&self) -> bool {
        self.existing_tables()
            .contains(&self.table.table().to_string())
    }

    fn untouched(&self) -> bool {
        self.existing_tables().is_empty()
    }

    fn create_malformed(&self, epoch_sql: &str) {
        // The driver's columns (`core/src/sql/mysql.rs`), without the NOT
        // NULLs and the `(name, epoch)` index; with the incarnation column
        // (DESIGN §3 "Failover"), so that starting a driver changes no
        // schema and stamps no row.
        let table = self.table.table();
        self.batch(&format!(
            "CREATE TABLE `{table}` (name VARBINARY(255) PRIMARY KEY, holder VARBINARY(255), \
             epoch BIGINT, expires_at BIGINT, incarnation BIGINT) ENGINE=InnoDB"
        ))
        .unwrap();
        self.batch(&format!(
            "INSERT INTO `{table}` VALUES ('{LEASE}', 'someone', {epoch_sql}, 0, 7)"
        ))
        .unwrap();
    }

    fn raw_row(&self) -> (Option<String>, Option<i64>, Option<i64>) {
        let rows: Vec<(Option<String>, Option<i64>, Option<i64>)> = self.query(
            &format!(
                "SELECT holder, epoch, expires_at FROM `{}` WHERE name = ?",
                self.table.table()
            ),
            (LEASE,),
        );
        match rows.as_slice() {
            [row] => row.clone(),
            _ => panic!("one row for {LEASE:?}: {rows:?}"),
        }
    }

    fn create_other_table(&self) {
        let other = self.other();
        self.batch(&format!("CREATE TABLE `{other}` (x BIGINT) ENGINE=InnoDB"))
            .unwrap();
        self.batch(&format!("INSERT INTO `{other}` VALUES (1)"))
            .unwrap();
    }

    fn snapshot(&self) -> Vec<String> {
        let mut out = Vec::new();
        for table in self.existing_tables() {
            let rows: Vec<mysql_async::Row> =
                self.query(&format!("SELECT * FROM `{table}` ORDER BY 1"), ());
            out.push(table);
            out.extend(rows.into_iter().map(|row| {
                row.unwrap()
                    .iter()
                    .map(|v| v.as_sql(false))
                    .collect::<Vec<_>>()
                    .join(", ")
            }));
        }
        out
    }

    fn create_jobs(&self) {
        let jobs = self.jobs();
        self.batch(&format!(
            "CREATE TABLE `{jobs}` (id BIGINT PRIMARY KEY, done_by VARCHAR(64), \
             done_at_epoch BIGINT) ENGINE=InnoDB"
        ))
        .unwrap();
        self.batch(&format!("INSERT INTO `{jobs}` (id) VALUES (1), (2)"))
            .unwrap();
    }

    fn fenced_write(&self, fence: &Fence, id: i64, by: &str, epoch: Epoch) -> u64 {
        let sql = format!(
            "UPDATE `{}` SET done_by = ?, done_at_epoch = ? WHERE id = ? AND {}",
            self.jobs(),
            fence.condition()
        );
        let mut params: Vec<Value> = vec![by.into(), epoch.to_i64().into(), id.into()];
        params.extend(fence.params());
        self.execute(&sql, params)
    }

    fn jobs(&self) -> Vec<(i64, Option<String>, Option<i64>)> {
        self.query(
            &format!(
                "SELECT id, done_by, done_at_epoch FROM `{}` ORDER BY id",
                self.jobs()
            ),
            (),
        )
    }
}

conformance_tests!(My);
conformance_tests!(set: My);

impl SetBackend for My {
    type Set = MySetContender;

    fn start_set(
        &self,
        template: SetConfig,
        leases: Vec<LeaseName>,
        options: Options,
    ) -> Result<(MySetContender, Subscription), Fault> {
        let mut builder = MysqlLeaseSet::builder(template, leases, self.connector.clone())
            .table(self.table.clone())
            .auto_create(options.auto_create);
        for work in options.work {
            builder = builder.while_leader(gated(work));
        }
        // `MysqlLeaseSetBuilder` has no `subscribe_to(&lease)` (the
        // PostgreSQL and SQLite set builders have): the whole set's
        // transitions from the start, which the cases filter by their
        // predicates.
        let from_start = builder.subscribe();
        let _entered = self.runtime.enter();
        let set = builder.start().map_err(fault)?;
        let contender = MySetContender {
            set,
            handle: self.runtime.handle().clone(),
        };
        Ok((contender, from_start))
    }
}

/// A running MySQL set, driven through its runtime's handle.
struct MySetContender {
    set: MysqlLeaseSet,
    handle: Handle,
}

impl RunningSet for MySetContender {
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
        let MySetContender { set, handle } = self;
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
        let MySetContender { mut set, handle } = self;
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

// What only MySQL has. Blocking, on a backend of their own (its runtime,
// its admin connection, its table dropped afterwards).

impl MyContender {
    /// Waits on the watch channel until `done`, or panics naming `what`.
    fn wait_or_panic(&self, what: &str, done: impl FnMut(&Leadership) -> bool) -> Leadership {
        self.wait_for(PATIENCE, done).unwrap_or_else(|| {
            panic!(
                "{what}: not within {PATIENCE:?}; last state {:?}, last error {:?}",
                self.leadership(),
                self.lease.last_error()
            )
        })
    }
}

/// Malformed and unreachable URLs: typed errors, no panic, no password in
/// the message; a driver against an unreachable server keeps trying,
/// reports the error, and shuts down promptly.
#[test]
fn malformed_and_unreachable_urls_are_typed_errors() {
    for bad in [
        "postgres://x",
        "host=127.0.0.1 user=root",
        "mysql://root@127.0.0.1:3306",
        "mysql://root@127.0.0.1:3306/",
        "mysql://root@127.0.0.1:notaport/test",
    ] {
        let err = MysqlConnector::new(bad).unwrap_err();
        assert!(
            matches!(err, MysqlError::InvalidUrl { .. }),
            "{bad}: {err:?}"
        );
    }
    let err = MysqlConnector::new("mysql://u:secret@127.0.0.1:3306").unwrap_err();
    assert!(matches!(err, MysqlError::InvalidUrl { .. }), "{err:?}");
    assert!(!err.to_string().contains("secret"), "{err}");
    assert!(!format!("{err:?}").contains("secret"), "{err:?}");

    let db = My::fresh("unreach");
    // Port 1 on localhost: connection refused.
    let unreachable = MysqlConnector::new("mysql://root@127.0.0.1:1/test").unwrap();
    let err = db.block_on(unreachable.connect_client()).unwrap_err();
    assert!(matches!(err, MysqlError::Connect { .. }), "{err:?}");

    let a = db
        .start_on(unreachable, config(LEASE, "a", TTL), Options::default())
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while a.lease.last_error().is_none() {
        assert!(Instant::now() < deadline, "no error reported");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        matches!(
            a.lease.last_error(),
            Some(MysqlError::Connect { .. } | MysqlError::Timeout { .. })
        ),
        "{:?}",
        a.lease.last_error()
    );
    assert!(!a.leadership().is_leader());
    assert!(!a.is_finished(), "a connect error is retried");
    let started = Instant::now();
    a.shutdown().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(db.untouched());
}

/// Refused logins (a wrong password, an unknown database): a login error
/// from the admin helpers and from the driver, which stops instead of
/// retrying forever; nothing is created.
#[test]
fn wrong_credentials_and_unknown_databases_are_login_errors() {
    let db = My::fresh("login");
    let user = opts().user().unwrap_or("root").to_string();
    for (url, code) in [
        (
            url_with(&user, Some("picolease_wrong_password"), &database()),
            1045,
        ),
        (url_with(&user, opts().pass(), "no_such_db_picolease"), 1049),
    ] {
        let connector = MysqlConnector::new(&url).unwrap();
        let err = db.block_on(connector.connect_client()).unwrap_err();
        assert!(
            matches!(&err, MysqlError::Login { code: c, .. } if *c == code),
            "{url}: {err:?}"
        );
        assert!(
            !err.to_string().contains("picolease_wrong_password"),
            "{err}"
        );
        let err = db.block_on(status(&connector, &db.table)).unwrap_err();
        assert!(matches!(err, MysqlError::Login { .. }), "{url}: {err:?}");

        let a = db
            .start_on(connector, config(LEASE, "a", TTL), Options::default())
            .unwrap();
        assert!(a.wait_finished(PATIENCE), "{url}: the driver stops");
        assert!(!a.leadership().is_leader());
        let fault = a.into_fatal();
        assert!(
            fault.message.contains(&format!("error {code}")),
            "{url}: {fault:?}"
        );
        assert!(
            !fault.message.contains("picolease_wrong_password"),
            "{fault:?}"
        );
    }
    assert!(db.untouched(), "nothing created");
    assert_eq!(
        *db.status().unwrap_err().kind,
        FaultKind::MissingTable {
            table: db.table_name()
        }
    );
}

/// A user of this test's own, dropped afterwards.
struct TestUser<'a> {
    db: &'a My,
    name: String,
}

impl Drop for TestUser<'_> {
    fn drop(&mut self) {
        let _ = self
            .db
            .batch(&format!("DROP USER IF EXISTS '{}'@'%'", self.name));
    }
}

/// The server kills the leader's connection (`KILL`, as a DBA or a
/// failover would): the driver notices at its next statement, connects
/// afresh and leads on, the row still its own. The connections killed
/// are those of a user created for this test only.
#[test]
fn a_killed_lease_connection_is_replaced_and_the_driver_leads_again() {
    let db = My::fresh("kill");
    let user = TestUser {
        db: &db,
        name: format!("{}_u", db.table.table()),
    };
    let password = "picolease_kill_test";
    db.batch(&format!(
        "CREATE USER '{}'@'%' IDENTIFIED BY '{password}'",
        user.name
    ))
    .unwrap();
    db.batch(&format!(
        "GRANT ALL PRIVILEGES ON `{}`.* TO '{}'@'%'",
        database(),
        user.name
    ))
    .unwrap();
    let connector = MysqlConnector::new(&url_with(&user.name, Some(password), &database()))
        .expect("a MySQL URL");
    let ids = || -> Vec<u64> {
        db.query(
            "SELECT id FROM information_schema.processlist WHERE user = ? ORDER BY id",
            (user.name.as_str(),),
        )
    };

    let mut a = db
        .start_on(connector, config(LEASE, "a", TTL), Options::default())
        .unwrap();
    let mut transitions = a.take_start_subscription();
    let first = a.wait_or_panic("a leads", Leadership::is_leader);
    let killed = ids();
    assert!(
        !killed.is_empty(),
        "the leader's connection is in the process list"
    );
    for id in &killed {
        match db.batch(&format!("KILL CONNECTION {id}")) {
            Ok(()) => {}
            // ER_NO_SUCH_THREAD: it had gone already.
            Err(mysql_async::Error::Server(e)) if e.code == 1094 => {}
            Err(e) => panic!("KILL {id}: {e}"),
        }
    }
    let killed_at = Instant::now();
    // The driver meets the dead connection at its next statement, and
    // leads on through a new one.
    let mut errors = Vec::new();
    loop {
        if let Some(error) = a.lease.last_error() {
            if !errors.contains(&error) {
                errors.push(error);
            }
        }
        let now = ids();
        let replaced = !now.is_empty() && now.iter().all(|id| !killed.contains(id));
        let row = db.status().unwrap();
        if replaced
            && a.leadership().is_leader()
            && row[0].holder.as_deref() == Some("a")
            && a.lease.last_error().is_none()
            && killed_at.elapsed() > TTL
        {
            break;
        }
        assert!(
            killed_at.elapsed() < PATIENCE,
            "no recovery: connections {now:?} (killed {killed:?}), {:?}, rows {row:?}, errors {errors:?}",
            a.leadership()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!a.is_finished(), "a killed connection is not fatal");
    let again = a.leadership();
    assert!(again.epoch >= first.epoch);
    let mut seen = Vec::new();
    while let Ok(t) = transitions.recv_timeout(Duration::ZERO) {
        seen.push(t.leadership);
    }
    eprintln!(
        "killed {killed:?}: first {first:?}, now {again:?}; errors seen {errors:?}; transitions {seen:?}"
    );
    a.shutdown().unwrap();
    assert_eq!(db.status().unwrap()[0].holder, None, "released");
}

/// A row as the migration test reads it: name, holder, epoch, expiry,
/// incarnation.
type MigratedRow = (String, Option<String>, i64, i64, Option<i64>);

/// A table an older picolease made, without the `incarnation` column
/// (DESIGN §3 "Failover", "Migration"): `init` adds the column and stamps
/// every row with this server's `@@server_id`, so the rows stay their
/// holders' (nothing is adopted, no grace period); run again, it changes
/// nothing, not even a row stamped since.
#[test]
fn init_adds_the_incarnation_column_to_an_older_table_once() {
    let db = My::fresh("migrate");
    let table = db.table.table().to_string();
    db.batch(&format!(
        "CREATE TABLE `{table}` (`name` varbinary(255) NOT NULL PRIMARY KEY, \
         `holder` varbinary(255) NULL, `epoch` bigint NOT NULL, `expires_at` bigint NOT NULL, \
         UNIQUE KEY `{table}_fence` (`name`, `epoch`)) ENGINE=InnoDB"
    ))
    .unwrap();
    db.batch(&format!(
        "INSERT INTO `{table}` VALUES ('{LEASE}', 'old', 7, 99999999999999), ('free', NULL, 3, 0)"
    ))
    .unwrap();
    let server_id: Vec<i64> = db.query("SELECT @@server_id", ());
    let rows = || -> Vec<MigratedRow> {
        db.query(
            &format!(
                "SELECT CAST(name AS CHAR), CAST(holder AS CHAR), epoch, expires_at, incarnation \
                 FROM `{table}` ORDER BY name"
            ),
            (),
        )
    };

    db.init().unwrap();
    let id = Some(server_id[0]);
    assert_eq!(
        rows(),
        vec![
            ("free".to_string(), None, 3, 0, id),
            (
                LEASE.to_string(),
                Some("old".to_string()),
                7,
                99999999999999,
                id
            ),
            // The table's marker row (DESIGN §3 "Failover", "A lease's
            // first row"), written by this server.
            ("picolease.table".to_string(), None, 0, 0, id),
        ],
        "the column added, every row stamped, the marker written, nothing else changed"
    );

    db.execute(
        &format!("UPDATE `{table}` SET incarnation = 5 WHERE name = 'free'"),
        (),
    );
    db.init().unwrap();
    let again = rows();
    assert_eq!(
        again[0].4,
        Some(5),
        "a second init stamps nothing: {again:?}"
    );
    assert_eq!(again[1].4, id);

    // A contender's acquire finds the row its holder's: not adopted (an
    // adoption would clear the holder and jump the epoch).
    let b = db
        .start_on(
            db.connector.clone(),
            config(LEASE, "b", TTL),
            Options::default(),
        )
        .unwrap();
    b.wait_or_panic("b sees old hold the lease", |l| {
        l.holder.as_ref().map(|h| h.as_str()) == Some("old")
    });
    let after = rows();
    assert_eq!(
        (after[1].1.as_deref(), after[1].2),
        (Some("old"), 7),
        "{after:?}"
    );
    b.shutdown().unwrap();
}
