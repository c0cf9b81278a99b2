//! Fenced transactions on the real MariaDB at 127.0.0.1:3306 (user
//! `root`, no password, database `test`; `PICOLEASE_MYSQL_URL` overrides),
//! as `pg_fence.rs` checks them on PostgreSQL:
//!
//! - a fenced transaction that wrote in a term and commits after the lease
//!   lapsed is ordered before the successor's term: the successor's
//!   acquire waits for it (the `LOCK IN SHARE MODE` its first statement
//!   takes), and sees its write when its own term begins; without the
//!   lock it would not wait, and the old term's write would land inside
//!   the new one (the negative control);
//! - a fenced transaction is refused once the term is over, leaves the
//!   connection as it found it, and one still running at its deadline is
//!   cut there: its session killed, its lock gone, nothing committed; one
//!   left idle is closed by the server at about its deadline;
//! - the trade InnoDB imposes: the holder's own renewals wait for its open
//!   fenced transaction, until it ends or is cut at its deadline, and no
//!   longer;
//! - a gated task commits through `LeaderContext::fenced_transaction`, and
//!   the handles refuse a node that does not lead.
//!
//! These tests **fail** when the server is unreachable. Every test has
//! tables of its own, dropped at the end. Timings are measured and
//! printed (`--nocapture`) and asserted only against generous bounds;
//! waits are on conditions seen in the server (`INNODB_TRX`,
//! `PROCESSLIST`), never on sleeps.
//!
//! `cargo test -p picolease-tests --test integration mysql_fence:: -- --nocapture`

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Transaction, TxOpts, Value};
use picolease::mysql::{
    force_release, init, run_statement, Fence, FencedTransaction, MysqlConnector, MysqlError,
    MysqlLease, MysqlLeaseSet,
};
use picolease::sql::{Bindings, Dialect, Statements};
use picolease::{Config, Epoch, HolderId, Leadership, LeaseName, SetConfig, TableName};
use picolease_core::{Operation, Reply};
use tokio::sync::watch;
use tokio::time::Instant;

const PATIENCE: Duration = Duration::from_secs(15);

/// InnoDB refreshes `information_schema.INNODB_TRX` only once it has gone
/// unread for 0.1 s: a faster poll would read the same stale rows.
const INNODB_TRX_PACE: Duration = Duration::from_millis(200);

/// The test server's URL.
fn url() -> String {
    std::env::var("PICOLEASE_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

fn connector() -> MysqlConnector {
    MysqlConnector::new(&url()).expect("PICOLEASE_MYSQL_URL is a MySQL URL")
}

/// A connection as the driver makes them (its statements bounded on the
/// server after 10 s).
async fn connect() -> Conn {
    connector()
        .connect_client()
        .await
        .unwrap_or_else(|e| panic!("the MySQL/MariaDB server at {} must be running: {e}", url()))
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A table name unique to this test and process, so tests run in parallel.
fn unique_table(test: &str) -> TableName {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    TableName::new(&format!("mf_{test}_{}_{n}", std::process::id())).expect("valid table name")
}

/// A configuration with `ttl` (interval and request timeout a quarter of
/// it) and a drift allowance of 5%.
fn config(lease: &str, holder: &str, ttl: Duration) -> Config {
    let mut config = Config::with_ttl(
        LeaseName::new(lease).unwrap(),
        HolderId::new(holder).unwrap(),
        ttl,
    );
    config.drift = ttl / 20;
    config
}

fn lease() -> LeaseName {
    LeaseName::new("l").unwrap()
}

/// The fence of `holder` at `epoch` on lease `l`.
fn fence(s: &Statements, holder: &str, epoch: u64) -> Fence {
    Fence::new(
        s,
        &lease(),
        &HolderId::new(holder).unwrap(),
        Epoch::new(epoch),
    )
}

/// A lease table (made by `init`) and an application table `<table>_app`
/// with rows (1, v 0, epoch NULL) and (2, 0, NULL).
struct Tables {
    table: TableName,
    s: Statements,
    app: String,
}

impl Tables {
    async fn new(test: &str, admin: &mut Conn) -> Tables {
        let table = unique_table(test);
        init(&connector(), &table).await.unwrap();
        let app = format!("{}_app", table.table());
        admin
            .query_drop(format!(
                "DROP TABLE IF EXISTS `{app}`; \
                 CREATE TABLE `{app}` (id BIGINT PRIMARY KEY, v BIGINT NOT NULL, epoch BIGINT) ENGINE=InnoDB; \
                 INSERT INTO `{app}` VALUES (1, 0, NULL), (2, 0, NULL)"
            ))
            .await
            .unwrap();
        let s = Statements::new(Dialect::Mysql, &table);
        Tables { table, s, app }
    }

    /// `UPDATE app SET v = v + 1, epoch = <fence's epoch> WHERE id = 1 AND
    /// <fence>`, and its values.
    fn fenced_update(&self, fence: &Fence) -> (String, Vec<Value>) {
        let sql = format!(
            "UPDATE `{}` SET v = v + 1, epoch = ? WHERE id = 1 AND {}",
            self.app,
            fence.condition()
        );
        let mut params = vec![Value::from(fence.epoch().get())];
        params.extend(fence.params());
        (sql, params)
    }

    /// The app row 1: (v, epoch written).
    async fn app_row(&self, conn: &mut Conn) -> (i64, Option<i64>) {
        conn.query_first(format!("SELECT v, epoch FROM `{}` WHERE id = 1", self.app))
            .await
            .unwrap()
            .expect("row 1")
    }

    /// The lease row: (holder, epoch).
    async fn lease_row(&self, conn: &mut Conn) -> (Option<String>, u64) {
        conn.query_first(format!(
            "SELECT CAST(holder AS CHAR), epoch FROM {} WHERE name = 'l'",
            self.table
        ))
        .await
        .unwrap()
        .expect("the lease row")
    }

    /// Runs the protocol's acquire of `l` as `holder` as the driver runs it
    /// (with its read-back, in one transaction), decoded as the driver does.
    async fn acquire(&self, conn: &mut Conn, holder: &str, ttl_ms: i64) -> Reply {
        let bindings = Bindings {
            lease: "l",
            holder,
            ttl_millis: ttl_ms,
            ..Default::default()
        };
        let rows = run_statement(conn, self.s.acquire(), &bindings, None)
            .await
            .unwrap();
        let me = HolderId::new(holder).unwrap();
        self.s.decode_reply(Operation::Acquire, &me, &rows).unwrap()
    }

    /// Waits until the lease has lapsed on the database's clock (a plain
    /// read: it takes no lock, so an open fenced transaction does not hold
    /// it up).
    async fn wait_lapsed(&self, admin: &mut Conn) {
        let give_up = Instant::now() + PATIENCE;
        loop {
            let none = Bindings {
                lease: "",
                holder: "",
                ttl_millis: 0,
                ..Default::default()
            };
            let rows = run_statement(admin, self.s.status(), &none, None)
                .await
                .unwrap();
            let status = self.s.decode_status(&rows).unwrap();
            if status[0].expires_in_ms.is_some_and(|ms| ms <= 0) {
                return;
            }
            assert!(
                Instant::now() < give_up,
                "the lease never lapsed: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn drop(self, admin: &mut Conn) {
        admin
            .query_drop(format!(
                "DROP TABLE IF EXISTS `{}`; DROP TABLE IF EXISTS {}",
                self.app, self.table
            ))
            .await
            .unwrap();
    }
}

/// Whether connection `id`'s transaction waits for a row lock now.
async fn lock_waiting(admin: &mut Conn, id: u32) -> bool {
    let state: Option<String> = admin
        .exec_first(
            "SELECT trx_state FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?",
            (id,),
        )
        .await
        .unwrap();
    state.as_deref() == Some("LOCK WAIT")
}

/// Waits until some session's statement on the lease table `table` waits
/// for a row lock (the driver's renewal, whose session is the driver's
/// own); quoted, so that the app table `<table>_app` does not match.
async fn wait_statement_lock_waiting(admin: &mut Conn, table: &TableName) {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let waiting: Option<u64> = admin
            .exec_first(
                "SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX \
                 WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?",
                (format!("%`{}`%", table.table()),),
            )
            .await
            .unwrap();
        if waiting.is_some() {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "no statement on {table} waited for the lock"
        );
        tokio::time::sleep(INNODB_TRX_PACE).await;
    }
}

/// Waits until session `id` is gone from the server; returns when it was
/// seen gone.
async fn wait_session_gone(admin: &mut Conn, id: u32) -> Instant {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let present: Option<u64> = admin
            .exec_first(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = ?",
                (id,),
            )
            .await
            .unwrap();
        if present.is_none() {
            return Instant::now();
        }
        assert!(Instant::now() < give_up, "session {id} was never closed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The session's bounds and whether it is inside a transaction.
async fn session_state(conn: &mut Conn) -> (f64, u64, u64, u64) {
    conn.query_first(
        "SELECT @@session.max_statement_time, @@session.innodb_lock_wait_timeout, \
         @@session.idle_transaction_timeout, @@in_transaction",
    )
    .await
    .unwrap()
    .unwrap()
}

/// Waits until the leadership satisfies `done`, or panics after PATIENCE.
async fn wait_for(
    rx: &mut watch::Receiver<Leadership>,
    what: &str,
    done: impl FnMut(&Leadership) -> bool,
) -> Leadership {
    let outcome = match tokio::time::timeout(PATIENCE, rx.wait_for(done)).await {
        Ok(Ok(l)) => Some(l.clone()),
        _ => None,
    };
    outcome.unwrap_or_else(|| {
        panic!(
            "{what}: not after {PATIENCE:?}; last state {:?}",
            *rx.borrow()
        )
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Signed milliseconds from `from` to `to`.
fn ms_after(to: Instant, from: Instant) -> f64 {
    if to >= from {
        ms(to - from)
    } else {
        -ms(from - to)
    }
}

/// The old term's transaction in a race: the driver's fenced transaction,
/// or the same statements by hand without the share lock.
enum Open<'c> {
    Fenced(Box<FencedTransaction<'c>>),
    Unlocked(Transaction<'c>),
}

/// How the old term's transaction writes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Writer {
    /// `Fence::transaction`, then a write ANDed with the fence.
    FencedWrite,
    /// `Fence::transaction`, then a plain write: only the lock the
    /// transaction's first statement took holds the successor off.
    PlainWrite,
    /// By hand: the fence check and the fenced write without `LOCK IN
    /// SHARE MODE` (the negative control).
    Unlocked,
}

/// What the successor's acquire did while the old term's transaction,
/// which wrote while valid, was still open after the lease lapsed.
struct Race {
    /// It was seen waiting for a row lock.
    waited: bool,
    /// From its start to its reply.
    took: Duration,
    /// It answered after the old transaction's commit was sent.
    after_commit: bool,
    reply: Reply,
    /// The app row as the successor read it right after its acquire: the
    /// state its term began with.
    seen_by_successor: (i64, Option<i64>),
    /// The app row and the lease row once everything ended.
    app: (i64, Option<i64>),
    lease: (Option<String>, u64),
}

/// `a` acquires (ttl 800 ms) and writes in a transaction at READ
/// COMMITTED (where InnoDB takes no lock the statement does not ask for)
/// while valid; the lease lapses; `b` acquires while the transaction is
/// open; then it commits.
async fn race(test: &str, writer: Writer) -> Race {
    let mut admin = connect().await;
    let t = Tables::new(test, &mut admin).await;
    let mut a = connect().await;
    assert_eq!(
        t.acquire(&mut a, "a", 800).await,
        Reply::Acquired {
            epoch: Epoch::new(1)
        }
    );
    let mut w = connect().await;
    w.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await
        .unwrap();
    let f = fence(&t.s, "a", 1);
    let (sql, params) = t.fenced_update(&f);
    // A's deadline is deliberately past the lease's expiry, as a holder
    // whose clock ran slow beyond the drift allowance would compute it:
    // what keeps its commit out of the next term must be the lock.
    let late = Instant::now() + Duration::from_secs(30);
    let open = match writer {
        Writer::FencedWrite | Writer::PlainWrite => {
            let mut tx = f.transaction(&mut w, late).await.unwrap();
            if writer == Writer::FencedWrite {
                tx.exec_drop(sql, params).await.unwrap();
            } else {
                let plain = format!("UPDATE `{}` SET v = v + 1, epoch = ? WHERE id = 1", t.app);
                tx.exec_drop(plain, (1,)).await.unwrap();
            }
            assert_eq!(tx.affected_rows(), 1, "the write applies while valid");
            Open::Fenced(Box::new(tx))
        }
        Writer::Unlocked => {
            let check = format!("SELECT {}", f.condition());
            let unlocked_check = check.replacen(" LOCK IN SHARE MODE", "", 1);
            let unlocked_sql = sql.replacen(" LOCK IN SHARE MODE", "", 1);
            assert!(unlocked_check != check && unlocked_sql != sql, "{check}");
            let mut tx = w.start_transaction(TxOpts::default()).await.unwrap();
            let holds: Option<i64> = tx.exec_first(unlocked_check, f.params()).await.unwrap();
            assert_eq!(holds, Some(1));
            tx.exec_drop(unlocked_sql, params).await.unwrap();
            assert_eq!(tx.affected_rows(), 1, "the write applies while valid");
            Open::Unlocked(tx)
        }
    };

    t.wait_lapsed(&mut admin).await;
    let mut b = connect().await;
    let b_id = b.id();
    let (s, app) = (t.s.clone(), t.app.clone());
    let started = Instant::now();
    let successor = tokio::spawn(async move {
        let bindings = Bindings {
            lease: "l",
            holder: "b",
            ttl_millis: 60_000,
            ..Default::default()
        };
        let rows = run_statement(&mut b, s.acquire(), &bindings, None)
            .await
            .unwrap();
        let replied = Instant::now();
        let me = HolderId::new("b").unwrap();
        let reply = s.decode_reply(Operation::Acquire, &me, &rows).unwrap();
        let seen: (i64, Option<i64>) = b
            .query_first(format!("SELECT v, epoch FROM `{app}` WHERE id = 1"))
            .await
            .unwrap()
            .unwrap();
        (reply, seen, replied)
    });
    // Either the acquire waits for the open transaction's lock, or it
    // goes through at once.
    let waited = loop {
        if successor.is_finished() {
            break false;
        }
        if lock_waiting(&mut admin, b_id).await {
            break true;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the acquire neither waited nor ended"
        );
        tokio::time::sleep(INNODB_TRX_PACE).await;
    };
    let committing = Instant::now();
    match open {
        Open::Fenced(tx) => tx.commit().await.unwrap(),
        Open::Unlocked(tx) => tx.commit().await.unwrap(),
    }
    let (reply, seen_by_successor, replied) = tokio::time::timeout(PATIENCE, successor)
        .await
        .expect("the successor's acquire ends once the transaction committed")
        .unwrap();
    let race = Race {
        waited,
        took: replied - started,
        after_commit: replied >= committing,
        reply,
        seen_by_successor,
        app: t.app_row(&mut admin).await,
        lease: t.lease_row(&mut admin).await,
    };
    t.drop(&mut admin).await;
    race
}

/// (1) A fenced transaction that wrote while the lease was valid and
/// commits after it lapsed: the successor's acquire waits for the commit,
/// so the write is ordered before the next term. The successor's term
/// begins with the write visible, made at epoch 1, and its epoch is 2.
/// Also with a plain write: the lock of the transaction's first statement
/// alone holds the successor off.
#[tokio::test]
async fn a_stale_fenced_transaction_commits_before_the_successors_term_never_inside_it() {
    for (test, writer) in [
        ("order_fenced", Writer::FencedWrite),
        ("order_plain", Writer::PlainWrite),
    ] {
        let race = race(test, writer).await;
        eprintln!(
            "figure: {writer:?}: the successor's acquire took {:.1} ms with the fenced transaction open after the lapse",
            ms(race.took)
        );
        assert!(race.waited, "{writer:?}: the successor's acquire must wait");
        assert!(
            race.after_commit,
            "{writer:?}: it must complete after the commit"
        );
        assert_eq!(
            race.reply,
            Reply::Acquired {
                epoch: Epoch::new(2)
            }
        );
        assert_eq!(
            race.seen_by_successor,
            (1, Some(1)),
            "{writer:?}: the successor's term begins with the old term's write committed"
        );
        assert_eq!(race.app, (1, Some(1)));
        assert_eq!(race.lease, (Some("b".into()), 2));
    }
}

/// The negative control: the same race with the fence's check and write
/// without `LOCK IN SHARE MODE`. The successor does not wait, its term
/// begins without the old term's write, and that write then commits
/// inside the successor's term (epoch 2 holds the lease, the write says
/// 1). The lock is what keeps the test above passing.
#[tokio::test]
async fn without_the_share_lock_the_stale_write_would_commit_into_the_successors_term() {
    let race = race("unlocked", Writer::Unlocked).await;
    eprintln!(
        "figure: unlocked: the successor's acquire took {:.1} ms with the old transaction open",
        ms(race.took)
    );
    assert!(
        !race.waited && !race.after_commit,
        "it went through at once"
    );
    assert_eq!(
        race.reply,
        Reply::Acquired {
            epoch: Epoch::new(2)
        }
    );
    assert_eq!(race.seen_by_successor, (0, None), "its term began first");
    assert_eq!(race.lease, (Some("b".into()), 2));
    assert_eq!(race.app, (1, Some(1)), "the epoch-1 write landed in term 2");
}

/// (2) Refused once the term is over: a fence whose epoch moved on, a
/// holder that is not the lease's, a deadline already passed. A refusal
/// leaves no transaction open, and every begin puts the session's own
/// bounds back as they were (here the driver's 10 s ones).
#[tokio::test]
async fn a_fenced_transaction_is_refused_once_the_term_is_over() {
    let mut admin = connect().await;
    let t = Tables::new("refused", &mut admin).await;
    let mut a = connect().await;
    t.acquire(&mut a, "a", 10_000).await;
    let mut w = connect().await;
    let before = session_state(&mut w).await;
    assert_eq!(before, (10.0, 10, 0, 0), "connect_client's bounds");
    let later = Instant::now() + Duration::from_secs(5);

    let f = fence(&t.s, "a", 1);
    let mut tx = f.transaction(&mut w, later).await.unwrap();
    let (sql, params) = t.fenced_update(&f);
    tx.exec_drop(sql, params).await.unwrap();
    assert_eq!(tx.affected_rows(), 1);
    tx.commit().await.unwrap();
    assert_eq!(session_state(&mut w).await, before, "commit restores");

    for (refused_fence, what) in [
        (fence(&t.s, "a", 7), "a stale epoch"),
        (fence(&t.s, "b", 1), "another holder"),
    ] {
        let refused = refused_fence.transaction(&mut w, later).await.unwrap_err();
        assert!(
            matches!(&refused, MysqlError::Fenced { lease, epoch, .. }
                if lease == "l" && *epoch == refused_fence.epoch().get()),
            "{what}: {refused:?}"
        );
        assert_eq!(session_state(&mut w).await, before, "{what}: left as found");
    }
    let passed = Instant::now() - Duration::from_millis(1);
    let refused = f.transaction(&mut w, passed).await.unwrap_err();
    assert!(matches!(refused, MysqlError::Fenced { .. }), "{refused:?}");

    let mut tx = f.transaction(&mut w, later).await.unwrap();
    let (sql, params) = t.fenced_update(&f);
    tx.exec_drop(sql, params).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(session_state(&mut w).await, before, "rollback restores");
    assert_eq!(t.app_row(&mut admin).await, (1, Some(1)), "one commit");
    t.drop(&mut admin).await;
}

/// `Fence::check` in the user's own transaction: 1 while the term holds,
/// 0 for a stale epoch or another holder, and from then on the lease row
/// is locked until that transaction ends: a forced release (an epoch bump,
/// as a successor's acquire) waits for its commit, and the check reads 0
/// after it. Its values bind as its params do.
#[tokio::test]
async fn the_check_holds_the_term_until_the_users_transaction_ends() {
    let mut admin = connect().await;
    let t = Tables::new("check", &mut admin).await;
    let mut a = connect().await;
    t.acquire(&mut a, "a", 10_000).await;
    let f = fence(&t.s, "a", 1);
    let values: Vec<Value> = f
        .values()
        .into_iter()
        .map(|v| match v {
            picolease::sql::Value::Text(text) => Value::Bytes(text.as_bytes().to_vec()),
            picolease::sql::Value::Int(n) => Value::Int(n),
        })
        .collect();
    assert_eq!(values, f.params());

    let mut w = connect().await;
    let w_id = w.id();
    w.query_drop("START TRANSACTION").await.unwrap();
    let holds: Option<i64> = w.exec_first(f.check(), f.params()).await.unwrap();
    assert_eq!(holds, Some(1));
    for stale in [fence(&t.s, "a", 7), fence(&t.s, "b", 1)] {
        let holds: Option<i64> = w.exec_first(stale.check(), stale.params()).await.unwrap();
        assert_eq!(holds, Some(0), "{stale:?}");
    }
    let (table, connector) = (t.table.clone(), connector());
    let released = tokio::spawn(async move {
        force_release(&connector, &table, &lease(), Duration::from_secs(10)).await
    });
    wait_statement_lock_waiting(&mut admin, &t.table).await;
    assert!(
        !released.is_finished(),
        "the release waits for the check's lock"
    );
    assert!(
        !lock_waiting(&mut admin, w_id).await,
        "the checking transaction is not waiting"
    );
    w.query_drop("COMMIT").await.unwrap();
    tokio::time::timeout(PATIENCE, released)
        .await
        .expect("the release ends once the transaction does")
        .unwrap()
        .unwrap();
    let holds: Option<i64> = w.exec_first(f.check(), f.params()).await.unwrap();
    assert_eq!(holds, Some(0), "the term is over");
    t.drop(&mut admin).await;
}

/// (3) A statement still running at the deadline (waiting for another
/// transaction's row lock) is cut there: the call returns `Fenced` at
/// about the deadline, the session is killed, which frees the lease row
/// for a forced release that was waiting on it, and nothing the
/// transaction wrote is committed; later calls and `commit` are refused.
#[tokio::test]
async fn a_fenced_transaction_running_at_its_deadline_is_cut_there() {
    let mut admin = connect().await;
    let t = Tables::new("cut", &mut admin).await;
    let mut a = connect().await;
    t.acquire(&mut a, "a", 10_000).await;
    let mut blocker = connect().await;
    blocker.query_drop("START TRANSACTION").await.unwrap();
    blocker
        .query_drop(format!("SELECT v FROM `{}` WHERE id = 2 FOR UPDATE", t.app))
        .await
        .unwrap();

    let mut w = connect().await;
    let w_id = w.id();
    let f = fence(&t.s, "a", 1);
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut tx = f.transaction(&mut w, deadline).await.unwrap();
    let (sql, params) = t.fenced_update(&f);
    tx.exec_drop(sql, params).await.unwrap();
    // A forced release (an epoch bump) waits for the fence's lock.
    let (table, connector) = (t.table.clone(), connector());
    let released = tokio::spawn(async move {
        let outcome = force_release(&connector, &table, &lease(), Duration::from_secs(10)).await;
        (outcome, Instant::now())
    });
    let blocked = format!("UPDATE `{}` SET v = v + 1 WHERE id = 2", t.app);
    let cut = tx.exec_drop(blocked.as_str(), ()).await.unwrap_err();
    let returned = Instant::now();
    assert!(
        matches!(cut, MysqlError::Fenced { epoch: 1, .. }),
        "{cut:?}"
    );
    let (outcome, freed) = tokio::time::timeout(PATIENCE, released)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        outcome.unwrap(),
        Some(Epoch::new(2)),
        "the forced release bumped the epoch"
    );
    let gone = wait_session_gone(&mut admin, w_id).await;
    eprintln!(
        "figure: cut at the deadline: the call returned {:+.1} ms from it, the lease row was free {:+.1} ms from it (a waiting forced release went through), the session was seen gone {:+.1} ms from it",
        ms_after(returned, deadline),
        ms_after(freed, deadline),
        ms_after(gone, deadline)
    );
    assert!(
        returned + Duration::from_millis(5) >= deadline,
        "not before it"
    );
    assert!(returned <= deadline + Duration::from_millis(500));
    assert!(freed <= deadline + Duration::from_secs(1));

    let later = tx.exec_drop("SELECT 1", ()).await.unwrap_err();
    assert!(matches!(later, MysqlError::Fenced { .. }), "{later:?}");
    let commit = tx.commit().await.unwrap_err();
    assert!(matches!(commit, MysqlError::Fenced { .. }), "{commit:?}");
    assert!(
        w.query_drop("SELECT 1").await.is_err(),
        "the connection was killed"
    );
    assert_eq!(t.app_row(&mut admin).await, (0, None), "nothing committed");
    blocker.query_drop("ROLLBACK").await.unwrap();
    t.drop(&mut admin).await;
}

/// (3, continued) A client that stops sending after a short fenced write:
/// each statement re-arms the server's idle bound to the time left
/// (rounded up to whole seconds), so the server closes the session, and
/// the lock goes, at about the deadline and at most a second after it.
#[tokio::test]
async fn an_idle_fenced_transaction_is_closed_by_the_server_by_its_deadline_plus_a_second() {
    let mut admin = connect().await;
    let t = Tables::new("idle", &mut admin).await;
    let mut a = connect().await;
    t.acquire(&mut a, "a", 10_000).await;
    let mut w = connect().await;
    let w_id = w.id();
    let f = fence(&t.s, "a", 1);
    let deadline = Instant::now() + Duration::from_millis(1900);
    let mut tx = f.transaction(&mut w, deadline).await.unwrap();
    let (sql, params) = t.fenced_update(&f);
    tx.exec_drop(sql, params).await.unwrap();
    // The client goes silent, holding the transaction.
    let gone = wait_session_gone(&mut admin, w_id).await;
    eprintln!(
        "figure: idle fenced transaction closed by the server {:+.1} ms from its deadline",
        ms_after(gone, deadline)
    );
    assert!(
        gone + Duration::from_millis(20) >= deadline,
        "not before it"
    );
    assert!(gone <= deadline + Duration::from_millis(1500));
    let started = Instant::now();
    let released = force_release(&connector(), &t.table, &lease(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(released, Some(Epoch::new(2)));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the lock is gone"
    );
    drop(tx);
    assert_eq!(t.app_row(&mut admin).await, (0, None), "nothing committed");
    t.drop(&mut admin).await;
}

/// (4) The trade InnoDB imposes: while a fenced transaction of the leader
/// is open, its own renewals wait (they need the row's exclusive lock),
/// and no longer than the transaction: a renewal goes through as soon as
/// it commits, or as soon as it is cut at its deadline. The node keeps
/// leading, at the same epoch, because both ended well before its own
/// deadline and within the request timeout.
#[tokio::test]
async fn the_holders_renewals_wait_for_its_fenced_transaction_until_it_ends_or_is_cut() {
    const HOLD: Duration = Duration::from_millis(300);
    let mut admin = connect().await;
    let t = Tables::new("renew", &mut admin).await;
    let ttl = Duration::from_secs(6);
    let request_timeout = ttl / 4;
    let a = MysqlLease::builder(config("l", "a", ttl), connector())
        .table(t.table.clone())
        .start()
        .unwrap();
    let mut rx = a.watch();
    let leading = wait_for(&mut rx, "a leads", |l| l.is_leader()).await;
    let mut changes = a.subscribe();
    let mut w = connect().await;

    // Ended by its commit.
    let mut tx = a.fenced_transaction(&mut w).await.unwrap();
    let opened = Instant::now();
    let (sql, params) = t.fenced_update(tx.fence());
    tx.exec_drop(sql, params).await.unwrap();
    assert_eq!(tx.affected_rows(), 1);
    wait_statement_lock_waiting(&mut admin, &t.table).await;
    tokio::time::sleep(HOLD).await;
    // Any renewal that ran before the transaction took its lock has long
    // been recorded: the next one is the one waiting.
    let renewed = a.renew_latencies().len();
    tx.commit().await.unwrap();
    let open_for = opened.elapsed();
    let waited = wait_renewal(&a, renewed).await.0;
    eprintln!(
        "figure: a renewal waited {:.1} ms behind a fenced transaction open {:.1} ms (request timeout {:.0} ms)",
        ms(waited),
        ms(open_for),
        ms(request_timeout)
    );
    assert!(waited >= HOLD, "it waited for the transaction: {waited:?}");
    assert!(
        waited <= open_for + Duration::from_millis(50),
        "and no longer"
    );

    // Cut at its deadline, while a statement of it waits for a lock.
    let mut blocker = connect().await;
    blocker.query_drop("START TRANSACTION").await.unwrap();
    blocker
        .query_drop(format!("SELECT v FROM `{}` WHERE id = 2 FOR UPDATE", t.app))
        .await
        .unwrap();
    let left = a.time_left().unwrap();
    let cut_at = Instant::now() + Duration::from_secs(3);
    assert!(
        left > Duration::from_millis(3500),
        "the leader's deadline is later: {left:?}"
    );
    let f = a.fence().unwrap();
    let mut tx = f.transaction(&mut w, cut_at).await.unwrap();
    let blocked = format!("UPDATE `{}` SET v = v + 1 WHERE id = 2", t.app);
    let exec = tx.exec_drop(blocked.as_str(), ());
    let ((), cut) = tokio::join!(wait_statement_lock_waiting(&mut admin, &t.table), exec);
    let returned = Instant::now();
    assert!(matches!(cut, Err(MysqlError::Fenced { .. })), "{cut:?}");
    let renewed = a.renew_latencies().len();
    let (latency, seen) = wait_renewal(&a, renewed).await;
    eprintln!(
        "figure: after the cut at the deadline ({:+.1} ms from it), the next renewal was accepted {:.1} ms later (its latency {:.1} ms)",
        ms_after(returned, cut_at),
        ms_after(seen, returned),
        ms(latency)
    );
    assert!(
        seen <= returned + request_timeout,
        "renewals resumed after the cut"
    );
    drop(tx);
    blocker.query_drop("ROLLBACK").await.unwrap();

    let now = rx.borrow().clone();
    assert!(now.is_leader() && now.epoch == leading.epoch, "{now:?}");
    assert!(
        changes.try_recv().is_err(),
        "the leader never changed state"
    );
    assert_eq!(
        t.app_row(&mut admin).await,
        (1, Some(leading.epoch.unwrap().get() as i64))
    );
    a.shutdown().await.unwrap();
    t.drop(&mut admin).await;
}

/// Waits for an accepted renewal beyond the first `count`: its latency and
/// when it was seen.
async fn wait_renewal(lease: &MysqlLease, count: usize) -> (Duration, Instant) {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let latencies = lease.renew_latencies();
        if latencies.len() > count {
            return (latencies[count], Instant::now());
        }
        assert!(Instant::now() < give_up, "no renewal was accepted");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// (5) A gated task commits through `LeaderContext::fenced_transaction`,
/// bounded by the leader's deadline; a follower's
/// `MysqlLease::fenced_transaction` is refused; a set's lease opens one
/// through `MysqlLeaseSet::fenced_transaction`, and a lease outside the
/// set is refused.
#[tokio::test]
async fn a_gated_task_commits_through_its_fenced_transaction() {
    let mut admin = connect().await;
    let t = Tables::new("gated", &mut admin).await;
    let ttl = Duration::from_secs(2);
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let app = t.app.clone();
    let a = MysqlLease::builder(config("l", "a", ttl), connector())
        .table(t.table.clone())
        .while_leader(move |ctx| {
            let (done_tx, app) = (done_tx.clone(), app.clone());
            async move {
                let mut conn = connect().await;
                let outcome = async {
                    let mut tx = ctx.fenced_transaction(&mut conn).await?;
                    let bounded_by = tx.time_left();
                    let sql = format!(
                        "UPDATE `{app}` SET v = v + 1, epoch = ? WHERE id = 1 AND {}",
                        tx.fence().condition()
                    );
                    let mut params = vec![Value::from(ctx.epoch().get())];
                    params.extend(tx.fence().params());
                    tx.exec_drop(sql, params).await?;
                    let written = tx.affected_rows();
                    tx.commit().await?;
                    Ok::<_, MysqlError>((written, bounded_by))
                }
                .await;
                let _ = done_tx.send(outcome);
                ctx.cancelled().await;
            }
        })
        .start()
        .unwrap();
    let (written, bounded_by) = tokio::time::timeout(PATIENCE, done.recv())
        .await
        .expect("the gated task ran")
        .unwrap()
        .unwrap();
    assert_eq!(written, 1);
    assert!(
        bounded_by > Duration::ZERO && bounded_by <= ttl,
        "{bounded_by:?}"
    );
    let epoch = a.leadership().epoch.unwrap().get() as i64;
    assert_eq!(t.app_row(&mut admin).await, (1, Some(epoch)));

    let b = MysqlLease::builder(config("l", "b", ttl), connector())
        .table(t.table.clone())
        .start()
        .unwrap();
    wait_for(&mut b.watch(), "b follows", |l| {
        l.holder.is_some() && !l.is_leader()
    })
    .await;
    let mut conn = connect().await;
    let refused = b.fenced_transaction(&mut conn).await.unwrap_err();
    assert!(matches!(refused, MysqlError::Fenced { .. }), "{refused:?}");

    let s_lease = LeaseName::new("s").unwrap();
    let set = MysqlLeaseSet::builder(
        SetConfig::with_ttl(HolderId::new("c").unwrap(), ttl),
        vec![s_lease.clone()],
        connector(),
    )
    .table(t.table.clone())
    .start()
    .unwrap();
    let mut s_watch = set.lease_view(&s_lease).unwrap().watch();
    wait_for(&mut s_watch, "the set leads s", |l| l.is_leader()).await;
    let tx = set.fenced_transaction(&s_lease, &mut conn).await.unwrap();
    assert!(tx.time_left() > Duration::ZERO);
    tx.commit().await.unwrap();
    let refused = set
        .fenced_transaction(&lease(), &mut conn)
        .await
        .unwrap_err();
    assert!(matches!(refused, MysqlError::Fenced { .. }), "{refused:?}");

    set.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
    t.drop(&mut admin).await;
}
