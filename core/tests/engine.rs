//! `Engine` as a specification: the exact orders it gives for each input,
//! a lone lease's and a set's, on hand-picked times, as `lease_state.rs`
//! and `lease_set.rs` are for the machines underneath. What is tested here
//! is what the engine adds: one input language, one output language, and
//! the few decisions between the two machines (a set's hand-over is a
//! single-row statement; a lone lease keeps notices of its own name; a
//! change is a lone lease's row or a set's survey). Lease `l` alone, or
//! leases `a` and `b` in a set; holder `me`, ttl 10 s, no jitter.

use std::time::Duration;

use picolease_core::engine::{Answer, Statement};
use picolease_core::sql::LeaseRow;
use picolease_core::{
    Batch, BatchKind, BatchReply, Config, Demotion, Engine, Epoch, Input, LeaseSet, LeaseState,
    Operation, Order, Reply, RequestId, SetConfig,
};

mod exact;

use exact::{ended, leading, me, member, ms, name, successor, TTL, VALIDITY_MS};

fn drain(engine: &mut Engine) -> Vec<Order> {
    std::iter::from_fn(|| engine.poll_order()).collect()
}

/// A single-row statement `operation`, request `id`, ending by `end_by`.
fn row(id: u64, operation: Operation, end_by: Option<u64>) -> Order {
    Order::Execute {
        request: RequestId(id),
        statement: Statement::Row(operation),
        end_by: end_by.map(ms),
    }
}

/// A batch of `kind` over `items`, request `id`, ending by `end_by`.
fn batch(id: u64, kind: BatchKind, items: &[(&str, Option<u64>)], end_by: u64) -> Order {
    Order::Execute {
        request: RequestId(id),
        statement: Statement::Batch(Batch {
            kind,
            items: items
                .iter()
                .map(|&(n, e)| (name(n), e.map(Epoch::new)))
                .collect(),
        }),
        end_by: Some(ms(end_by)),
    }
}

fn answer(engine: &mut Engine, at: u64, id: u64, answer: Answer) {
    engine.handle(
        ms(at),
        Input::Answer {
            request: RequestId(id),
            answer,
        },
    );
}

/// `lease` now led at `epoch`, its work started.
fn leader(lease: &str, epoch: u64) -> Vec<Order> {
    vec![
        Order::Publish {
            lease: name(lease),
            leadership: leading(epoch),
        },
        Order::StartWork {
            lease: name(lease),
            epoch: Epoch::new(epoch),
        },
    ]
}

/// `lease`'s term `epoch` ended for `reason`.
fn demoted(lease: &str, epoch: u64, reason: Demotion) -> Vec<Order> {
    vec![
        Order::StopWork {
            lease: name(lease),
            epoch: Epoch::new(epoch),
            reason,
        },
        Order::Publish {
            lease: name(lease),
            leadership: ended(epoch, reason, None),
        },
    ]
}

/// A lone lease `l` that acquired epoch 1 with the statement sent at 0 ms
/// (answered at 2 ms): the acquire, the watch, then the leadership.
fn lone() -> Engine {
    let mut config = Config::with_ttl(name("l"), me(), TTL);
    config.jitter = Duration::ZERO;
    let mut engine = Engine::from(LeaseState::new(config, ms(0)).unwrap());
    engine.handle(ms(0), Input::Timeout);
    // A follower's statement has no deadline to end by.
    assert_eq!(
        drain(&mut engine),
        vec![row(1, Operation::Acquire, None), Order::WatchChanges(true)]
    );
    let acquired = Reply::Acquired {
        epoch: Epoch::new(1),
    };
    answer(&mut engine, 2, 1, Answer::Row(acquired));
    assert_eq!(drain(&mut engine), leader("l", 1));
    assert_eq!(engine.deadline("l"), Some(ms(VALIDITY_MS)));
    engine
}

/// A set of `a` and `b` that surveyed twice, announced itself and holds
/// `a` at epoch 1 and `b` at epoch 4 from the acquire batch sent at
/// 2502 ms: every statement a batch ending by its give-up.
fn set() -> Engine {
    let mut template = SetConfig::with_ttl(me(), TTL);
    template.jitter = Duration::ZERO;
    let set = LeaseSet::new(template, vec![name("a"), name("b")], ms(0)).unwrap();
    let mut engine = Engine::from(set);
    engine.handle(ms(0), Input::Timeout);
    assert_eq!(
        drain(&mut engine),
        vec![batch(1, BatchKind::Survey, &[], 2_500)]
    );
    answer(&mut engine, 1, 1, Answer::Batch(BatchReply::Survey(vec![])));
    assert_eq!(
        drain(&mut engine),
        vec![batch(2, BatchKind::Acquire, &[(&member(), None)], 2_501)]
    );
    let joined = (
        member(),
        Reply::Acquired {
            epoch: Epoch::new(1),
        },
    );
    answer(
        &mut engine,
        2,
        2,
        Answer::Batch(BatchReply::Acquired(vec![joined])),
    );
    assert_eq!(drain(&mut engine), vec![]);
    engine.handle(ms(2_500), Input::Timeout);
    assert_eq!(
        drain(&mut engine),
        vec![batch(3, BatchKind::Renew, &[(&member(), Some(1))], 5_000)]
    );
    answer(
        &mut engine,
        2_501,
        3,
        Answer::Batch(BatchReply::Matched(vec![member()])),
    );
    assert_eq!(
        drain(&mut engine),
        vec![batch(4, BatchKind::Survey, &[], 5_001)]
    );
    answer(
        &mut engine,
        2_502,
        4,
        Answer::Batch(BatchReply::Survey(vec![])),
    );
    assert_eq!(
        drain(&mut engine),
        vec![batch(
            5,
            BatchKind::Acquire,
            &[("a", None), ("b", None)],
            5_002
        )]
    );
    let acquired = |lease: &str, epoch| {
        let epoch = Epoch::new(epoch);
        (lease.to_string(), Reply::Acquired { epoch })
    };
    let both = vec![acquired("a", 1), acquired("b", 4)];
    answer(
        &mut engine,
        2_503,
        5,
        Answer::Batch(BatchReply::Acquired(both)),
    );
    let mut expected = leader("a", 1);
    expected.extend(leader("b", 4));
    expected.push(Order::WatchChanges(true));
    assert_eq!(drain(&mut engine), expected);
    engine
}

#[test]
fn a_lone_lease_acquires_publishes_starts_its_work_and_renews_by_its_deadline() {
    let mut engine = lone();
    assert!(!engine.is_set());
    assert_eq!(engine.row_lease(), Some(&name("l")));
    assert_eq!(engine.poll_timeout(), Some(ms(2_500)));
    engine.handle(ms(2_500), Input::Timeout);
    // A leader's statement ends by its deadline.
    let renew = Operation::Renew {
        epoch: Epoch::new(1),
    };
    assert_eq!(drain(&mut engine), vec![row(2, renew, Some(VALIDITY_MS))]);
}

#[test]
fn a_set_surveys_then_acquires_in_batches_and_starts_each_leases_work() {
    let engine = set();
    assert!(engine.is_set());
    assert_eq!(engine.row_lease(), None, "batches name their leases");
    assert_eq!(engine.deadline("a"), Some(ms(2_502 + VALIDITY_MS)));
    assert_eq!(engine.share(ms(2_503)), Some((vec![me()], Some(2))));
    assert_eq!(engine.poll_timeout(), Some(ms(5_000)));
}

#[test]
fn a_sets_hand_over_is_a_single_row_statement_at_the_leases_epoch() {
    let mut engine = set();
    let hand_over = Input::HandOver {
        lease: Some(name("a")),
        to: Some(successor()),
    };
    engine.handle(ms(3_000), hand_over);
    assert_eq!(drain(&mut engine), demoted("a", 1, Demotion::HandedOver));
    // Nothing is written until the work has returned.
    engine.handle(ms(3_010), Input::WorkStopped(name("a")));
    let epoch = Epoch::new(1);
    assert_eq!(
        drain(&mut engine),
        vec![row(6, Operation::HandOver { epoch }, Some(5_510))]
    );
    // The driver binds the lease and the reservation from the engine.
    assert_eq!(engine.row_lease(), Some(&name("a")));
    assert_eq!(engine.successor(), successor().as_str());
    answer(&mut engine, 3_011, 6, Answer::Row(Reply::Accepted));
    let handed = Order::Publish {
        lease: name("a"),
        leadership: ended(1, Demotion::HandedOver, Some(successor())),
    };
    assert_eq!(drain(&mut engine), vec![handed]);
    assert_eq!((engine.row_lease(), engine.successor()), (None, ""));
}

#[test]
fn each_machine_ignores_the_inputs_of_the_other() {
    // A lone lease names no lease when it hands over, gives nothing up,
    // and joins its stopped work itself.
    let mut engine = lone();
    for input in [
        Input::HandOver {
            lease: Some(name("l")),
            to: Some(successor()),
        },
        Input::GiveUp(name("l")),
        Input::WorkStopped(name("l")),
    ] {
        engine.handle(ms(1_000), input);
        assert_eq!(drain(&mut engine), vec![]);
    }
    // A set's hand-over names its lease.
    let mut engine = set();
    let hand_over = Input::HandOver {
        lease: None,
        to: Some(successor()),
    };
    engine.handle(ms(3_000), hand_over);
    assert_eq!(drain(&mut engine), vec![]);
}

#[test]
fn a_lone_lease_acts_on_release_notices_of_its_own_name_only() {
    let mut engine = lone();
    let others = vec!["a".to_string(), "m".to_string()];
    engine.handle(ms(1_000), Input::ReleaseNotices(others));
    assert_eq!(drain(&mut engine), vec![]);
    let with_its_own = vec!["a".to_string(), "l".to_string()];
    engine.handle(ms(1_000), Input::ReleaseNotices(with_its_own));
    let renew = Operation::Renew {
        epoch: Epoch::new(1),
    };
    assert_eq!(drain(&mut engine), vec![row(2, renew, Some(VALIDITY_MS))]);
}

#[test]
fn notices_lost_make_a_lone_lease_try_at_once_and_a_set_survey() {
    let mut engine = lone();
    engine.handle(ms(1_000), Input::NoticesLost);
    let renew = Operation::Renew {
        epoch: Epoch::new(1),
    };
    assert_eq!(drain(&mut engine), vec![row(2, renew, Some(VALIDITY_MS))]);
    let mut engine = set();
    engine.handle(ms(3_000), Input::NoticesLost);
    assert_eq!(
        drain(&mut engine),
        vec![batch(6, BatchKind::Survey, &[], 5_500)]
    );
}

#[test]
fn a_change_is_a_lone_leases_row_or_a_sets_survey() {
    let mut engine = lone();
    assert_eq!(engine.watched_row(), Some(&name("l")));
    // No row read: nothing to tell.
    engine.handle(ms(1_000), Input::Changed(None));
    assert_eq!(drain(&mut engine), vec![]);
    // Its own row at its epoch: nothing changed for it.
    let own = LeaseRow {
        name: "l".into(),
        holder: Some("me".into()),
        epoch: Epoch::new(1),
        expires_in_ms: Some(8_000),
    };
    engine.handle(ms(1_000), Input::Changed(Some(own.clone())));
    assert_eq!(drain(&mut engine), vec![]);
    // Freed: it renews at once, and the refusal would demote it.
    let freed = LeaseRow {
        holder: None,
        expires_in_ms: None,
        ..own
    };
    engine.handle(ms(1_000), Input::Changed(Some(freed)));
    let renew = Operation::Renew {
        epoch: Epoch::new(1),
    };
    assert_eq!(drain(&mut engine), vec![row(2, renew, Some(VALIDITY_MS))]);

    let mut engine = set();
    assert_eq!(engine.watched_row(), None, "a set reads no row");
    engine.handle(ms(3_000), Input::Changed(None));
    assert_eq!(
        drain(&mut engine),
        vec![batch(6, BatchKind::Survey, &[], 5_500)]
    );
}
