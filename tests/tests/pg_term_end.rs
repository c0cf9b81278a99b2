//! The end of a term on PostgreSQL, for a lone lease and for a lease set
//! (DESIGN §4b, §5, §9: the deadline wins over I/O), the async driver's
//! counterpart of `sqlite_term_end.rs`:
//!
//! - work that polls `ctx.is_cancelled()` in a busy loop, never sleeping,
//!   stops by its lease's deadline once renewals stop succeeding: it reads
//!   the deadline itself, so it does not wait for the driver to say so;
//! - work whose statement is slow for a reason of its own (`pg_sleep`, not
//!   another writer's lock), run in `ctx.fenced_transaction` on the work's
//!   own connection, gets an error at the deadline: the fenced transaction
//!   is bounded by the term's deadline (a client-side race, a cancel
//!   request and the server's `statement_timeout`).
//!
//! Renewals are made to fail by stalling a TCP proxy (`pg_support`) that
//! only the lease's connections go through; the work's own connection goes
//! straight to the server and keeps working. The shared server is never
//! touched (one table per test).
//!
//! # Busy loops and the async runtime
//!
//! A loop that never awaits holds the thread it runs on. `is_cancelled()`
//! compares the deadline the driver published with the clock itself, so
//! such a loop stops by the deadline whatever else can run (tested on both
//! runtime flavours). What it costs is the lease: while it spins, the
//! driver may not run at all.
//!
//! - On a current-thread runtime (the README's example, the CLI) nothing
//!   else runs: no renewal is sent or read, the term ends at its first
//!   deadline, and the driver demotes and leads again once the loop has
//!   returned.
//! - On a multi-thread runtime another worker could run the driver, but
//!   tokio's I/O and timer driver is only polled by a worker that parks,
//!   and a parked worker is not woken to take it over: on two workers a
//!   lone lease whose work never yields saw no renewal during its term in
//!   every round measured (in the set, where another work yields,
//!   renewals went on). So in practice the same holds.
//!
//! A loop that never yields is supported for stopping on time, not for
//! being led across renewals: work that must keep its lease yields
//! (`tokio::task::yield_now().await` each pass: renewals then go on between
//! two polls, tested on both flavours) or runs on a thread of its own.
//!
//! Real time: the bounds are generous (`MARGIN`) and the figures printed.
//! Tests run one at a time (they measure time on a 2-core machine). More
//! rounds: `PICOLEASE_ROUNDS=10 cargo test -p picolease-tests --test
//! integration pg_term_end:: -- --nocapture`.

use crate::pg_support;

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pg_support::*;
use picolease::postgres::{LeaderContext, PgConnector, PgError, PgLease, PgLeaseSet};
use picolease::{boottime, HolderId, LeaseName, SetConfig, Subscription, TableName, Transition};
use tokio::sync::watch;

const TTL: Duration = Duration::from_millis(1000);
const INTERVAL: Duration = Duration::from_millis(250);
/// How late a work may end past its deadline (and the node its term): as
/// `sqlite_term_end`, generous against the figures (a few ms at most).
const MARGIN: Duration = Duration::from_millis(50);
/// How early a statement may fail before the deadline and still count as
/// cut by it (the server's `statement_timeout` is armed in whole ms).
const EARLY: Duration = Duration::from_millis(20);
const PATIENCE: Duration = Duration::from_secs(10);
/// A busy loop that never sees its end gives up after this, so that a
/// broken `is_cancelled` fails the test instead of spinning for ever.
const VALVE: Duration = Duration::from_secs(8);
/// After the cut, renewals already on their way are answered or given up
/// on within a request timeout (= the interval): the deadline is final.
const SETTLE: Duration = Duration::from_millis(300);
/// The slow statement: a read that takes far longer than any term.
const SLOW: &str = "SELECT pg_sleep(30)";

/// Timing figures must not compete with each other for the two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn rounds() -> usize {
    std::env::var("PICOLEASE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

#[derive(Clone, Copy, Debug)]
enum Flavor {
    /// Two workers.
    MultiThread,
    /// One thread for the driver, the proxy, the test and the work.
    CurrentThread,
}

/// Runs `test` on a runtime of `flavor`, one test at a time. A work that
/// never yields cannot be cancelled, so the runtime is left behind rather
/// than dropped (which would wait for it) when the test fails.
fn run_on(flavor: Flavor, test: impl Future<Output = ()>) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut builder = match flavor {
        Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
    };
    if let Flavor::MultiThread = flavor {
        builder.worker_threads(2);
    }
    let runtime = builder.enable_all().build().unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| runtime.block_on(test)));
    runtime.shutdown_background();
    if let Err(panic) = outcome {
        resume_unwind(panic);
    }
}

/// When a lone lease's renewals are cut (its proxy stalled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// Never: the lease's connections go straight to the server.
    Never,
    /// As soon as it leads.
    AtOnce,
    /// Once its work has seen a renewal (the driver runs beside it).
    AfterARenewal,
}

/// What a work does with its term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    /// `while !ctx.is_cancelled() {}`: never sleeps, never awaits.
    Polls,
    /// `while !ctx.is_cancelled() { yield_now().await }`: a busy loop that
    /// lets the rest of the runtime run between two polls.
    PollsYielding,
    /// `ctx.cancelled()` raced with a 20 ms sleep.
    Awaits,
    /// Once renewals are cut: `SELECT pg_sleep(30)` in a fenced
    /// transaction on its own connection.
    SlowStatement,
}

/// What one term's work saw, on the driver's clock ([`boottime`]).
#[derive(Clone, Debug, Default)]
struct Seen {
    /// The deadline read when the term's work started.
    first: Option<Duration>,
    /// The last deadline read: the one the term ended by (for a slow
    /// statement, the one its fenced transaction was bounded by).
    last: Option<Duration>,
    /// How many times the deadline moved (renewals the work saw).
    moves: usize,
    /// When the work returned, or its statement failed.
    ended: Option<Duration>,
    /// How it ended.
    outcome: String,
    /// A slow statement's: it failed with the error of a cut.
    cut: bool,
    /// A slow statement's: the deadline read right after it failed (none
    /// once demoted); it must not have moved past the statement's bound.
    after: Option<Duration>,
}

/// Every term's work, by `lease@epoch`.
type Probe = Arc<Mutex<BTreeMap<String, Seen>>>;

fn key_of(ctx: &LeaderContext) -> String {
    format!("{}@{}", ctx.lease(), ctx.epoch().get())
}

fn update(probe: &Probe, key: &str, f: impl FnOnce(&mut Seen)) {
    f(probe.lock().unwrap().entry(key.to_string()).or_default());
}

fn seen(probe: &Probe, key: &str) -> Option<Seen> {
    probe.lock().unwrap().get(key).cloned()
}

/// Notes a moved deadline (a renewal the work saw).
fn note(ctx: &LeaderContext, probe: &Probe, key: &str, last: &mut Option<Duration>) {
    let now = ctx.deadline();
    if now.is_some() && now != *last {
        *last = now;
        update(probe, key, |s| {
            s.last = now;
            s.moves += 1;
        });
    }
}

/// A gated work of kind `work`, recording what it saw in `probe`. `cut`
/// turns true once the test has cut the lease's renewals; `app` names the
/// work's own connection.
async fn work(
    ctx: LeaderContext,
    work: Work,
    probe: Probe,
    cut: watch::Receiver<bool>,
    app: String,
) {
    let key = key_of(&ctx);
    let first = ctx.deadline();
    update(&probe, &key, |s| {
        s.first = first;
        s.last = first;
    });
    let valve = boottime() + VALVE;
    let mut last = first;
    let mut outcome = "saw its term end".to_string();
    match work {
        Work::Polls => {
            // Never awaits: this holds its worker thread until the deadline
            // (see the module docs); `is_cancelled` reads the clock itself.
            while !ctx.is_cancelled() {
                note(&ctx, &probe, &key, &mut last);
                if boottime() > valve {
                    outcome = "never saw its term end".into();
                    break;
                }
            }
        }
        Work::PollsYielding => {
            while !ctx.is_cancelled() {
                note(&ctx, &probe, &key, &mut last);
                if boottime() > valve {
                    outcome = "never saw its term end".into();
                    break;
                }
                // Lets the driver, its connections and the proxy run on a
                // current-thread runtime: without it, no renewal would be
                // sent or read while this spins.
                tokio::task::yield_now().await;
            }
        }
        Work::Awaits => loop {
            tokio::select! {
                () = ctx.cancelled() => break,
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            note(&ctx, &probe, &key, &mut last);
            if boottime() > valve {
                outcome = "never saw its term end".into();
                break;
            }
        },
        Work::SlowStatement => return slow_statement(ctx, probe, key, cut, app).await,
    }
    let ended = boottime();
    let last = ctx.deadline().or(last);
    update(&probe, &key, |s| {
        s.last = last;
        s.ended = Some(ended);
        s.outcome = outcome;
    });
}

/// Waits for the cut, lets the deadline settle, then runs [`SLOW`] in a
/// fenced transaction on a connection of its own, straight to the server.
async fn slow_statement(
    ctx: LeaderContext,
    probe: Probe,
    key: String,
    mut cut: watch::Receiver<bool>,
    app: String,
) {
    let mut client = PgConnector::new(&url_for(PG_ADDR, &app))
        .unwrap()
        .connect_client()
        .await
        .expect("the PostgreSQL server at 127.0.0.1:5432 must be running");
    let cut_off = tokio::select! {
        r = cut.wait_for(|c| *c) => r.is_ok(),
        () = ctx.cancelled() => false,
    };
    if !cut_off {
        update(&probe, &key, |s| {
            s.ended = Some(boottime());
            s.outcome = "its term ended before the renewals were cut".into();
        });
        return;
    }
    tokio::time::sleep(SETTLE).await;
    let bound = ctx.deadline();
    update(&probe, &key, |s| s.last = bound);
    let (cut, outcome) = match ctx.fenced_transaction(&mut client).await {
        Err(e) => (false, format!("not opened: {e}")),
        Ok(tx) => match tx.batch_execute(SLOW).await {
            Ok(()) => (false, "the slow statement completed".to_string()),
            Err(e) => (is_cut(&e), format!("{e:?}")),
        },
    };
    let ended = boottime();
    let after = ctx.deadline();
    update(&probe, &key, |s| {
        s.ended = Some(ended);
        s.cut = cut;
        s.outcome = outcome;
        s.after = after;
    });
    ctx.cancelled().await;
}

/// The errors of a statement cut at the deadline: the client's race with
/// the deadline (`Fenced`), or the server's `statement_timeout` (armed to
/// the time left, SQLSTATE 57014) if it came first.
fn is_cut(e: &PgError) -> bool {
    match e {
        PgError::Fenced { .. } => true,
        PgError::Database { code, .. } => code == "57014",
        _ => false,
    }
}

/// Waits until `done()`, polling every 2 ms; panics after `PATIENCE`.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = boottime() + PATIENCE;
    while !done() {
        assert!(boottime() < give_up, "{what}: not after {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn late_ms(at: Duration, deadline: Duration) -> f64 {
    at.as_secs_f64() * 1e3 - deadline.as_secs_f64() * 1e3
}

/// Checks the works of `keys`: each read a deadline, ended by it (within
/// `MARGIN`), a slow statement by being cut at it; returns each end
/// relative to its deadline, in ms, with the work's kind.
fn check_ends(
    probe: &Probe,
    keys: &[String],
    work_of: impl Fn(&str) -> Work,
    what: &str,
) -> Vec<(Work, f64)> {
    let mut lates = Vec::new();
    for key in keys {
        let s = seen(probe, key).unwrap_or_else(|| panic!("{what}: {key} never ran"));
        let work = work_of(key);
        let deadline = s
            .last
            .unwrap_or_else(|| panic!("{what}: {key} never read a deadline: {s:?}"));
        let ended = s
            .ended
            .unwrap_or_else(|| panic!("{what}: {key} never ended: {s:?}"));
        let late = late_ms(ended, deadline);
        eprintln!(
            "{what}: {key} ({work:?}) ended {late:+.3} ms after its deadline ({} renewals seen): {}",
            s.moves, s.outcome
        );
        if work == Work::SlowStatement {
            assert!(
                s.cut,
                "{what}: {key}: the statement was not cut: {}",
                s.outcome
            );
            assert!(
                ended + EARLY >= deadline,
                "{what}: {key}: the statement failed {:.1} ms before the deadline: {}",
                -late,
                s.outcome
            );
            assert!(
                s.after.is_none_or(|after| after == deadline),
                "{what}: {key}: a renewal moved the deadline after the cut: {s:?}"
            );
        } else {
            assert_eq!(s.outcome, "saw its term end", "{what}: {key}: {s:?}");
        }
        assert!(
            ended <= deadline + MARGIN,
            "{what}: {key} ended {late:.1} ms after its deadline: {}",
            s.outcome
        );
        lates.push((work, late));
    }
    lates
}

/// Reads `transitions` until each term of `keys` has ended (the node
/// published it no longer leads it) and checks that each ended by the
/// latest deadline its work read (within `MARGIN`): the driver's own loop
/// ended the term on time, not only the work. The time is the driver's
/// publication stamp, so a test starved by the work still measures it.
async fn check_demoted(probe: &Probe, keys: &[String], transitions: &mut Subscription, what: &str) {
    let mut log = Vec::new();
    let give_up = boottime() + PATIENCE;
    let ends = loop {
        while let Ok(t) = transitions.try_recv() {
            log.push(t);
        }
        let ends: Option<Vec<std::time::Instant>> =
            keys.iter().map(|k| term_end(&log, k)).collect();
        if let Some(ends) = ends {
            break ends;
        }
        assert!(
            boottime() < give_up,
            "{what}: the terms did not end: {log:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    // The publication stamps are monotonic instants: onto the driver's
    // clock (no suspend during a test).
    let (now, boot_now) = (std::time::Instant::now(), boottime());
    let at = ends.into_iter().max().expect("a term");
    let at = boot_now - now.saturating_duration_since(at);
    let deadline = keys
        .iter()
        .filter_map(|k| seen(probe, k).and_then(|s| s.last))
        .max()
        .expect("a deadline was read");
    let late = late_ms(at, deadline);
    eprintln!("{what}: the node ended its term(s) {late:+.3} ms after the deadline");
    assert!(
        at <= deadline + MARGIN,
        "{what}: the node ended its term {late:.1} ms after the deadline"
    );
}

/// When the term `lease@epoch` ended in `log`: the first transition of
/// the lease after it led at that epoch that shows it not leading then.
fn term_end(log: &[Transition], key: &str) -> Option<std::time::Instant> {
    let (lease, epoch) = key.split_once('@').expect("lease@epoch");
    let epoch: u64 = epoch.parse().expect("an epoch");
    let mine = |t: &&Transition| t.lease.as_str() == lease;
    let led = |t: &Transition| t.leadership.leader_epoch().map(|e| e.get()) == Some(epoch);
    log.iter()
        .filter(mine)
        .skip_while(|t| !led(t))
        .find(|t| !led(t))
        .map(|t| t.instant)
}

/// Prints the worst end past the deadline of each kind of work.
fn report(what: &str, lates: &[(Work, f64)]) {
    let mut worst: BTreeMap<String, f64> = BTreeMap::new();
    for (work, late) in lates {
        let w = worst.entry(format!("{work:?}")).or_insert(f64::MIN);
        *w = w.max(*late);
    }
    for (work, late) in worst {
        eprintln!(
            "figure: {what}, {work}: worst end {late:+.3} ms after the deadline over {} rounds",
            rounds()
        );
    }
}

/// A lone lease whose work is `work_kind`, its renewals cut as `cut` says
/// (through a proxy; a slow statement waits for the cut). With
/// `Cut::Never` nothing stops the renewals but the work itself (a loop that
/// never yields and starves the runtime).
async fn lone_lease(name: &str, work_kind: Work, cut: Cut) {
    let admin = admin().await;
    let table = unique_table(name);
    let mut worst = Vec::new();
    for round in 0..rounds() {
        let what = format!("lone lease, {work_kind:?}, round {round}");
        let proxy = match cut {
            Cut::Never => None,
            Cut::AtOnce | Cut::AfterARenewal => Some(Proxy::start().await),
        };
        let addr = proxy.as_ref().map_or(PG_ADDR.to_string(), Proxy::addr);
        let holder = format!("{name}-{}-{round}", std::process::id());
        let probe = Probe::default();
        let (cut_tx, cut_rx) = watch::channel(false);
        let builder = contender_via(&addr, &table, "l", &holder, TTL);
        let mut transitions = builder.subscribe();
        let lease = builder
            .while_leader({
                let probe = Arc::clone(&probe);
                let app = format!("{holder}-work");
                move |ctx| {
                    work(
                        ctx,
                        work_kind,
                        Arc::clone(&probe),
                        cut_rx.clone(),
                        app.clone(),
                    )
                }
            })
            .start()
            .unwrap();
        let led = wait_for(&mut lease.watch(), PATIENCE, "leads", |l| l.is_leader()).await;
        let key = format!("l@{}", led.epoch.unwrap().get());
        let keys = vec![key.clone()];
        if let Some(proxy) = &proxy {
            if cut == Cut::AfterARenewal {
                // Renewals succeed while the work runs: the driver is not
                // starved by it.
                wait_until(&format!("{what}: the work sees a renewal"), || {
                    seen(&probe, &key).is_some_and(|s| s.moves >= 1)
                })
                .await;
            }
            proxy.set(Mode::Stall);
            cut_tx.send_replace(true);
        }
        wait_until(&format!("{what}: the work ends"), || {
            seen(&probe, &key).is_some_and(|s| s.ended.is_some())
        })
        .await;
        check_demoted(&probe, &keys, &mut transitions, &what).await;
        worst.extend(check_ends(&probe, &keys, |_| work_kind, &what));
        if let Some(proxy) = &proxy {
            proxy.set(Mode::Pass);
        }
        let again = wait_for(&mut lease.watch(), PATIENCE, "leads again", |l| {
            l.is_leader()
        })
        .await;
        assert!(again.epoch > led.epoch, "{what}: {again:?} after {led:?}");
        shutdown_lease(lease, &what).await;
    }
    report(&format!("lone lease ({name})"), &worst);
    drop_table(&admin, &table).await;
}

async fn shutdown_lease(lease: PgLease, what: &str) {
    tokio::time::timeout(PATIENCE, lease.shutdown())
        .await
        .unwrap_or_else(|_| panic!("{what}: the shutdown hung"))
        .unwrap();
}

/// A set of three leases on one node; `work_of` gives each lease's work.
/// Its connections go through a proxy, stalled once every work has seen a
/// renewal (slow statements wait for the stall).
async fn lease_set(name: &str, work_of: fn(&str) -> Work) {
    let admin = admin().await;
    let table = unique_table(name);
    let names: Vec<LeaseName> = ["s0", "s1", "s2"]
        .iter()
        .map(|n| LeaseName::new(n).unwrap())
        .collect();
    let kinds: Vec<Work> = names.iter().map(|n| work_of(n.as_str())).collect();
    let mut worst = Vec::new();
    for round in 0..rounds() {
        let what = format!("lease set, {kinds:?}, round {round}");
        let proxy = Proxy::start().await;
        let holder = format!("{name}-{}-{round}", std::process::id());
        let probe = Probe::default();
        let (cut_tx, cut_rx) = watch::channel(false);
        let (set, mut transitions) = start_set(
            &table,
            &holder,
            names.clone(),
            &proxy,
            &probe,
            cut_rx,
            work_of,
        );
        wait_until(&format!("{what}: the set holds its three leases"), || {
            set.snapshot().held.len() == 3
        })
        .await;
        let held = set.snapshot().held;
        let keys: Vec<String> = held
            .iter()
            .map(|(lease, epoch)| format!("{lease}@{}", epoch.get()))
            .collect();
        let lease_of = |key: &str| key.split('@').next().unwrap().to_string();
        // Cut at once: a loop that never yields may starve the driver (see
        // the module docs), so renewals are not waited for.
        proxy.set(Mode::Stall);
        cut_tx.send_replace(true);
        wait_until(&format!("{what}: every work ends"), || {
            keys.iter()
                .all(|k| seen(&probe, k).is_some_and(|s| s.ended.is_some()))
        })
        .await;
        check_demoted(&probe, &keys, &mut transitions, &what).await;
        worst.extend(check_ends(&probe, &keys, |k| work_of(&lease_of(k)), &what));
        proxy.set(Mode::Pass);
        wait_until(&format!("{what}: the set leads again"), || {
            set.snapshot().held.len() == 3
        })
        .await;
        tokio::time::timeout(PATIENCE, set.shutdown())
            .await
            .unwrap_or_else(|_| panic!("{what}: the shutdown hung"))
            .unwrap();
    }
    report(&format!("lease set ({name})"), &worst);
    drop_table(&admin, &table).await;
}

fn start_set(
    table: &TableName,
    holder: &str,
    names: Vec<LeaseName>,
    proxy: &Proxy,
    probe: &Probe,
    cut: watch::Receiver<bool>,
    work_of: fn(&str) -> Work,
) -> (PgLeaseSet, Subscription) {
    let mut template = SetConfig::with_ttl(HolderId::new(holder).unwrap(), TTL).interval(INTERVAL);
    // As `pg_support::config`: 5 % drift for a loaded 2-core machine.
    template.drift = TTL / 20;
    let connector = PgConnector::new(&url_for(&proxy.addr(), holder)).unwrap();
    let probe = Arc::clone(probe);
    let app = format!("{holder}-work");
    let builder = PgLeaseSet::builder(template, names, connector).table(table.clone());
    let transitions = builder.subscribe();
    let set = builder
        .while_leader(move |ctx| {
            let kind = work_of(ctx.lease().as_str());
            work(ctx, kind, Arc::clone(&probe), cut.clone(), app.clone())
        })
        .start()
        .unwrap();
    (set, transitions)
}

#[test]
fn lone_lease_work_that_polls_without_yielding_stops_by_the_deadline_when_renewals_stall() {
    run_on(
        Flavor::MultiThread,
        lone_lease("te_poll", Work::Polls, Cut::AtOnce),
    );
}

#[test]
fn lone_lease_work_that_polls_and_yields_stops_by_the_deadline_on_a_current_thread_runtime() {
    run_on(
        Flavor::CurrentThread,
        lone_lease("te_yield", Work::PollsYielding, Cut::AfterARenewal),
    );
}

#[test]
fn lone_lease_work_that_polls_and_yields_stops_by_the_deadline_on_a_multi_thread_runtime() {
    run_on(
        Flavor::MultiThread,
        lone_lease("te_yield_mt", Work::PollsYielding, Cut::AfterARenewal),
    );
}

/// The one thread is the work's until its deadline: no renewal is sent or
/// read meanwhile, yet the work stops by the deadline it reads itself, and
/// the driver ends the term as soon as it runs again.
#[test]
fn lone_lease_work_that_never_yields_on_a_current_thread_runtime_stops_by_its_first_deadline() {
    run_on(
        Flavor::CurrentThread,
        lone_lease("te_starve", Work::Polls, Cut::Never),
    );
}

#[test]
fn lone_lease_slow_statement_in_a_fenced_transaction_is_cut_at_the_deadline() {
    run_on(
        Flavor::MultiThread,
        lone_lease("te_slow", Work::SlowStatement, Cut::AtOnce),
    );
}

/// One loop that never yields, one that yields, one that awaits
/// `cancelled()`; cut at once, since the first may starve the driver.
#[test]
fn set_work_that_polls_stops_by_each_lease_deadline_when_renewals_stall() {
    run_on(
        Flavor::MultiThread,
        lease_set("te_set_poll", |lease| match lease {
            "s0" => Work::Polls,
            "s1" => Work::PollsYielding,
            _ => Work::Awaits,
        }),
    );
}

#[test]
fn set_slow_statements_in_fenced_transactions_are_cut_at_each_lease_deadline() {
    run_on(
        Flavor::MultiThread,
        lease_set("te_set_slow", |_| Work::SlowStatement),
    );
}
