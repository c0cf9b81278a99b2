//! `LeaseState` as a specification: exact command sequences for each rule
//! of DESIGN §4, on hand-picked times.

use std::time::Duration;

use picolease_core::sql::LeaseRow;
use picolease_core::{
    Command, Config, Demotion, Epoch, Failure, HolderId, Instant, Leadership, LeaseName,
    LeaseState, Operation, Reply, RequestId, Role,
};

const TTL: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000_000)
}

fn me() -> HolderId {
    HolderId::new("me").unwrap()
}

fn config() -> Config {
    let mut c = Config::with_ttl(LeaseName::new("l").unwrap(), me(), TTL);
    c.jitter = Duration::ZERO;
    c
}

fn drain(s: &mut LeaseState) -> Vec<Command> {
    std::iter::from_fn(|| s.poll_command()).collect()
}

fn execute(id: u64, operation: Operation) -> Command {
    Command::Execute {
        request: RequestId(id),
        operation,
    }
}

fn leader(epoch: u64) -> Leadership {
    Leadership {
        role: Role::Leader,
        epoch: Some(Epoch::new(epoch)),
        holder: Some(me()),
        reason: None,
    }
}

fn demoted(epoch: u64, reason: Demotion) -> Vec<Command> {
    vec![
        Command::StopWork {
            epoch: Epoch::new(epoch),
            reason,
        },
        Command::Publish(Leadership {
            role: Role::Follower,
            epoch: Some(Epoch::new(epoch)),
            holder: None,
            reason: Some(reason),
        }),
    ]
}

fn held(holder: &str, epoch: u64, left_ms: u64) -> Reply {
    Reply::Held {
        holder: Some(HolderId::new(holder).unwrap()),
        epoch: Epoch::new(epoch),
        expires_in: Duration::from_millis(left_ms),
    }
}

/// A machine that became leader at epoch 1 from an acquire sent at 0 ms and
/// answered at 2 ms.
fn leading() -> LeaseState {
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    // A running node watches the row: a follower for releases, a leader
    // for its row taken away (DESIGN §4b); neither changes it.
    assert_eq!(
        drain(&mut s),
        vec![execute(1, Operation::Acquire), Command::WatchChanges(true)]
    );
    assert!(!s.is_finished());
    s.handle_reply(
        ms(2),
        RequestId(1),
        Reply::Acquired {
            epoch: Epoch::new(1),
        },
    );
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Publish(leader(1)),
            Command::StartWork {
                epoch: Epoch::new(1)
            },
        ]
    );
    s
}

#[test]
fn an_acquire_reply_makes_a_leader_that_renews_every_interval_from_the_send() {
    let mut s = leading();
    // Deadline from the *send* time (0 ms): ttl − 1 % − 1 ms.
    assert_eq!(s.leader_deadline(), Some(ms(9_899)));
    assert_eq!(s.poll_timeout(), Some(ms(2_500)));
    s.handle_timeout(ms(2_500));
    let renew = Operation::Renew {
        epoch: Epoch::new(1),
    };
    assert_eq!(drain(&mut s), vec![execute(2, renew)]);
    s.handle_reply(ms(2_600), RequestId(2), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.leader_deadline(), Some(ms(12_399)));
    assert_eq!(s.poll_timeout(), Some(ms(5_000)));
}

#[test]
fn a_rejected_renew_demotes_with_lost_and_competes_again_at_once() {
    let mut s = leading();
    s.handle_timeout(ms(2_500));
    drain(&mut s);
    s.handle_reply(ms(2_510), RequestId(2), Reply::Rejected);
    let mut expected = demoted(1, Demotion::Lost);
    expected.push(execute(3, Operation::Acquire));
    assert_eq!(drain(&mut s), expected);
}

#[test]
fn the_leader_demotes_at_its_deadline_even_with_a_renew_in_flight() {
    let mut s = leading();
    s.handle_timeout(ms(2_500));
    drain(&mut s);
    // The renew times out; retries go out, none answered.
    s.handle_timeout(ms(5_000));
    let renew = Operation::Renew {
        epoch: Epoch::new(1),
    };
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Cancel {
                request: RequestId(2)
            },
            execute(3, renew)
        ]
    );
    s.handle_timeout(ms(7_500));
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Cancel {
                request: RequestId(3)
            },
            execute(4, renew)
        ]
    );
    assert_eq!(s.poll_timeout(), Some(ms(9_899)));
    s.handle_timeout(ms(9_899));
    assert_eq!(drain(&mut s), demoted(1, Demotion::Expired));
    // A late success for the in-flight renew does not restore leadership;
    // the machine acquires again (taking its own row back).
    s.handle_reply(ms(9_900), RequestId(4), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![execute(5, Operation::Acquire)]);
    assert!(!s.leadership().is_leader());
}

#[test]
fn stale_and_abandoned_replies_never_make_a_leader() {
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    // Request 1 times out and is abandoned; request 2 goes out.
    s.handle_timeout(ms(2_500));
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Cancel {
                request: RequestId(1)
            },
            execute(2, Operation::Acquire)
        ]
    );
    s.handle_reply(
        ms(2_600),
        RequestId(1),
        Reply::Acquired {
            epoch: Epoch::new(7),
        },
    );
    assert_eq!(drain(&mut s), vec![]);
    s.handle_reply(
        ms(2_600),
        RequestId(99),
        Reply::Acquired {
            epoch: Epoch::new(8),
        },
    );
    assert_eq!(drain(&mut s), vec![]);
    assert!(!s.leadership().is_leader());
    s.handle_reply(
        ms(2_700),
        RequestId(2),
        Reply::Acquired {
            epoch: Epoch::new(9),
        },
    );
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Publish(leader(9)),
            Command::StartWork {
                epoch: Epoch::new(9)
            },
        ]
    );
    assert_eq!(s.leader_deadline(), Some(ms(2_500 + 9_899)));
}

#[test]
fn an_acquire_answered_after_its_validity_is_not_trusted() {
    let mut c = config();
    c.request_timeout = Duration::from_millis(9_999);
    let mut s = LeaseState::new(c, ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(
        ms(9_899),
        RequestId(1),
        Reply::Acquired {
            epoch: Epoch::new(1),
        },
    );
    assert_eq!(drain(&mut s), vec![execute(2, Operation::Acquire)]);
    assert!(!s.leadership().is_leader());
}

#[test]
fn a_follower_tries_right_at_the_known_expiry_when_sooner_than_its_poll() {
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(4), RequestId(1), held("other", 3, 700));
    assert_eq!(
        drain(&mut s),
        vec![Command::Publish(Leadership {
            role: Role::Follower,
            epoch: Some(Epoch::new(3)),
            holder: Some(HolderId::new("other").unwrap()),
            reason: None,
        })]
    );
    // Sent at 0 and 700 ms left when it ran: the next attempt is sent at
    // 700, to reach the database at the expiry.
    assert_eq!(s.poll_timeout(), Some(ms(700)));
    s.handle_timeout(ms(700));
    assert_eq!(drain(&mut s), vec![execute(2, Operation::Acquire)]);
    // Same holder and epoch again: nothing new to publish; poll after an
    // interval from the send (the lease has 9 s left).
    s.handle_reply(ms(702), RequestId(2), held("other", 3, 9_000));
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.poll_timeout(), Some(ms(700 + 2_500)));
    // A new term of the same holder, or a new holder at the same epoch
    // number: each is news to watchers.
    s.handle_timeout(ms(3_200));
    drain(&mut s);
    s.handle_reply(ms(3_201), RequestId(3), held("other", 4, 9_000));
    assert!(matches!(&drain(&mut s)[..], [Command::Publish(l)] if l.epoch == Some(Epoch::new(4))));
    s.handle_timeout(ms(5_705));
    drain(&mut s);
    s.handle_reply(ms(5_706), RequestId(4), held("third", 4, 9_000));
    assert!(
        matches!(&drain(&mut s)[..], [Command::Publish(l)] if l.holder == Some(HolderId::new("third").unwrap()))
    );
}

#[test]
fn jitter_covers_its_whole_range_evenly() {
    // With 1 ns of jitter both delays occur; with 1 ms the draws spread
    // evenly over ten buckets (a seeded generator, so this is exact).
    let draws = |jitter: Duration, n: u64| {
        let mut c = config();
        c.jitter = jitter;
        let mut s = LeaseState::new(c, ms(0)).unwrap();
        let mut out = Vec::new();
        let mut now = ms(0);
        for id in 1..=n {
            s.handle_timeout(now);
            drain(&mut s);
            s.handle_reply(now, RequestId(id), held("other", 1, 60_000));
            drain(&mut s);
            let next = s.poll_timeout().unwrap();
            out.push(Duration::from_millis(2_500) - next.saturating_duration_since(now));
            now = next;
        }
        out
    };
    let tiny = draws(Duration::from_nanos(1), 64);
    assert!(tiny.contains(&Duration::ZERO) && tiny.contains(&Duration::from_nanos(1)));
    let mut buckets = [0u32; 10];
    for cut in draws(Duration::from_millis(1), 5_000) {
        buckets[(cut.as_nanos() as usize * 10 / 1_000_001).min(9)] += 1;
    }
    for b in buckets {
        assert!((400..=600).contains(&b), "{buckets:?}");
    }
}

#[test]
fn jitter_shortens_polls_within_its_bound_and_follows_the_seed() {
    let polls = |seed: u64| {
        let mut c = config();
        c.seed = seed;
        c.jitter = Duration::from_millis(250);
        let mut s = LeaseState::new(c, ms(0)).unwrap();
        let mut out = Vec::new();
        let mut now = ms(0);
        for id in 1..=20 {
            s.handle_timeout(now);
            drain(&mut s);
            s.handle_reply(now, RequestId(id), held("other", 1, 60_000));
            drain(&mut s);
            let next = s.poll_timeout().unwrap();
            out.push(next.saturating_duration_since(now));
            now = next;
        }
        out
    };
    let a = polls(1);
    assert_eq!(a, polls(1));
    assert_ne!(a, polls(2));
    for d in a {
        assert!(
            d <= Duration::from_millis(2_500) && d >= Duration::from_millis(2_250),
            "{d:?}"
        );
    }
}

#[test]
fn a_release_notice_makes_an_idle_follower_try_at_once() {
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(1), RequestId(1), held("other", 1, 9_000));
    drain(&mut s);
    s.handle_release_notice(ms(100));
    assert_eq!(drain(&mut s), vec![execute(2, Operation::Acquire)]);
    // A notice while a request is in flight: try again as soon as it ends.
    s.handle_release_notice(ms(101));
    assert_eq!(drain(&mut s), vec![]);
    s.handle_reply(ms(102), RequestId(2), held("other", 1, 8_900));
    assert_eq!(drain(&mut s), vec![execute(3, Operation::Acquire)]);
}

#[test]
fn an_observed_row_is_a_release_notice_only_when_free_lapsed_or_ours() {
    let row = |name: &str, holder: Option<&str>, left: Option<i64>| LeaseRow {
        name: name.to_string(),
        holder: holder.map(str::to_string),
        epoch: Epoch::new(1),
        expires_in_ms: left,
    };
    let idle_follower = || {
        let mut s = LeaseState::new(config(), ms(0)).unwrap();
        s.handle_timeout(ms(0));
        drain(&mut s);
        s.handle_reply(ms(1), RequestId(1), held("other", 1, 9_000));
        drain(&mut s);
        s
    };
    let lease = config().lease.to_string();
    let mine = me().to_string();
    // Held by another with time left, or another lease's row: nothing.
    for ignored in [
        row(&lease, Some("other"), Some(5_000)),
        row("another-lease", None, None),
    ] {
        let mut s = idle_follower();
        s.handle_row_observed(ms(100), &ignored);
        assert_eq!(drain(&mut s), vec![], "{ignored:?}");
    }
    // Free, lapsed, or ours (a lost acquire reply): try at once.
    for wanted in [
        row(&lease, None, None),
        row(&lease, Some("other"), Some(0)),
        row(&lease, Some("other"), Some(-20)),
        row(&lease, Some(&mine), Some(8_000)),
    ] {
        let mut s = idle_follower();
        s.handle_row_observed(ms(100), &wanted);
        assert_eq!(
            drain(&mut s),
            vec![execute(2, Operation::Acquire)],
            "{wanted:?}"
        );
    }
    // A leader: its own row at its epoch changes nothing.
    let mut s = leading();
    s.handle_row_observed(ms(1_000), &row(&lease, Some(&mine), Some(8_000)));
    assert_eq!(drain(&mut s), vec![]);
    // Any other row of its lease (freed by `release --force`, taken, at a
    // later epoch) renews at once, and the refused renewal demotes it
    // (`lost`) now, not at its next interval (DESIGN §4b).
    let later = LeaseRow {
        epoch: Epoch::new(2),
        ..row(&lease, Some(&mine), Some(8_000))
    };
    for taken in [
        row(&lease, None, None),
        row(&lease, Some("other"), Some(9_000)),
        later,
    ] {
        let mut s = leading();
        s.handle_row_observed(ms(1_000), &taken);
        let renew = Operation::Renew {
            epoch: Epoch::new(1),
        };
        assert_eq!(drain(&mut s), vec![execute(2, renew)], "{taken:?}");
        s.handle_reply(ms(1_002), RequestId(2), Reply::Rejected);
        let mut lost = demoted(1, Demotion::Lost);
        lost.push(execute(3, Operation::Acquire));
        assert_eq!(drain(&mut s), lost, "{taken:?}");
    }
}

/// A release notice of its own lease reaches a leader too (PostgreSQL's
/// `LISTEN`: an operator's forced release notifies): it renews at once,
/// or right after the statement in flight, and the refusal demotes it.
#[test]
fn a_release_notice_makes_a_leader_renew_at_once() {
    let renew = Operation::Renew {
        epoch: Epoch::new(1),
    };
    let mut s = leading();
    s.handle_release_notice(ms(1_000));
    assert_eq!(drain(&mut s), vec![execute(2, renew)]);
    s.handle_reply(ms(1_001), RequestId(2), Reply::Rejected);
    let mut lost = demoted(1, Demotion::Lost);
    lost.push(execute(3, Operation::Acquire));
    assert_eq!(drain(&mut s), lost);

    // With a renewal in flight (sent before the notice's commit, say):
    // once it is answered, another goes at once.
    let mut s = leading();
    s.handle_timeout(ms(2_500));
    assert_eq!(drain(&mut s), vec![execute(2, renew)]);
    s.handle_release_notice(ms(2_501));
    assert_eq!(drain(&mut s), vec![]);
    s.handle_reply(ms(2_502), RequestId(2), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![execute(3, renew)]);
    s.handle_reply(ms(2_504), RequestId(3), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![], "a row still its own: it leads on");
    assert!(s.leadership().is_leader());
}

#[test]
fn shutdown_stops_the_work_then_releases_then_finishes() {
    let mut s = leading();
    s.handle_shutdown(ms(1_000));
    let mut expected = demoted(1, Demotion::Released);
    expected.push(execute(
        2,
        Operation::Release {
            epoch: Epoch::new(1),
        },
    ));
    // A node shutting down watches no more.
    expected.push(Command::WatchChanges(false));
    assert_eq!(drain(&mut s), expected);
    s.handle_reply(ms(1_001), RequestId(2), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![Command::Finished]);
    assert!(s.is_finished());
    assert_eq!(s.poll_timeout(), None);
    s.handle_timeout(ms(5_000));
    assert_eq!(drain(&mut s), vec![]);
}

#[test]
fn the_release_of_a_shutdown_may_wait_for_stopping_work_until_the_deadline() {
    // The driver sends the release only once the gated work has stopped;
    // work that stops within the term must not make the core abandon the
    // release after a mere request timeout (the successor would then wait
    // out the ttl).
    let mut s = leading();
    let deadline = s.leader_deadline().expect("leading");
    let timeout = s.config().request_timeout;
    assert!(deadline > ms(1_000) + timeout, "the test needs a long term");
    s.handle_shutdown(ms(1_000));
    drain(&mut s);
    assert_eq!(s.poll_timeout(), Some(deadline));
    s.handle_timeout(ms(1_000) + timeout);
    assert_eq!(
        drain(&mut s),
        vec![],
        "not abandoned at the request timeout"
    );
    s.handle_reply(ms(1_000) + timeout * 2, RequestId(2), Reply::Accepted);
    assert_eq!(drain(&mut s), vec![Command::Finished]);
    // Past the deadline it is abandoned: the row lapses by itself anyway.
    let mut s = leading();
    let deadline = s.leader_deadline().unwrap();
    s.handle_shutdown(ms(1_000));
    drain(&mut s);
    s.handle_timeout(deadline);
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Cancel {
                request: RequestId(2)
            },
            Command::Finished
        ]
    );
}

#[test]
fn shutdown_waits_for_an_acquire_in_flight_and_gives_back_what_it_won() {
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_shutdown(ms(1));
    assert_eq!(drain(&mut s), vec![Command::WatchChanges(false)]);
    s.handle_reply(
        ms(2),
        RequestId(1),
        Reply::Acquired {
            epoch: Epoch::new(4),
        },
    );
    // Never leads: no StartWork, straight to the release.
    assert_eq!(
        drain(&mut s),
        vec![execute(
            2,
            Operation::Release {
                epoch: Epoch::new(4)
            }
        )]
    );
    s.handle_timeout(ms(2_502));
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Cancel {
                request: RequestId(2)
            },
            Command::Finished
        ]
    );
}

#[test]
fn a_follower_shuts_down_without_a_statement() {
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_shutdown(ms(0));
    assert_eq!(drain(&mut s), vec![Command::Finished]);
}

#[test]
fn a_fatal_failure_demotes_with_error_and_finishes() {
    let mut s = leading();
    s.handle_timeout(ms(2_500));
    drain(&mut s);
    s.handle_reply(ms(2_501), RequestId(2), Reply::Failed(Failure::Fatal));
    let mut expected = demoted(1, Demotion::Error);
    expected.push(Command::Finished);
    assert_eq!(drain(&mut s), expected);
}

#[test]
fn a_transient_failure_retries_an_interval_after_the_send() {
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(ms(3), RequestId(1), Reply::Failed(Failure::Transient));
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.poll_timeout(), Some(ms(2_500)));
    // A reply that does not fit the operation counts as a failure too.
    s.handle_timeout(ms(2_500));
    drain(&mut s);
    s.handle_reply(ms(2_501), RequestId(2), Reply::Accepted);
    assert_eq!(s.poll_timeout(), Some(ms(5_000)));
    assert!(!s.leadership().is_leader());
}

#[test]
fn time_going_backwards_does_not_panic_or_lead() {
    let mut s = leading();
    s.handle_timeout(ms(1));
    s.handle_reply(
        ms(0),
        RequestId(1),
        Reply::Acquired {
            epoch: Epoch::new(2),
        },
    );
    assert_eq!(drain(&mut s), vec![]);
    assert_eq!(s.leadership().leader_epoch(), Some(Epoch::new(1)));
}

// --- Stop lead g (DESIGN §4b) -------------------------------------------

/// Like [`leading`] with a stop lead of `g_ms`: deadline 9,899 ms, bound
/// 9,899 − 2,500 − 2,500 = 4,899 ms.
fn leading_with_stop_lead(g_ms: u64) -> LeaseState {
    let mut c = config();
    c.stop_lead = Duration::from_millis(g_ms);
    assert_eq!(c.stop_lead_bound(), Duration::from_millis(4_899));
    let mut s = LeaseState::new(c, ms(0)).unwrap();
    s.handle_timeout(ms(0));
    assert_eq!(
        drain(&mut s),
        vec![execute(1, Operation::Acquire), Command::WatchChanges(true)]
    );
    s.handle_reply(
        ms(2),
        RequestId(1),
        Reply::Acquired {
            epoch: Epoch::new(1),
        },
    );
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Publish(leader(1)),
            Command::StartWork {
                epoch: Epoch::new(1)
            },
        ]
    );
    s
}

/// Renewals at 2,500 and 5,000 ms time out; the third goes out at 7,500.
fn renewals_failing_until_7500(s: &mut LeaseState) {
    let renew = Operation::Renew {
        epoch: Epoch::new(1),
    };
    s.handle_timeout(ms(2_500));
    assert_eq!(drain(s), vec![execute(2, renew)]);
    for (at, id) in [(5_000, 2), (7_500, 3)] {
        s.handle_timeout(ms(at));
        assert_eq!(
            drain(s),
            vec![
                Command::Cancel {
                    request: RequestId(id)
                },
                execute(id + 1, renew)
            ]
        );
    }
}

#[test]
fn failing_renewals_stop_the_work_at_deadline_minus_g_and_demote_at_the_deadline() {
    let mut s = leading_with_stop_lead(2_000);
    renewals_failing_until_7500(&mut s);
    // deadline − g = 9,899 − 2,000.
    assert_eq!(s.poll_timeout(), Some(ms(7_899)));
    s.handle_timeout(ms(7_898));
    assert_eq!(drain(&mut s), vec![]);
    s.handle_timeout(ms(7_899));
    assert_eq!(
        drain(&mut s),
        vec![Command::StopWork {
            epoch: Epoch::new(1),
            reason: Demotion::Expired
        }]
    );
    // Still the leader for the election until the deadline.
    assert!(s.leadership().is_leader());
    assert_eq!(s.leader_deadline(), Some(ms(9_899)));
    assert_eq!(s.poll_timeout(), Some(ms(9_899)));
    s.handle_timeout(ms(9_899));
    // The follower publication, without a second StopWork.
    assert_eq!(
        drain(&mut s),
        vec![Command::Publish(Leadership {
            role: Role::Follower,
            epoch: Some(Epoch::new(1)),
            holder: None,
            reason: Some(Demotion::Expired),
        })]
    );
}

#[test]
fn a_renewal_after_the_early_stop_starts_the_work_again_for_the_same_term() {
    let mut s = leading_with_stop_lead(2_000);
    renewals_failing_until_7500(&mut s);
    s.handle_timeout(ms(7_899));
    drain(&mut s);
    s.handle_reply(ms(7_900), RequestId(4), Reply::Accepted);
    assert_eq!(
        drain(&mut s),
        vec![Command::StartWork {
            epoch: Epoch::new(1)
        }]
    );
    assert_eq!(s.leader_deadline(), Some(ms(17_399)));
    assert_eq!(s.poll_timeout(), Some(ms(10_000)));
}

#[test]
fn shutdown_after_the_early_stop_does_not_stop_the_work_twice() {
    let mut s = leading_with_stop_lead(2_000);
    renewals_failing_until_7500(&mut s);
    s.handle_timeout(ms(7_899));
    drain(&mut s);
    s.handle_shutdown(ms(8_000));
    assert_eq!(
        drain(&mut s),
        vec![
            Command::Publish(Leadership {
                role: Role::Follower,
                epoch: Some(Epoch::new(1)),
                holder: None,
                reason: Some(Demotion::Released),
            }),
            Command::WatchChanges(false)
        ]
    );
}

#[test]
fn renewals_that_succeed_even_at_the_last_moment_never_stop_the_work_early() {
    // The largest valid g, replies just inside the request timeout.
    let mut c = config();
    c.stop_lead = Duration::from_millis(4_899) - Duration::from_nanos(1);
    let mut s = LeaseState::new(c, ms(0)).unwrap();
    s.handle_timeout(ms(0));
    drain(&mut s);
    s.handle_reply(
        ms(2_499),
        RequestId(1),
        Reply::Acquired {
            epoch: Epoch::new(1),
        },
    );
    drain(&mut s);
    for round in 1..=10u64 {
        let sent = round * 2_500;
        assert_eq!(s.poll_timeout(), Some(ms(sent)), "round {round}");
        s.handle_timeout(ms(sent));
        assert_eq!(
            drain(&mut s),
            vec![execute(
                round + 1,
                Operation::Renew {
                    epoch: Epoch::new(1)
                }
            )]
        );
        let answered = Instant::from_nanos(ms(sent + 2_500).as_nanos() - 1);
        s.handle_timeout(answered);
        s.handle_reply(answered, RequestId(round + 1), Reply::Accepted);
        assert_eq!(drain(&mut s), vec![], "round {round}");
    }
    assert!(s.leadership().is_leader());
}

#[test]
fn a_stop_lead_beyond_the_bound_is_refused_naming_g_and_the_bound() {
    let mut c = config();
    c.stop_lead = Duration::from_millis(4_899);
    let err = LeaseState::new(c, ms(0)).unwrap_err();
    assert_eq!(
        err,
        picolease_core::ConfigError::StopLeadTooLong {
            stop_lead: Duration::from_millis(4_899),
            bound: Duration::from_millis(4_899),
        }
    );
    let text = err.to_string();
    assert!(
        text.starts_with("stop lead 4.899s must be less than 4.899s"),
        "{text}"
    );
}

/// DESIGN §4b: on SQLite the database clock is the host's wall clock. A
/// step larger than ρ·ttl (100 ms here) demotes the leader with `clock`
/// before anything else, and it tries again at once; readings the local
/// clock can explain, a long busy wait included, change nothing.
#[test]
fn a_stepped_database_clock_demotes_the_leader_with_clock() {
    const DB: i64 = 1_800_000_000_000;
    let stepped = |step_ms: i64| {
        let mut s = leading();
        assert!(!s.handle_db_clock(ms(2), ms(1), DB));
        // 2.5 s later locally; the database clock says 2.5 s + step.
        let moved = s.handle_db_clock(ms(2_502), ms(2_501), DB + 2_500 + step_ms);
        (moved, drain(&mut s))
    };
    let demoted = vec![
        Command::StopWork {
            epoch: Epoch::new(1),
            reason: Demotion::Clock,
        },
        Command::Publish(Leadership {
            role: Role::Follower,
            epoch: Some(Epoch::new(1)),
            holder: None,
            reason: Some(Demotion::Clock),
        }),
        execute(2, Operation::Acquire),
    ];
    for step in [10_000, 150, -150, -60_000] {
        assert_eq!(stepped(step), (true, demoted.clone()), "step {step} ms");
    }
    // Within ρ·ttl and the resolution: not a step.
    for step in [0, 90, -90] {
        assert_eq!(stepped(step), (false, vec![]), "step {step} ms");
    }
    // A statement that waited 800 ms in a busy handler read the clock late:
    // the window runs from the earlier reply to the later reply.
    let mut s = leading();
    s.handle_db_clock(ms(2), ms(1), DB);
    assert!(!s.handle_db_clock(ms(3_302), ms(2_501), DB + 3_300));
    assert_eq!(drain(&mut s), vec![]);
    // A follower only reports it.
    let mut s = LeaseState::new(config(), ms(0)).unwrap();
    s.handle_db_clock(ms(2), ms(1), DB);
    assert!(s.handle_db_clock(ms(502), ms(501), DB - 5_000));
    // (A new machine's first command: it watches, as a running follower.)
    assert_eq!(drain(&mut s), vec![Command::WatchChanges(true)]);
}

/// A lease may not take a name in picolease's own namespaces (issue 44):
/// `picolease handover --name X` writes `picolease.handover:X` and its
/// withdrawal deletes it, so a lease of that name would be overwritten.
/// The same for a lease set's leases; the set's own membership row is the
/// one machine in such a namespace.
#[test]
fn names_in_picoleases_own_namespaces_are_refused_as_leases() {
    use picolease_core::{ConfigError, LeaseSet, SetConfig};
    for reserved in [
        "picolease.handover:jobs",
        "picolease.preferred:jobs",
        "picolease.member:web-1",
    ] {
        let mut c = config();
        c.lease = LeaseName::new(reserved).unwrap();
        match LeaseState::new(c, ms(0)) {
            Err(e @ ConfigError::ReservedLease { .. }) => {
                assert!(e.to_string().contains(reserved), "{e}")
            }
            other => panic!("{reserved}: {:?}", other.map(|_| ())),
        }
        let set = LeaseSet::new(
            SetConfig::with_ttl(me(), TTL),
            vec![
                LeaseName::new("a").unwrap(),
                LeaseName::new(reserved).unwrap(),
            ],
            ms(0),
        );
        assert!(
            matches!(set, Err(ConfigError::ReservedLease { .. })),
            "{reserved} in a set"
        );
    }
    // Near misses are ordinary names, and a set starts with its own row.
    let mut c = config();
    c.lease = LeaseName::new("picolease.handover").unwrap();
    assert!(LeaseState::new(c, ms(0)).is_ok());
    let set = LeaseSet::new(
        SetConfig::with_ttl(me(), TTL),
        vec![LeaseName::new("a").unwrap()],
        ms(0),
    );
    assert!(set.is_ok());
}
