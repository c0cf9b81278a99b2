//! picolease on a MariaDB Galera cluster (issue 44), three private nodes
//! this test starts (`mysql_support/galera.rs`), the third one's clock
//! 1.5 s ahead (libfaketime), as a node whose NTP failed would be.
//!
//! What picolease promises there (DESIGN §3 "Failover", docs/operations.md
//! §8): route every contender and every fenced write to one node. Row
//! locks are local to the node that takes them and each node compares
//! with its own clock, so contenders on several nodes are only as safe
//! as the nodes' clocks agree (issue 44 saw 952 ms of two leaders with a
//! node 1.5 s ahead, when the nodes shared one `server_id`).
//!
//! - `one_writer_node_keeps_one_leader_through_a_node_crash_and_a_skewed_node`:
//!   three contenders on the first node, the default ttl of 10 s; the
//!   second node is killed (every commit in the cluster stalls while
//!   Galera evicts it: 6.2 s here) and the leader keeps its term through
//!   the stall; then the leader crashes. No overlap, no epoch twice, a
//!   leader again within ttl + 2 intervals of the crash.
//! - `contenders_on_nodes_with_their_own_server_ids_never_overlap`: one
//!   contender on the first node, one on the skewed third, the nodes with
//!   distinct `server_id`s. Each node is an incarnation, so each one's
//!   acquire adopts the row the other wrote (a grace period, an epoch
//!   jump) and demotes the other: never two leaders, never an epoch twice,
//!   whatever the skew. But after the first term nobody leads at all:
//!   the two adopt each other's row every interval. Safe, and useless:
//!   that is why the promise is one node.
//!   On the same cluster, then
//!   (`sets_renewing_by_liveness_on_one_writer_node_take_a_crashed_sets_leases`):
//!   three lease sets renewing by liveness (DESIGN §9 "Renewal by liveness") on the first
//!   node over 30 leases; one crashes, and its leases are led again at
//!   the next epoch within ttl + 2 intervals, never by two sets at once.
//!
//! `cargo test -p picolease-tests --test integration mysql_galera:: -- --nocapture`

use crate::failover_support;
use crate::mysql_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use failover_support::{outcome, runtime, terms, Seen};
use mysql_support::galera::{Galera, Node};
use picolease::mysql::{MysqlConnector, MysqlLease, MysqlLeaseSet};
use picolease::{Epoch, HolderId, Leadership, LeaseName, SetConfig, TableName};

const TABLE: &str = "picolease_galera";

fn contender(
    runtime: &tokio::runtime::Runtime,
    galera: &Galera,
    node: usize,
    holder: (&str, Duration),
    seen: &Seen,
) -> MysqlLease {
    let url = format!(
        "mysql://picolease@127.0.0.1:{}/test",
        galera.node(node).port()
    );
    let connector = MysqlConnector::new(&url).unwrap();
    let table = TableName::new(TABLE).unwrap();
    failover_support::contender(runtime, connector, &table, holder, seen)
}

/// The offset of node `i`'s `UTC_TIMESTAMP` from the test's clock, in
/// seconds: the skew is real.
fn clock_offset(galera: &Galera, i: usize) -> f64 {
    let read = galera
        .node(i)
        .sql("SELECT UNIX_TIMESTAMP(UTC_TIMESTAMP(6)) - UNIX_TIMESTAMP(UTC_TIMESTAMP(0)) + TIMESTAMPDIFF(SECOND, '1970-01-01', UTC_TIMESTAMP(0))");
    let theirs: f64 = read.trim().parse().expect("a number");
    let ours = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    theirs - ours
}

fn three_nodes(server_ids: [u32; 3]) -> Galera {
    let nodes = [
        Node {
            server_id: server_ids[0],
            skew: None,
        },
        Node {
            server_id: server_ids[1],
            skew: None,
        },
        Node {
            server_id: server_ids[2],
            skew: Some("+1.5s"),
        },
    ];
    // A node that does not come up (a joiner's state transfer on a loaded
    // machine, a port another test took between its probe and the bind)
    // says nothing about picolease: the cluster is started once more, its
    // first try's servers stopped and removed as it unwound.
    let galera = std::panic::catch_unwind(|| Galera::start(&nodes)).unwrap_or_else(|_| {
        eprintln!("the cluster did not come up; starting it again");
        Galera::start(&nodes)
    });
    let skew = clock_offset(&galera, 2);
    eprintln!("the third node's clock is {skew:+.3}s off");
    assert!(
        (1.2..1.8).contains(&skew),
        "the third node's clock runs 1.5 s ahead: {skew}"
    );
    galera
}

#[test]
fn one_writer_node_keeps_one_leader_through_a_node_crash_and_a_skewed_node() {
    // MariaDB's default server_id, 1 on every node: a Galera cluster as
    // most are installed. The default ttl: above the stall of a node's
    // crash (docs/operations.md §8).
    let mut galera = three_nodes([1, 1, 1]);
    let runtime = runtime();
    let ttl = Duration::from_secs(10);
    let seen: Seen = Arc::default();
    let a = contender(&runtime, &galera, 0, ("a", ttl), &seen);
    a.wait_for(ttl * 3, Leadership::is_leader).expect("a leads");
    let first = a.leadership().leader_epoch();
    let b = contender(&runtime, &galera, 0, ("b", ttl), &seen);
    let c = contender(&runtime, &galera, 0, ("c", ttl), &seen);
    b.wait_for(ttl, |l| l.holder.is_some()).expect("b sees a");
    c.wait_for(ttl, |l| l.holder.is_some()).expect("c sees a");

    // What the writer node's settings predict of the stall a lost node
    // causes (what `picolease bench` recommends a ttl from).
    let predicted = runtime
        .block_on(async {
            let url = format!("mysql://picolease@127.0.0.1:{}/test", galera.node(0).port());
            let mut conn = picolease::mysql::MysqlConnector::new(&url)
                .unwrap()
                .connect_client()
                .await
                .unwrap();
            picolease::mysql::galera_commit_stall(&mut conn).await
        })
        .expect("the Galera settings read")
        .expect("a Galera node");

    // Every commit stalls until Galera evicts the dead node. (A commit
    // the stall outlasts fails with 1205 and is tried again, as a driver
    // does; the time is to the first that lands.)
    let killed = Instant::now();
    galera.kill(1);
    let mut failed = 0;
    while galera
        .node(0)
        .try_sql(
            "CREATE TABLE IF NOT EXISTS test.after_the_kill (x INT PRIMARY KEY); \
             REPLACE INTO test.after_the_kill VALUES (1)",
        )
        .is_none()
    {
        failed += 1;
        assert!(failed < 10, "no commit lands on the writer node");
    }
    let stall = killed.elapsed();
    eprintln!(
        "a commit on the writer node took {stall:?} after the second node's crash \
         ({failed} attempts failed; the node's settings predict {predicted:?})"
    );
    assert!(
        stall <= predicted,
        "the stall {stall:?} outlasts the estimate {predicted:?} that bench's ttl rests on"
    );
    std::thread::sleep(ttl / 2);
    let demoted = seen
        .lock()
        .unwrap()
        .iter()
        .any(|(holder, at, l)| holder == "a" && *at > killed && !l.is_leader());
    assert!(
        !demoted && a.leadership().leader_epoch() == first,
        "a kept its term through a stall of {stall:?} at ttl {ttl:?}"
    );

    seen.lock()
        .unwrap()
        .push(("a".into(), Instant::now(), Leadership::unknown()));
    a.abort();
    let crashed = Instant::now();
    // Until b or c leads (at most ttl + 2 intervals), then a second more
    // in which a second leader would show.
    let bound = ttl + 2 * (ttl / 4);
    let deadline = crashed + bound + Duration::from_secs(1);
    while ![&b, &c].iter().any(|n| n.leadership().is_leader()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(1));
    let result = outcome(&seen, crashed);
    eprintln!(
        "one writer node: overlap {:?}, epochs reused {:?}, a leader again {:?} after the leader's crash ({:?} after the node's)",
        result.overlap,
        result.reused,
        result.led_again,
        crashed - killed
    );
    for lease in [b, c] {
        let _ = runtime.block_on(lease.shutdown());
    }
    result.assert_safe(bound);
}

#[test]
fn contenders_on_nodes_with_their_own_server_ids_never_overlap() {
    let galera = three_nodes([1, 2, 3]);
    let runtime = runtime();
    let ttl = Duration::from_secs(3);
    let seen: Seen = Arc::default();
    let started = Instant::now();
    let a = contender(&runtime, &galera, 0, ("a", ttl), &seen);
    a.wait_for(ttl * 3, Leadership::is_leader).expect("a leads");
    let c = contender(&runtime, &galera, 2, ("c", ttl), &seen);
    std::thread::sleep(ttl * 4);
    let result = outcome(&seen, started);
    let led: Vec<_> = terms(&seen, Instant::now())
        .into_iter()
        .map(|(holder, epoch, from, to)| (holder, epoch, to - from))
        .collect();
    eprintln!(
        "contenders on two nodes with their own server_ids: overlap {:?}, epochs reused {:?}, terms {led:?}",
        result.overlap, result.reused
    );
    for lease in [a, c] {
        let _ = runtime.block_on(lease.shutdown());
    }
    assert_eq!(result.overlap, Duration::ZERO, "two leaders at once");
    assert!(result.reused.is_empty(), "{:?}", result.reused);
    assert!(!led.is_empty(), "a led at first");
    sets_renewing_by_liveness_on_one_writer_node_take_a_crashed_sets_leases(&galera, &runtime);
}

/// Lease sets renewing by liveness (DESIGN §9 "Renewal by liveness") on the cluster's first
/// node, as docs/operations.md §8 routes every contender: three sets over
/// 30 leases share 10 each, one crashes (aborted, nothing released), and
/// each of its 10 leases is led by another set at the next epoch within
/// ttl + 2 intervals of the crash, its linked rows taken through the
/// acquire's kill of its liveness, which Galera certifies as any commit.
/// No lease is ever in two live sets' hands at once (sampled every 5 ms).
/// Run on the cluster of
/// `contenders_on_nodes_with_their_own_server_ids_never_overlap` once its
/// contenders are gone (every set on one node, whose `server_id` is its
/// own: a third cluster made the module's run 121 s, from 37 s).
fn sets_renewing_by_liveness_on_one_writer_node_take_a_crashed_sets_leases(
    galera: &Galera,
    runtime: &tokio::runtime::Runtime,
) {
    let _entered = runtime.enter();
    let ttl = Duration::from_secs(2);
    let names: Vec<LeaseName> = (0..30)
        .map(|i| LeaseName::new(&format!("g{i}")).unwrap())
        .collect();
    let url = format!("mysql://picolease@127.0.0.1:{}/test", galera.node(0).port());
    let mut sets: Vec<Option<MysqlLeaseSet>> = (0..3)
        .map(|i| {
            let mut template = SetConfig::with_ttl(HolderId::new(&format!("g{i}")).unwrap(), ttl);
            template.by_liveness = true;
            let set =
                MysqlLeaseSet::builder(template, names.clone(), MysqlConnector::new(&url).unwrap())
                    .table(TableName::new("picolease_galera_set").unwrap())
                    .start()
                    .unwrap();
            Some(set)
        })
        .collect();
    let held = |sets: &[Option<MysqlLeaseSet>]| -> Vec<Option<BTreeMap<LeaseName, Epoch>>> {
        sets.iter()
            .map(|s| s.as_ref().map(|s| s.watch().borrow().clone()))
            .collect()
    };
    let started = Instant::now();
    while held(&sets)
        .iter()
        .flatten()
        .map(BTreeMap::len)
        .collect::<Vec<_>>()
        != [10, 10, 10]
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never 10 each: {:?}",
            held(&sets)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "30 leases by liveness, 10 each, {:?} after the start",
        started.elapsed()
    );
    // Every lease row is linked to its holder's liveness, on every node
    // (`expires_at` = 2^62 + the liveness term).
    for node in 0..3 {
        let linked = galera.node(node).sql(&format!(
            "SELECT COUNT(*) FROM test.picolease_galera_set WHERE name LIKE 'g%' AND expires_at >= {}",
            picolease_core::sql::LINK_BASE
        ));
        assert_eq!(linked.trim(), "30", "linked rows on node {node}");
    }
    let crashed = held(&sets)[0].clone().unwrap();
    sets[0].take().unwrap().abort();
    let crash = Instant::now();
    let bound = ttl + 2 * (ttl / 4);
    let mut taken: BTreeMap<LeaseName, (Duration, Epoch)> = BTreeMap::new();
    while crash.elapsed() < bound + Duration::from_secs(1) {
        let now = held(&sets);
        let mut holders: BTreeMap<&LeaseName, usize> = BTreeMap::new();
        for set in now.iter().flatten() {
            for lease in set.keys() {
                *holders.entry(lease).or_default() += 1;
            }
        }
        if let Some((lease, _)) = holders.iter().find(|(_, &n)| n > 1) {
            panic!("{lease} held by two sets at once: {now:?}");
        }
        for set in now.iter().flatten() {
            for (lease, &epoch) in set {
                if crashed.contains_key(lease) {
                    taken
                        .entry(lease.clone())
                        .or_insert((crash.elapsed(), epoch));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let latest = taken.values().map(|(at, _)| *at).max();
    eprintln!(
        "the crashed set's {} leases: {} led again, the last {latest:?} after the crash",
        crashed.len(),
        taken.len()
    );
    assert_eq!(taken.len(), crashed.len(), "every one led again: {taken:?}");
    for (lease, (at, epoch)) in &taken {
        assert!(*at <= bound, "{lease} led again {at:?} after the crash");
        assert_eq!(
            epoch.get(),
            crashed[lease].get() + 1,
            "{lease} at the next epoch"
        );
    }
    for set in sets.into_iter().flatten() {
        runtime.block_on(set.shutdown()).unwrap();
    }
}
