//! Many contenders: 50 drivers on one lease in one process. Exactly one
//! leads at a time and epochs strictly increase across every handover
//! (clean shutdowns and crashes of the leader, each replaced by a newcomer
//! so that 50 keep competing).
//!
//! Notifications are off here: 50 drivers with a LISTEN connection each
//! would need 100 of the server's 100 connections. Handovers are by polling.

use crate::pg_support;

use std::time::{Duration, Instant};

use pg_support::*;
use picolease::postgres::PgLease;

const TTL: Duration = Duration::from_millis(1000);
const CONTENDERS: usize = 50;
const HANDOVERS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_contenders_one_leader_at_a_time_with_increasing_epochs() {
    let table = unique_table("many");
    // Create the table once, so 50 first connects do not all race to.
    picolease::postgres::init(&admin().await, &table)
        .await
        .unwrap();
    let recorder = Recorder::default();
    let spawn = |n: usize| {
        let lease = contender(&table, "l", &format!("m{n}"), TTL)
            .notifications(false)
            .start()
            .unwrap();
        recorder.watch(&format!("m{n}"), &lease);
        lease
    };
    let mut nodes: Vec<(usize, PgLease)> = (0..CONTENDERS).map(|n| (n, spawn(n))).collect();
    let mut last_epoch = None;
    for round in 0..=HANDOVERS {
        // Wait for a leader with a newer epoch than the last one.
        let deadline = Instant::now() + Duration::from_secs(15);
        let leader = loop {
            let leading: Vec<usize> = nodes
                .iter()
                .enumerate()
                .filter(|(_, (_, l))| l.watch().borrow().is_leader())
                .map(|(i, _)| i)
                .collect();
            assert!(
                leading.len() <= 1,
                "round {round}: {} leaders at once",
                leading.len()
            );
            if let [i] = leading[..] {
                let epoch = nodes[i].1.watch().borrow().epoch;
                if epoch > last_epoch {
                    last_epoch = epoch;
                    break i;
                }
            }
            assert!(Instant::now() < deadline, "round {round}: no new leader");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if round == HANDOVERS {
            break;
        }
        let (n, lease) = nodes.swap_remove(leader);
        if round % 2 == 0 {
            lease.shutdown().await.unwrap();
        } else {
            recorder.mark_crash(&format!("m{n}"));
            lease.abort();
        }
        let newcomer = CONTENDERS + round;
        nodes.push((newcomer, spawn(newcomer)));
    }
    for (_, lease) in nodes {
        lease.shutdown().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let terms = recorder.assert_exclusive();
    assert!(terms > HANDOVERS, "only {terms} terms");
    drop_table(&admin().await, &table).await;
}
