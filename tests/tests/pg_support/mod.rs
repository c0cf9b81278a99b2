//! Helpers shared by the PostgreSQL tests (`pg_*.rs`): unique tables,
//! contenders, waiting on leadership, a recorder of every transition, and
//! a TCP proxy that injects faults between a driver and the server.
//!
//! The server at 127.0.0.1:5432 is shared and must never be stopped:
//! outages are simulated by the proxy or by `pg_terminate_backend`.

#![allow(dead_code)]

pub mod bouncer;
pub mod cluster;
pub(crate) use crate::forward_support as forward;
pub mod patroni;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use picolease::postgres::{PgConnector, PgLease, PgLeaseBuilder};
use picolease::{Config, HolderId, Leadership, LeaseName, TableName};
use picolease::{RecvError, Transition};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The server's address.
pub const PG_ADDR: &str = "127.0.0.1:5432";

/// The URL of the test database, for `addr` (the server or a proxy).
pub fn url_for(addr: &str, app: &str) -> String {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    format!("postgres://postgres@{host}:{port}/test?application_name={app}&connect_timeout=2")
}

/// The URL of the test database, straight to the server.
pub fn url() -> String {
    url_for(PG_ADDR, "picolease_test")
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A table name unique to this test and process, so tests run in parallel.
pub fn unique_table(test: &str) -> TableName {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = format!("pl_{}_{}_{}", test, std::process::id(), n);
    TableName::new(&name).expect("valid table name")
}

/// A connected admin client (its connection spawned).
pub async fn admin() -> tokio_postgres::Client {
    PgConnector::new(&url())
        .unwrap()
        .connect_client()
        .await
        .expect("the PostgreSQL server at 127.0.0.1:5432 must be running")
}

/// A configuration with `ttl`, the interval a quarter of it, and a drift
/// allowance of 5% (the tests compare leadership intervals measured by
/// tasks on a loaded 2-core machine; the margin absorbs their scheduling).
pub fn config(lease: &str, holder: &str, ttl: Duration) -> Config {
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

/// A builder for a contender on `table`, straight to the server.
pub fn contender(table: &TableName, lease: &str, holder: &str, ttl: Duration) -> PgLeaseBuilder {
    contender_via(PG_ADDR, table, lease, holder, ttl)
}

/// A builder for a contender on `table` whose connections go to `addr`.
pub fn contender_via(
    addr: &str,
    table: &TableName,
    lease: &str,
    holder: &str,
    ttl: Duration,
) -> PgLeaseBuilder {
    let connector = PgConnector::new(&url_for(addr, holder)).unwrap();
    PgLease::builder(config(lease, holder, ttl), connector).table(table.clone())
}

/// Waits until the leadership satisfies `done`, or panics after `timeout`.
pub async fn wait_for(
    rx: &mut watch::Receiver<Leadership>,
    timeout: Duration,
    what: &str,
    done: impl FnMut(&Leadership) -> bool,
) -> Leadership {
    let outcome = match tokio::time::timeout(timeout, rx.wait_for(done)).await {
        Ok(Ok(l)) => Ok(l.clone()),
        Ok(Err(_)) => Err("the driver stopped"),
        Err(_) => Err("timed out"),
    };
    outcome.unwrap_or_else(|why| {
        panic!(
            "{what}: {why} after {timeout:?}; last state {:?}",
            *rx.borrow()
        )
    })
}

/// Every transition of several contenders, on one monotonic clock.
#[derive(Clone, Default)]
pub struct Recorder {
    log: Arc<Mutex<Vec<(String, Transition)>>>,
}

impl Recorder {
    /// Records every transition of `lease` under `name`.
    pub fn watch(&self, name: &str, lease: &PgLease) {
        let mut rx = lease.subscribe();
        let log = self.log.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(t) => log.lock().unwrap().push((name.clone(), t)),
                    Err(RecvError::Lagged(missed)) => panic!("{name}: {missed} transitions lost"),
                    Err(_) => return,
                }
            }
        });
    }

    /// Records that `name` crashed now: its term (if any) ends here, since
    /// an aborted driver publishes nothing.
    pub fn mark_crash(&self, name: &str) {
        let t = Transition {
            // The recorder's log is of one lease; the name is not read.
            lease: LeaseName::new("crashed").unwrap(),
            leadership: Leadership::unknown(),
            at: std::time::SystemTime::now(),
            instant: Instant::now(),
        };
        self.log.lock().unwrap().push((name.to_string(), t));
    }

    /// Transitions of `name` so far.
    pub fn of(&self, name: &str) -> Vec<Transition> {
        self.log()
            .into_iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| t)
            .collect()
    }

    /// A copy of the log so far.
    pub fn log(&self) -> Vec<(String, Transition)> {
        self.log.lock().unwrap().clone()
    }

    /// Each leadership term: (node, epoch, start, end or `None` if still
    /// leading), in order of start.
    pub fn terms(&self) -> Vec<(String, u64, Instant, Option<Instant>)> {
        let mut log = self.log();
        log.sort_by_key(|(_, t)| t.instant);
        let mut open: Vec<(String, u64, Instant)> = Vec::new();
        let mut terms = Vec::new();
        for (node, t) in log {
            if let Some(i) = open.iter().position(|(n, _, _)| *n == node) {
                let (n, e, start) = open.remove(i);
                terms.push((n, e, start, Some(t.instant)));
            }
            if t.leadership.is_leader() {
                open.push((node, t.leadership.epoch.unwrap().get(), t.instant));
            }
        }
        terms.extend(open.into_iter().map(|(n, e, s)| (n, e, s, None)));
        terms.sort_by_key(|(_, _, s, _)| *s);
        terms
    }

    /// Asserts the safety properties over every term recorded: no two
    /// nodes' terms overlap in time, and epochs strictly increase from term
    /// to term. Returns the number of terms.
    pub fn assert_exclusive(&self) -> usize {
        let terms = self.terms();
        for pair in terms.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let a_end =
                a.3.unwrap_or_else(|| panic!("term {a:?} still open when {b:?} began"));
            assert!(
                a_end <= b.2,
                "overlapping leadership: {} at epoch {} until {:?}, {} at epoch {} from {:?}",
                a.0,
                a.1,
                a_end,
                b.0,
                b.1,
                b.2
            );
            assert!(b.1 > a.1, "epochs must strictly increase: {a:?} then {b:?}");
        }
        terms.len()
    }
}

/// What the proxy does with bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward at once.
    Pass,
    /// Hold every byte (the sockets stay open): a stalled network.
    Stall,
    /// Forward each chunk after this delay.
    Latency(Duration),
}

/// A TCP proxy in front of the server, with faults on demand.
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    /// Cancelled to reset every current connection.
    generation: Arc<Mutex<CancellationToken>>,
    accepted: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl Proxy {
    /// Starts a proxy to the server on an ephemeral port.
    pub async fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let generation = Arc::new(Mutex::new(CancellationToken::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let (gen, acc, stop2) = (generation.clone(), accepted.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let (client, _) = tokio::select! {
                    r = listener.accept() => match r { Ok(c) => c, Err(_) => continue },
                    _ = stop2.cancelled() => return,
                };
                acc.fetch_add(1, Ordering::SeqCst);
                let kill = gen.lock().unwrap().child_token();
                let mode = mode_rx.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(PG_ADDR).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = pump(cr, sw, mode.clone(), kill.clone());
                    let down = pump(sr, cw, mode, kill.clone());
                    // When either direction ends, end both.
                    tokio::select! {
                        _ = up => {}
                        _ = down => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            mode,
            generation,
            accepted,
            stop,
        }
    }

    /// `host:port` to connect to.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Changes what happens to bytes, for current and future connections.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Drops every current connection (both sockets), like a reset.
    pub fn reset(&self) {
        let mut gen = self.generation.lock().unwrap();
        gen.cancel();
        *gen = CancellationToken::new();
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.generation.lock().unwrap().cancel();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    kill: CancellationToken,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r { Ok(0) | Err(_) => return, Ok(n) => n },
            _ = kill.cancelled() => return,
        };
        loop {
            let current = *mode.borrow_and_update();
            match current {
                Mode::Pass => break,
                Mode::Latency(d) => {
                    tokio::select! {
                        _ = tokio::time::sleep(d) => break,
                        _ = kill.cancelled() => return,
                    }
                }
                Mode::Stall => {
                    tokio::select! {
                        r = mode.changed() => if r.is_err() { return },
                        _ = kill.cancelled() => return,
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Terminates every backend whose application_name is `app`; returns how
/// many.
pub async fn terminate_backends(admin: &tokio_postgres::Client, app: &str) -> i64 {
    let row = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap();
    row.get(0)
}

/// How many backends whose application_name is `app` match `condition`
/// (an SQL condition on `pg_stat_activity`'s columns; `TRUE` for all).
pub async fn sessions(admin: &tokio_postgres::Client, app: &str, condition: &str) -> i64 {
    admin
        .query_one(
            &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND ({condition})"
            ),
            &[&app],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits until at least `n` backends of `app` match `condition`
/// ([`sessions`]); panics with `what` after `limit`.
pub async fn wait_for_sessions(
    admin: &tokio_postgres::Client,
    app: &str,
    condition: &str,
    n: i64,
    limit: Duration,
    what: &str,
) {
    let deadline = Instant::now() + limit;
    while sessions(admin, app, condition).await < n {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Drops a test's table (best effort).
pub async fn drop_table(admin: &tokio_postgres::Client, table: &TableName) {
    let _ = admin
        .batch_execute(&format!("DROP TABLE IF EXISTS \"{}\"", table.table()))
        .await;
}

/// Time since `start`, in milliseconds with a fraction, for reports.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median and maximum of some durations.
pub fn median_max(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], *v.last().unwrap())
}

/// Shorthand.
pub fn millis(n: u64) -> Duration {
    Duration::from_millis(n)
}
