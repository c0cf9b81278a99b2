//! `picolease bench`: the figures that matter for choosing a ttl and an
//! interval, measured on the user's own database, in a scratch table that
//! is created and dropped.
//!
//! Every figure goes through the same code as `picolease run` (the
//! contenders are [`Backend::start`]'s), and each comes with its floor,
//! measured in the same run on plain connections, so a slow disk or a busy
//! host shows as a slow floor rather than as a slow library:
//!
//! | figure | what is timed | floor |
//! | --- | --- | --- |
//! | round trip | `SELECT 1` | — |
//! | renew | the driver's renewals (issue to reply handled) | the same UPDATE on a plain connection, at the same pace |
//! | clean handover | `shutdown` of the leader to the successor's leadership | release commit (+ NOTIFY) and acquire commit on plain connections |
//! | planned handover | the leader's `hand_over(successor's node)` to the successor's leadership | — (compared with the clean handover's p50) |
//! | crash lag | the row's expiry (read right after the crash) to the successor's leadership | — |

mod cluster;
#[cfg(feature = "mysql")]
mod mysql;
mod planned;
mod postgres;
mod report;
mod sqlite;
pub mod write_cost;

use std::time::{Duration, Instant};

use picolease::{Config, HolderId, Leadership, LeaseName, Subscription, TableName};

use crate::backend::{Backend, Contender, Leases, View};
use crate::failure::CliError;
pub use report::Figures;

/// The plain-connection side of a bench: what the driver is compared with.
pub trait Probe {
    /// One `SELECT 1`.
    fn round_trip(&mut self) -> Result<Duration, CliError>;
    /// One renew-like UPDATE (commit included) of the probe's own row.
    fn bare_update(&mut self) -> Result<Duration, CliError>;
    /// Release commit (with its notification, where there is one) on one
    /// connection, then the acquire commit on another as soon as it can
    /// know: the database's own share of a clean handover.
    fn handover_floor(&mut self) -> Result<Duration, CliError>;
    /// Milliseconds left on `lease`'s row, read now, and when the read ran
    /// (the middle of its round trip).
    fn expires_in(&mut self, lease: &LeaseName) -> Result<(Option<i64>, Instant), CliError>;
    /// Drops the scratch table.
    fn drop_table(&mut self) -> Result<(), CliError>;
    /// One connection set up (TCP, TLS as the URL says, the login) and
    /// closed; with `plain`, the same without TLS. `None` where there is
    /// nothing to connect to (SQLite) or the server refuses it (a plain
    /// attempt at a server that takes only TLS).
    fn connect(&mut self, plain: bool) -> Result<Option<Duration>, CliError>;
    /// The commit stall a lost node would cause, on a Galera node
    /// (`cluster::stall`); `None` elsewhere.
    fn cluster_stall(&mut self) -> Result<Option<Duration>, CliError> {
        Ok(None)
    }
}

/// Times one connection's set-up on `runtime`, closing it with `close`
/// (outside the time): `None` for a plain-text attempt the server
/// refused (it takes only TLS); any other failure is the bench's.
fn time_connect<C, E: std::fmt::Display>(
    runtime: &tokio::runtime::Runtime,
    plain: bool,
    connecting: impl std::future::Future<Output = Result<C, E>>,
    close: impl FnOnce(C),
) -> Result<Option<Duration>, CliError> {
    let at = Instant::now();
    let connected = runtime.block_on(connecting);
    let took = at.elapsed();
    match connected {
        Ok(connection) => {
            close(connection);
            Ok(Some(took))
        }
        Err(_) if plain => Ok(None),
        Err(e) => Err(CliError::runtime(format!("bench: connecting: {e}"))),
    }
}

/// The scratch rows' ttl: long enough never to lapse during a bench.
const SCRATCH_TTL_MS: i64 = 60_000;

/// The bindings of a scratch row of the probes.
fn bindings<'a>(lease: &'a str, holder: &'a str) -> picolease::sql::Bindings<'a> {
    picolease::sql::Bindings {
        lease,
        holder,
        ttl_millis: SCRATCH_TTL_MS,
        ..Default::default()
    }
}

/// What `bench` was asked for.
pub struct Options {
    pub rounds: usize,
    pub json: bool,
}

/// A pause before each floor, for the server to finish what the previous
/// step left it (closing a shut-down contender's connections).
const SETTLE: Duration = Duration::from_millis(30);

/// The timings the contenders run with: short, so that the bench takes
/// seconds, and the same shape as the defaults (interval = ttl / 4).
const TTL: Duration = Duration::from_millis(400);

/// Runs the bench on `backend`: progress on stderr, the figures on stdout.
pub fn run(backend: &Backend, options: Options) -> Result<std::process::ExitCode, CliError> {
    let table = TableName::new(&format!("picolease_bench_{}", std::process::id()))
        .map_err(CliError::usage)?;
    let mut probe: Box<dyn Probe> = match backend {
        Backend::Sqlite(location) => Box::new(sqlite::SqliteProbe::open(location, &table)?),
        #[cfg(feature = "postgres")]
        Backend::Postgres(target) => Box::new(postgres::PgProbe::open(target, &table)?),
        #[cfg(feature = "mysql")]
        Backend::Mysql(target) => Box::new(mysql::MysqlProbe::open(target, &table)?),
    };
    let started = Instant::now();
    let outcome = measure(backend, &table, probe.as_mut(), &options);
    let dropped = probe.drop_table();
    let figures = outcome?;
    dropped?;
    report::print(&figures, backend, options.json, started.elapsed());
    Ok(std::process::ExitCode::SUCCESS)
}

fn measure(
    backend: &Backend,
    table: &TableName,
    probe: &mut dyn Probe,
    options: &Options,
) -> Result<Figures, CliError> {
    let rounds = options.rounds;
    let mut progress = report::Progress::new();
    let samples = (rounds * 10).max(50);
    let mut rtt = Vec::with_capacity(samples);
    for i in 0..samples {
        progress.step("round trip", i, samples);
        rtt.push(probe.round_trip()?);
    }

    // Connection set-up, as the URL says and in plain text, alternated.
    let connects = (rounds * 2).max(10);
    let (mut connect, mut connect_plain) = (Vec::new(), Vec::new());
    for i in 0..connects {
        progress.step("connection set-up", i, connects);
        connect.extend(probe.connect(false)?);
        connect_plain.extend(probe.connect(true)?);
    }

    let renew_samples = (rounds * 3).clamp(30, picolease::RENEW_SAMPLES);
    progress.step("renew", 0, renew_samples);
    let started = backend.start(table, Leases::One(config("renew", "r")?), None)?;
    let (contender, mut changes) = (started.contender, started.transitions);
    until_leader(&mut changes)?;
    let View::Lease(snapshots) = started.view else {
        unreachable!("one name is a lone lease");
    };
    let mut bare = Vec::with_capacity(renew_samples);
    let pace = TTL / 4;
    while snapshots.renew_latencies().len() < renew_samples {
        // The floor at the same pace, meanwhile, on its own row.
        let at = Instant::now();
        bare.push(probe.bare_update()?);
        progress.step("renew", snapshots.renew_latencies().len(), renew_samples);
        std::thread::sleep(pace.saturating_sub(at.elapsed()));
    }
    let renew = snapshots.renew_latencies();
    contender.shutdown()?;

    let mut handover = Vec::with_capacity(rounds);
    let mut handover_floor = Vec::with_capacity(rounds);
    let (mut leader, mut leader_changes) = start(backend, table, "handover", "h0")?;
    until_leader(&mut leader_changes)?;
    for round in 1..=rounds {
        progress.step("clean handover", round - 1, rounds);
        let (successor, mut changes) = start(backend, table, "handover", &format!("h{round}"))?;
        until_observed(&mut changes)?;
        // Stop at a different point of the successor's poll cycle each
        // round (a notification should make the phase irrelevant).
        std::thread::sleep(Duration::from_millis((round as u64 * 37) % 100));
        let stopped = Instant::now();
        leader.shutdown()?;
        let led = until_leader(&mut changes)?;
        handover.push(led.saturating_duration_since(stopped));
        // The old leader's connections close as its shutdown returns: let
        // the server finish with them so they do not weigh on the floor.
        std::thread::sleep(SETTLE);
        handover_floor.push(probe.handover_floor()?);
        leader = successor;
    }
    leader.shutdown()?;

    let planned_handover = planned_rounds(backend, table, rounds, &mut progress)?;

    let mut crash_lag = Vec::with_capacity(rounds);
    let lease = LeaseName::new("crash").map_err(CliError::usage)?;
    let (mut leader, mut leader_changes) = start(backend, table, "crash", "c0")?;
    until_leader(&mut leader_changes)?;
    for round in 1..=rounds {
        progress.step("crash takeover", round - 1, rounds);
        let (successor, mut changes) = start(backend, table, "crash", &format!("c{round}"))?;
        until_observed(&mut changes)?;
        std::thread::sleep(Duration::from_millis((round as u64 * 53) % 100));
        leader.abort();
        let (left, read_at) = probe.expires_in(&lease)?;
        let left =
            left.ok_or_else(|| CliError::runtime("bench: the crashed leader's row is gone"))?;
        let expiry = read_at + Duration::from_millis(left.max(0) as u64);
        let led = until_leader(&mut changes)?;
        crash_lag.push(led.saturating_duration_since(expiry));
        leader = successor;
    }
    leader.shutdown()?;
    progress.done();

    Ok(Figures {
        rtt,
        renew,
        renew_floor: bare,
        handover,
        handover_floor,
        planned_handover,
        crash_lag,
        connect,
        connect_plain,
        ttl: TTL,
        cluster_stall: probe.cluster_stall()?,
    })
}

/// One side of the planned handover rounds.
struct Side {
    lease: Box<dyn planned::Handing>,
    changes: Subscription,
    node: &'static str,
    holder: HolderId,
}

/// A planned handover round after round: `a` leads and `b` follows `a`;
/// `a` hands over to `b`'s node; the time from the call to `b`'s
/// leadership. The next round hands back, `a` (a follower since) having
/// seen `b` lead.
fn planned_rounds(
    backend: &Backend,
    table: &TableName,
    rounds: usize,
    progress: &mut report::Progress,
) -> Result<Vec<Duration>, CliError> {
    let started = |node: &'static str| {
        let config = config("planned", node)?;
        let holder = config.holder.clone();
        let (lease, changes) = planned::start(backend, table, config)?;
        Ok::<_, CliError>(Side {
            lease,
            changes,
            node,
            holder,
        })
    };
    let mut samples = Vec::with_capacity(rounds);
    progress.step("planned handover", 0, rounds);
    let mut leader = started("pa")?;
    until_leader(&mut leader.changes)?;
    let mut follower = started("pb")?;
    let mut measured = || {
        for round in 1..=rounds {
            progress.step("planned handover", round - 1, rounds);
            let holder = &leader.holder;
            until(&mut follower.changes, |l| {
                !l.is_leader() && l.holder.as_ref() == Some(holder)
            })?;
            // Hand over at a different point of the successor's poll
            // cycle each round, as the clean handover stops.
            std::thread::sleep(Duration::from_millis((round as u64 * 37) % 100));
            let asked = Instant::now();
            leader.lease.hand_over(follower.node)?;
            let led = until_leader(&mut follower.changes)?;
            samples.push(led.saturating_duration_since(asked));
            std::mem::swap(&mut leader, &mut follower);
        }
        Ok::<_, CliError>(())
    };
    let outcome = measured();
    let stopped = leader.lease.shutdown();
    let other = follower.lease.shutdown();
    outcome?;
    stopped?;
    other?;
    Ok(samples)
}

/// The contenders' configuration: `node`'s incarnation on `lease`.
fn config(lease: &str, node: &str) -> Result<Config, CliError> {
    let lease = LeaseName::new(lease).map_err(CliError::usage)?;
    let holder = HolderId::incarnation(node, picolease::random_u64()).map_err(CliError::usage)?;
    Ok(Config::with_ttl(lease, holder, TTL))
}

fn start(
    backend: &Backend,
    table: &TableName,
    lease: &str,
    node: &str,
) -> Result<(Box<dyn Contender>, Subscription), CliError> {
    let started = backend.start(table, Leases::One(config(lease, node)?), None)?;
    Ok((started.contender, started.transitions))
}

/// How long a bench step may wait for a transition before giving up.
const PATIENCE: Duration = Duration::from_secs(30);

/// Waits for the contender to lead; returns when its driver published it.
fn until_leader(changes: &mut Subscription) -> Result<Instant, CliError> {
    until(changes, Leadership::is_leader)
}

/// Waits for a follower to have seen the current holder.
fn until_observed(changes: &mut Subscription) -> Result<Instant, CliError> {
    until(changes, |l| !l.is_leader() && l.holder.is_some())
}

fn until(
    changes: &mut Subscription,
    done: impl Fn(&Leadership) -> bool,
) -> Result<Instant, CliError> {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        match changes.recv_timeout(left) {
            Ok(t) if done(&t.leadership) => return Ok(t.instant),
            Ok(_) => {}
            Err(picolease::RecvError::Lagged(_)) => {}
            Err(e) => {
                return Err(CliError::runtime(format!(
                    "bench: a contender did not reach the expected state within {PATIENCE:?} ({e})"
                )))
            }
        }
    }
}
