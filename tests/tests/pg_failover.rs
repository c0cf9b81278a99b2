//! A database failover under picolease (issue 20), on private PostgreSQL
//! servers this test starts itself (`pg_support/cluster.rs`: `initdb`, a
//! streaming standby from `pg_basebackup -R`), never the shared one.
//!
//! - `the_private_servers_replicate_fail_over_and_restart`: what the
//!   failover tests stand on (a standby that replicates, stops when cut,
//!   promotes; a primary that survives SIGKILL and restarts on its data),
//!   run in CI.
//! - `a_promoted_standby_that_lost_a_term_never_gives_it_to_a_second_leader`:
//!   the scenario of issue 20, with three drivers on a multi-host URL
//!   (`target_session_attrs=read-write`). A leads; the standby stops
//!   replicating; A crashes and B takes the lease on the primary (epoch
//!   2); the primary crashes (at a different point of B's renewal
//!   interval each round) and the standby, which still has A's expired
//!   term, is promoted; C starts. Before the row recorded the server
//!   incarnation that wrote it, C was given epoch 2 while B still led
//!   (two leaders for 1.26–1.29 s at ttl 6 s). Now the row is adopted:
//!   nobody's for a ttl, its epoch counted from the server's clock
//!   (DESIGN §3 "Failover").
//!   `PICOLEASE_ROUNDS` rounds (2 by default, in CI).
//! - `with_the_runbooks_statement_after_the_promotion_no_term_is_given_twice`:
//!   the operators' statement of docs/operations.md §5.4, still safe
//!   together with the adoption.
//! - `two_lossy_failovers_in_a_row_never_give_an_epoch_twice`: issue
//!   44's chain over three servers, a lagging second standby promoted
//!   after the first one's adopter led.
//! - `a_lease_whose_first_row_was_lost_waits_out_a_grace_on_the_new_server`:
//!   a lease created after the standby stopped replicating (the table
//!   and its marker row replicated): the first row on the new server is
//!   a grace row (DESIGN §3 "Failover", "A lease's first row").
//! - `a_crashed_server_that_lost_commits_never_gives_a_term_twice`: one
//!   server with `synchronous_commit = off`; b's takeover is lost in a
//!   crash of the postmaster, and the server restarts on its data
//!   directory with a's lapsed term. The same guarantees, and b's driver
//!   counts the new server (`picolease_server_changes_total`).
//!
//! `PICOLEASE_ROUNDS=10 cargo test -p picolease-tests --test integration pg_failover:: -- --nocapture`

use crate::failover_support;
use crate::pg_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use failover_support::{
    outcome, runtime, server_changes, wait_until, watch_then_stop, Outcome, Seen,
};
use pg_support::cluster::Server;
use picolease::postgres::{PgConnector, PgLease, PgLeaseSet};
use picolease::{HolderId, Leadership, LeaseName, SetConfig, TableName};

#[test]
fn the_private_servers_replicate_fail_over_and_restart() {
    let primary = Server::primary(&["synchronous_commit = off"]);
    let standby = Server::standby_of(&primary, &[]);
    primary.sql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)");
    wait_until("the standby replays the insert", || {
        standby
            .try_sql("SELECT count(*) FROM t")
            .is_ok_and(|n| n.trim() == "1")
    });
    assert_eq!(standby.sql("SELECT pg_is_in_recovery()").trim(), "t");

    standby.cut_replication();
    wait_until("the standby's WAL receiver stops", || {
        standby
            .sql("SELECT count(*) FROM pg_stat_wal_receiver")
            .trim()
            == "0"
    });
    primary.sql("INSERT INTO t VALUES (2)");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        standby.sql("SELECT count(*) FROM t").trim(),
        "1",
        "a cut standby receives nothing more"
    );

    let started_before = primary.sql("SELECT pg_postmaster_start_time()");
    primary.crash();
    assert!(primary.pid().is_none() || !alive(primary.pid().unwrap()));
    primary.start();
    assert_ne!(
        primary.sql("SELECT pg_postmaster_start_time()"),
        started_before,
        "a restarted server is a new incarnation"
    );

    standby.promote();
    standby.sql("INSERT INTO t VALUES (3)");
    assert_eq!(
        standby
            .sql("SELECT string_agg(x::text, ',' ORDER BY x) FROM t")
            .trim(),
        "1,3",
        "the promoted standby lacks what it never received"
    );
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn contender(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    table: &TableName,
    holder: (&str, Duration),
    seen: &Seen,
) -> PgLease {
    let connector = PgConnector::new(url).unwrap();
    failover_support::contender(runtime, connector, table, holder, seen)
}

/// a crashes (its driver's task aborted, its end logged) once b has seen
/// it lead; b takes over.
fn crash_a_and_let_b_take_over(a: PgLease, b: &PgLease, ttl: Duration, seen: &Seen) {
    b.wait_for(ttl, |l| l.holder.is_some()).expect("b sees a");
    seen.lock()
        .unwrap()
        .push(("a".into(), Instant::now(), Leadership::unknown()));
    a.abort();
    let b_term = b
        .wait_for(ttl * 3, Leadership::is_leader)
        .expect("b takes over");
    eprintln!("b leads at epoch {:?}", b_term.leader_epoch());
}

/// `holder epoch` of `lease`'s row as the server kept it: the contenders
/// may have adopted it already (no holder, `-`; the epoch counted from
/// the server's clock, at least 2^20 further), shown as `- adopted`.
fn kept_row(server: &Server, lease: &str) -> String {
    server
        .sql(&format!(
            "SELECT coalesce(holder, '-') || ' ' || \
             CASE WHEN epoch >= 1048576 THEN 'adopted' ELSE epoch::text END \
             FROM picolease_failover WHERE name = '{lease}'"
        ))
        .trim()
        .to_string()
}

/// The runbook's statement (docs/operations.md §5.4,
/// `Statements::after_failover`, what `picolease release --all
/// --after-failover` runs), for a ttl of `ttl`: every row nobody's for
/// one more ttl from now on the new server's clock, its epoch beyond
/// anything the lost history issued. It must be the first write on the
/// promoted server: the runbook promotes it with
/// `default_transaction_read_only = on` and lifts that after.
fn after_failover(ttl: Duration) -> String {
    let statements = picolease::sql::Statements::new(
        picolease::sql::Dialect::Postgres,
        &TableName::new("picolease_failover").unwrap(),
    );
    let statement = statements.after_failover();
    assert_eq!(statement.params(), [picolease::sql::Param::TtlMillis]);
    statement.sql().replace("$1", &ttl.as_millis().to_string())
}

#[test]
fn a_promoted_standby_that_lost_a_term_never_gives_it_to_a_second_leader() {
    let ttl = Duration::from_secs(3);
    let interval = ttl / 4;
    let rounds: u32 = std::env::var("PICOLEASE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
        .max(1);
    let mut outcomes = Vec::new();
    for round in 0..rounds {
        // The primary crashes at a different point of b's renewal
        // interval each round.
        let phase = interval * round / rounds;
        let outcome = promote_a_standby(ttl, Replication::Cut, false, phase);
        eprintln!(
            "round {round} (crash {phase:?} after b led): overlap {:?}, epochs reused {:?}, \
             a leader again {:?} after the promotion",
            outcome.overlap, outcome.reused, outcome.led_again
        );
        outcome.assert_safe(ttl + 2 * interval);
        outcomes.push(outcome);
    }
    let mut again: Vec<Duration> = outcomes.iter().filter_map(|o| o.led_again).collect();
    again.sort();
    eprintln!(
        "{rounds} rounds at ttl {ttl:?}: no overlap, no epoch reused; a leader again \
         {:?}–{:?} after the promotion (bound ttl + 2 intervals = {:?})",
        again.first(),
        again.last(),
        ttl + 2 * interval
    );
}

#[test]
fn with_the_runbooks_statement_after_the_promotion_no_term_is_given_twice() {
    let ttl = Duration::from_secs(3);
    let outcome = promote_a_standby(ttl, Replication::Cut, true, Duration::ZERO);
    // The runbook holds the rows a ttl from the promotion; the first
    // acquire after it adopts them too (a ttl from then).
    outcome.assert_safe(ttl + ttl / 2);
}

/// How the standby follows the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Replication {
    /// Cut after it has a's term: it lacks b's takeover.
    Cut,
    /// Synchronous: it has every commit the primary acknowledged.
    Synchronous,
}

/// A synchronous standby promoted: nothing is lost, b's term is on it.
/// The incarnation still changes, so b demotes at its next renewal and
/// the lease is nobody's for a ttl (DESIGN §3 "Failover": nothing in a
/// row tells this from a failover that lost commits). Safe, and led
/// again within ttl + 2 intervals; the test prints what the grace
/// period costs here, where without it b would have led on.
#[test]
fn a_synchronous_standby_promoted_loses_nothing_and_waits_out_the_grace_period() {
    let ttl = Duration::from_secs(3);
    let interval = ttl / 4;
    let outcome = promote_a_standby(ttl, Replication::Synchronous, false, Duration::ZERO);
    eprintln!(
        "synchronous standby: overlap {:?}, epochs reused {:?}, a leader again {:?} after the promotion",
        outcome.overlap, outcome.reused, outcome.led_again
    );
    outcome.assert_safe(ttl + 2 * interval);
}

/// Issue 44's chain of two lossy failovers over three servers: a leads on
/// the primary, with two asynchronous standbys; the second standby's
/// replication is cut; the primary crashes and the first standby is
/// promoted; c adopts the row there and leads; the first standby crashes
/// and the lagging second one (which still has a's row, without c's
/// adoption) is promoted; d starts. With the constant jump of old, c and
/// d were both given epoch 2^32 + 2. Now each adoption counts its server's
/// clock (DESIGN §3 "Failover"): no epoch twice, no overlap, a leader
/// again within ttl + 2 intervals of the second promotion.
#[test]
fn two_lossy_failovers_in_a_row_never_give_an_epoch_twice() {
    let ttl = Duration::from_secs(3);
    let interval = ttl / 4;
    let runtime = runtime();
    let primary = Server::primary(&[]);
    let first = Server::standby_of(&primary, &[]);
    let second = Server::standby_of(&primary, &[]);
    let url = format!(
        "postgres://postgres@{},{},{}/postgres?target_session_attrs=read-write&connect_timeout=1",
        primary.addr(),
        first.addr(),
        second.addr()
    );
    let table = TableName::new("picolease_failover").unwrap();
    let seen: Seen = Arc::default();
    let a = contender(&runtime, &url, &table, ("a", ttl), &seen);
    a.wait_for(ttl * 5, Leadership::is_leader).expect("a leads");
    for standby in [&first, &second] {
        wait_until("the standbys have a's term", || {
            standby
                .try_sql("SELECT holder FROM picolease_failover WHERE name = 'reaper'")
                .is_ok_and(|holder| holder.trim() == "a")
        });
    }
    second.cut_replication();
    primary.crash();
    // a dies with the primary (its end logged, as `crash_a_and_let_b_take_over` does).
    seen.lock()
        .unwrap()
        .push(("a".into(), Instant::now(), Leadership::unknown()));
    a.abort();
    first.promote();
    let c = contender(&runtime, &url, &table, ("c", ttl), &seen);
    let c_term = c
        .wait_for(ttl * 4, Leadership::is_leader)
        .expect("c leads on the first standby");
    eprintln!("c leads at epoch {:?}", c_term.leader_epoch());
    assert_eq!(
        kept_row(&second, "reaper"),
        "a 1",
        "the second standby lags"
    );
    first.crash();
    second.promote();
    let promoted = Instant::now();
    let d = contender(&runtime, &url, &table, ("d", ttl), &seen);
    let outcome = watch_then_stop(&runtime, &seen, promoted, ttl, [c, d]);
    eprintln!(
        "two lossy failovers: overlap {:?}, epochs reused {:?}, a leader again {:?} after the second promotion",
        outcome.overlap, outcome.reused, outcome.led_again
    );
    outcome.assert_safe(ttl + 2 * interval);
}

/// Issue 20's scenario at `ttl`: a leads; the standby stops replicating;
/// a crashes and b takes over on the primary; `phase` later the primary
/// crashes and the standby (with a's expired term) is promoted; with
/// `runbook` the operator's statement runs on it then; c starts.
fn promote_a_standby(
    ttl: Duration,
    replication: Replication,
    runbook: bool,
    phase: Duration,
) -> Outcome {
    let runtime = runtime();
    let primary = match replication {
        Replication::Cut => Server::primary(&[]),
        // Every commit waits for the standby: the promotion loses nothing.
        Replication::Synchronous => Server::primary(&["synchronous_standby_names = '*'"]),
    };
    // pg_basebackup copies the primary's settings: once promoted, the
    // standby has no standby of its own to wait for.
    let standby = Server::standby_of(&primary, &["synchronous_standby_names = ''"]);
    let url = format!(
        "postgres://postgres@{},{}/postgres?target_session_attrs=read-write&connect_timeout=1",
        primary.addr(),
        standby.addr()
    );
    let table = TableName::new("picolease_failover").unwrap();
    let seen: Seen = Arc::default();

    let a = contender(&runtime, &url, &table, ("a", ttl), &seen);
    a.wait_for(ttl * 5, Leadership::is_leader).expect("a leads");
    wait_until("the standby has a's term", || {
        standby
            .try_sql("SELECT holder FROM picolease_failover WHERE name = 'reaper'")
            .is_ok_and(|holder| holder.trim() == "a")
    });
    if replication == Replication::Cut {
        standby.cut_replication();
    }

    let b = contender(&runtime, &url, &table, ("b", ttl), &seen);
    crash_a_and_let_b_take_over(a, &b, ttl, &seen);

    std::thread::sleep(phase);
    primary.crash();
    if runbook {
        // Promoted read-only, so that no contender writes before the
        // runbook's statement: it alone runs read-write.
        standby.sql("ALTER SYSTEM SET default_transaction_read_only = on");
        standby.sql("SELECT pg_reload_conf()");
    }
    standby.promote();
    let promoted = Instant::now();
    let row = kept_row(&standby, "reaper");
    let expected = match replication {
        Replication::Cut => ["a 1", "- adopted"],
        Replication::Synchronous => ["b 2", "- adopted"],
    };
    assert!(
        expected.contains(&row.as_str()),
        "the promoted standby's row: {row} (expected one of {expected:?})"
    );
    if runbook {
        standby.sql(&format!(
            "BEGIN READ WRITE; {}; COMMIT",
            after_failover(ttl)
        ));
        standby.sql("ALTER SYSTEM RESET default_transaction_read_only");
        standby.sql("SELECT pg_reload_conf()");
    }
    let c = contender(&runtime, &url, &table, ("c", ttl), &seen);
    watch_then_stop(&runtime, &seen, promoted, ttl, [b, c])
}

/// Issue 44's first row: a lease created on the primary after the
/// standby stopped replicating, so the promoted standby has the table and
/// its marker row but not the lease. a leads at epoch 1 (on the primary
/// alone); the primary crashes, the standby is promoted, a's driver
/// reconnects to it and c starts. The first acquire there finds the
/// marker written by another server and inserts the lease's row as a
/// grace row, nobody's for a ttl, at an epoch counted from the clock.
/// Before the marker, c led at epoch 1 at once while a still led.
#[test]
fn a_lease_whose_first_row_was_lost_waits_out_a_grace_on_the_new_server() {
    let ttl = Duration::from_secs(3);
    let interval = ttl / 4;
    let runtime = runtime();
    let primary = Server::primary(&[]);
    let standby = Server::standby_of(&primary, &[]);
    let url = format!(
        "postgres://postgres@{},{}/postgres?target_session_attrs=read-write&connect_timeout=1",
        primary.addr(),
        standby.addr()
    );
    let table = TableName::new("picolease_failover").unwrap();
    let statements = picolease::sql::Statements::new(picolease::sql::Dialect::Postgres, &table);
    primary.sql(statements.create_table());
    primary.sql(statements.create_index().expect("PostgreSQL's index"));
    wait_until("the standby has the table and its marker", || {
        standby
            .try_sql("SELECT count(*) FROM picolease_failover WHERE name = 'picolease.table'")
            .is_ok_and(|n| n.trim() == "1")
    });
    standby.cut_replication();

    let seen: Seen = Arc::default();
    let a = contender(&runtime, &url, &table, ("a", ttl), &seen);
    let a_term = a.wait_for(ttl * 5, Leadership::is_leader).expect("a leads");
    assert_eq!(a_term.leader_epoch().map(|e| e.get()), Some(1));
    // Read before the promotion: once promoted, a's driver reconnects
    // and inserts the row there at once (as a grace row).
    assert_eq!(
        standby
            .sql("SELECT count(*) FROM picolease_failover WHERE name = 'reaper'")
            .trim(),
        "0",
        "the standby never had the lease's row"
    );
    primary.crash();
    standby.promote();
    let promoted = Instant::now();
    let c = contender(&runtime, &url, &table, ("c", ttl), &seen);
    let outcome = watch_then_stop(&runtime, &seen, promoted, ttl, [a, c]);
    eprintln!(
        "a lost first row: overlap {:?}, epochs reused {:?}, a leader again {:?} after the \
         promotion (bound ttl + 2 intervals = {:?})",
        outcome.overlap,
        outcome.reused,
        outcome.led_again,
        ttl + 2 * interval
    );
    outcome.assert_safe(ttl + 2 * interval);
    let (holder, epoch) = standby
        .sql("SELECT coalesce(holder, '-') || ' ' || epoch FROM picolease_failover WHERE name = 'reaper'")
        .trim()
        .split_once(' ')
        .map(|(h, e)| (h.to_string(), e.parse::<i64>().unwrap()))
        .unwrap();
    assert!(
        epoch > 1 << 20,
        "the fresh row's epoch counts the clock: {holder} {epoch}"
    );
}

/// Issue 20's third fault: the server itself crashes (SIGKILL of the
/// postmaster) with `synchronous_commit = off`, so the takeover it had
/// just acknowledged is not on disk, and restarts on the same data
/// directory. a leads (its term flushed by a checkpoint); a crashes and b
/// takes over (epoch 2, in the WAL buffers only); the server is killed
/// and restarted with a's lapsed term; c starts. No overlap, no epoch
/// reused, a leader again within ttl + 2 intervals of the restart.
#[test]
fn a_crashed_server_that_lost_commits_never_gives_a_term_twice() {
    let ttl = Duration::from_secs(3);
    let interval = ttl / 4;
    let runtime = runtime();
    // Asynchronous commits, flushed by the WAL writer only every 10 s:
    // what b's takeover commits stays in memory until the crash.
    let server = Server::primary(&["synchronous_commit = off", "wal_writer_delay = 10s"]);
    let url = format!("{}?connect_timeout=1", server.url());
    let table = TableName::new("picolease_failover").unwrap();
    let seen: Seen = Arc::default();

    let a = contender(&runtime, &url, &table, ("a", ttl), &seen);
    a.wait_for(ttl * 5, Leadership::is_leader).expect("a leads");
    server.sql("CHECKPOINT");
    // b's driver counts the server changes it meets on reconnecting.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let metrics = recorder.handle();
    let b = metrics::with_local_recorder(&recorder, || {
        contender(&runtime, &url, &table, ("b", ttl), &seen)
    });
    crash_a_and_let_b_take_over(a, &b, ttl, &seen);
    assert_eq!(server_changes(&metrics), 0.0, "the same server so far");

    server.crash();
    server.start();
    let restarted = Instant::now();
    let row = kept_row(&server, "reaper");
    eprintln!("after the restart the row is ({row})");
    assert!(
        ["a 1", "- adopted"].contains(&row.as_str()),
        "the crash was to lose b's takeover (asynchronous commit): {row}"
    );
    let c = contender(&runtime, &url, &table, ("c", ttl), &seen);
    std::thread::sleep(ttl * 3);
    let outcome = outcome(&seen, restarted);
    eprintln!(
        "server crash: overlap {:?}, epochs reused {:?}, a leader again {:?} after the restart",
        outcome.overlap, outcome.reused, outcome.led_again
    );
    outcome.assert_safe(ttl + 2 * interval);
    assert_eq!(
        server_changes(&metrics),
        1.0,
        "b's reconnection counted the new server:\n{}",
        metrics.render()
    );
    for lease in [b, c] {
        let _ = runtime.block_on(lease.shutdown());
    }
}

/// A set contender over `leases`, its transitions logged per lease.
fn set_contender(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    table: &TableName,
    (holder, ttl): (&str, Duration),
    leases: &[LeaseName],
    seen: &Seen,
) -> PgLeaseSet {
    let _entered = runtime.enter();
    let set = PgLeaseSet::builder(
        SetConfig::with_ttl(HolderId::new(holder).unwrap(), ttl),
        leases.to_vec(),
        PgConnector::new(url).unwrap(),
    )
    .table(table.clone())
    .start()
    .unwrap();
    let mut transitions = set.subscribe();
    let (seen, holder) = (Arc::clone(seen), holder.to_string());
    runtime.spawn(async move {
        while let Ok(t) = transitions.recv().await {
            seen.lock()
                .unwrap()
                .push((format!("{}/{holder}", t.lease), t.instant, t.leadership));
        }
    });
    set
}

/// Lease sets keep all of it per lease: x holds both leases of a set
/// (flushed), crashes, and y takes both over (in the WAL buffers only);
/// the server (`synchronous_commit = off`) crashes and restarts with x's
/// lapsed terms; z starts. Per lease: no overlap, no epoch reused, and
/// led again within ttl + 2 intervals of the restart.
#[test]
fn a_lease_set_across_a_server_crash_that_lost_commits() {
    let ttl = Duration::from_secs(3);
    let interval = ttl / 4;
    let runtime = runtime();
    let server = Server::primary(&["synchronous_commit = off", "wal_writer_delay = 10s"]);
    let url = format!("{}?connect_timeout=1", server.url());
    let table = TableName::new("picolease_failover").unwrap();
    let leases: Vec<LeaseName> = ["s0", "s1"].map(|n| LeaseName::new(n).unwrap()).to_vec();
    let seen: Seen = Arc::default();
    let leads_all = |set: &PgLeaseSet| {
        leases.iter().all(|lease| {
            set.wait_for(lease, ttl * 5, Leadership::is_leader)
                .is_some_and(|l| l.is_leader())
        })
    };

    let x = set_contender(&runtime, &url, &table, ("x", ttl), &leases, &seen);
    assert!(leads_all(&x), "x leads both leases");
    server.sql("CHECKPOINT");
    let y = set_contender(&runtime, &url, &table, ("y", ttl), &leases, &seen);
    std::thread::sleep(interval);
    let crashed = Instant::now();
    for lease in &leases {
        seen.lock()
            .unwrap()
            .push((format!("{lease}/x"), crashed, Leadership::unknown()));
    }
    x.abort();
    assert!(leads_all(&y), "y takes both leases over");

    server.crash();
    server.start();
    let restarted = Instant::now();
    // y took one lease when x yielded it and the other after x's
    // crash; the crash loses at least the last takeover (the WAL writer
    // may have flushed the first, as it wakes every 10 s): x's epoch 1.
    let rows: Vec<String> = leases
        .iter()
        .map(|l| kept_row(&server, l.as_str()))
        .collect();
    eprintln!("after the restart the rows are {rows:?}");
    assert!(
        rows.iter()
            .any(|row| ["x 1", "- adopted"].contains(&row.as_str())),
        "the crash was to lose one of y's takeovers: {rows:?}"
    );
    let z = set_contender(&runtime, &url, &table, ("z", ttl), &leases, &seen);
    std::thread::sleep(ttl * 3);
    let outcome = outcome(&seen, restarted);
    eprintln!(
        "lease set, server crash: overlap {:?}, epochs reused {:?}, a leader again {:?} after the restart",
        outcome.overlap, outcome.reused, outcome.led_again
    );
    outcome.assert_safe(ttl + 2 * interval);
    for set in [y, z] {
        let _ = runtime.block_on(set.shutdown());
    }
}
