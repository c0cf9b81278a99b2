//! picolease under Patroni (issue 44): a private cluster of one etcd
//! member and two Patroni members (`pg_support/patroni.rs`), contenders
//! on a multi-host URL (`target_session_attrs=read-write`), as users run
//! it. A planned switchover (`patronictl switchover`), then a lossy
//! failover: the replica is cut off, the lease changes hands on the
//! primary, and the primary's machine crashes (its Patroni and its server
//! SIGKILLed; Patroni promotes the lagging replica once the leader key
//! expires, 20 s at least, as `maximum_lag_on_failover` allows).
//! Across both: no two leaders at once, no epoch given twice, and a
//! leader again within ttl + 2 intervals of each promotion (the new
//! server is a new incarnation: the row is nobody's for a ttl first;
//! DESIGN §3 "Failover").
//!
//! `cargo test -p picolease-tests --test integration pg_patroni:: -- --nocapture`

use crate::failover_support;
use crate::pg_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use failover_support::{contender, outcome, runtime, Seen};
use pg_support::patroni::Patroni;
use picolease::postgres::PgConnector;
use picolease::TableName;

#[test]
fn under_patroni_a_switchover_and_a_lossy_failover_never_give_two_leaders() {
    let ttl = Duration::from_secs(3);
    let bound = ttl + 2 * (ttl / 4);
    let mut patroni = Patroni::start();
    let runtime = runtime();
    let url = patroni.url();
    let table = TableName::new("picolease_patroni").unwrap();
    let seen: Seen = Arc::default();
    let nodes: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|holder| {
            let connector = PgConnector::new(&url).unwrap();
            contender(&runtime, connector, &table, (holder, ttl), &seen)
        })
        .collect();
    nodes[0]
        .wait_for(ttl * 5, |l| l.holder.is_some())
        .expect("someone leads");

    let before = patroni.leader().expect("a primary");
    patroni.switchover();
    patroni.wait_for("the switchover", |p| {
        p.leader().is_some_and(|i| i != before)
    });
    let switched = Instant::now();
    std::thread::sleep(ttl * 3);
    let after_switchover = outcome(&seen, switched);
    eprintln!(
        "switchover: overlap {:?}, epochs reused {:?}, a leader again {:?} after the new primary took writes",
        after_switchover.overlap, after_switchover.reused, after_switchover.led_again
    );
    after_switchover.assert_safe(bound);

    // A lossy failover: the replica is cut off, the lease changes hands
    // on the primary (its holder crashes, the other takes it at expiry),
    // and the primary's machine crashes. Patroni promotes the lagging
    // replica (`maximum_lag_on_failover` allows it), which still has the
    // lost term's holder in the row.
    patroni.cut_replication();
    let holder = |l: &picolease::Leadership| l.holder.as_ref().map(|h| h.as_str().to_string());
    let leading = nodes
        .iter()
        .position(|n| n.leadership().is_leader())
        .expect("a leader before the crash");
    let mut nodes = nodes;
    let lost = nodes.remove(leading);
    let lost_holder = holder(&lost.leadership()).expect("the leader's id");
    seen.lock().unwrap().push((
        lost_holder.clone(),
        Instant::now(),
        picolease::Leadership::unknown(),
    ));
    lost.abort();
    nodes[0]
        .wait_for(ttl * 3, picolease::Leadership::is_leader)
        .expect("the other contender takes over");
    let primary = patroni.leader().expect("a primary");
    let replica = 1 - primary;
    let kept = patroni.sql(
        replica,
        "SELECT holder FROM picolease_patroni WHERE name = 'reaper'",
    );
    assert_eq!(
        kept.as_deref(),
        Some(lost_holder.as_str()),
        "the replica lacks the takeover"
    );

    let crashed = patroni.crash_leader();
    let waited = patroni.wait_for("the failover", |p| p.leader().is_some_and(|i| i != crashed));
    let promoted = Instant::now();
    eprintln!("Patroni promoted the lagging replica {waited:?} after the crash");
    let connector = PgConnector::new(&url).unwrap();
    nodes.push(contender(&runtime, connector, &table, ("c", ttl), &seen));
    std::thread::sleep(ttl * 3);
    let after_crash = outcome(&seen, promoted);
    eprintln!(
        "lossy crash failover: overlap {:?}, epochs reused {:?}, a leader again {:?} after the promotion",
        after_crash.overlap, after_crash.reused, after_crash.led_again
    );
    after_crash.assert_safe(bound);
    for lease in nodes {
        let _ = runtime.block_on(lease.shutdown());
    }
}
