//! Unit tests of the shared output side (`publish.rs`).
use super::*;
use crate::subscription::{RecvError, SUBSCRIPTION_CAPACITY};
use crate::Snapshot;
use picolease_core::{Epoch, Role};

fn lease() -> LeaseName {
    LeaseName::new("jobs").unwrap()
}

fn leading(epoch: u64) -> Leadership {
    Leadership {
        role: Role::Leader,
        epoch: Some(Epoch::new(epoch)),
        holder: None,
        reason: None,
    }
}

#[test]
fn a_subscriber_sees_every_change_in_order_then_closed() {
    let publisher = Arc::new(Publisher::new(crate::clock::system(), lease()));
    let mut sub = publisher.subscribe();
    for epoch in 1..=3 {
        publisher.publish(leading(epoch));
    }
    publisher.finish();
    let epochs: Vec<u64> = sub
        .by_ref()
        .map(|t| t.unwrap().leadership.epoch.unwrap().get())
        .collect();
    assert_eq!(epochs, [1, 2, 3]);
    assert_eq!(sub.try_recv(), Err(RecvError::Closed));
    assert_eq!(publisher.published(), leading(3));
}

#[test]
fn a_subscriber_that_never_reads_is_bounded_and_told_what_it_missed() {
    let publisher = Arc::new(Publisher::new(crate::clock::system(), lease()));
    let mut sub = publisher.subscribe();
    let extra = 10u64;
    for epoch in 0..(SUBSCRIPTION_CAPACITY as u64 + extra) {
        publisher.publish(leading(epoch));
    }
    assert_eq!(sub.pending(), SUBSCRIPTION_CAPACITY, "memory stays bounded");
    assert_eq!(sub.try_recv(), Err(RecvError::Lagged(extra)));
    // Then the oldest change still kept, and on in order.
    let next = sub.try_recv().unwrap();
    assert_eq!(next.leadership.epoch, Some(Epoch::new(extra)));
    let next = sub.recv_timeout(Duration::ZERO).unwrap();
    assert_eq!(next.leadership.epoch, Some(Epoch::new(extra + 1)));
}

#[test]
fn a_dropped_subscription_is_forgotten_and_a_late_one_is_closed() {
    let publisher = Arc::new(Publisher::new(crate::clock::system(), lease()));
    drop(publisher.subscribe());
    publisher.publish(leading(1));
    assert!(lock(&publisher.subscribers).is_empty());
    publisher.finish();
    let mut late = publisher.subscribe();
    assert_eq!(
        late.recv_timeout(Duration::from_secs(1)),
        Err(RecvError::Closed)
    );
    assert!(publisher.is_finished());
}

#[test]
fn renew_latencies_keep_the_most_recent() {
    let publisher = Arc::new(Publisher::new(crate::clock::system(), lease()));
    for ms in 0..(RENEW_SAMPLES as u64 + 5) {
        publisher.record_renewal(Duration::from_millis(ms));
    }
    let kept = publisher.renew_latencies();
    assert_eq!(kept.len(), RENEW_SAMPLES);
    assert_eq!(kept[0], Duration::from_millis(5));
}

#[test]
fn an_async_reader_wakes_on_publication() {
    let publisher = Arc::new(Publisher::new(crate::clock::system(), lease()));
    let mut sub = publisher.subscribe();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let theirs = Arc::clone(&publisher);
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        theirs.publish(leading(7));
    });
    let got =
        runtime.block_on(async { tokio::time::timeout(Duration::from_secs(10), sub.recv()).await });
    writer.join().unwrap();
    assert_eq!(got.unwrap().unwrap().leadership.epoch, Some(Epoch::new(7)));
}

fn attached_config() -> Config {
    Config::with_ttl(
        picolease_core::LeaseName::new("m").unwrap(),
        HolderId::new("me").unwrap(),
        Duration::from_secs(1),
    )
}

/// A publisher attached with a Prometheus recorder of its own, and a
/// reader of one series' value as that recorder renders it.
#[cfg(feature = "metrics")]
fn recorded() -> (Arc<Publisher>, impl Fn(&str) -> Option<f64>) {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let publisher = Arc::new(Publisher::new(crate::clock::system(), lease()));
    metrics::with_local_recorder(&recorder, || publisher.attach(&attached_config()));
    let value = move |series: &str| -> Option<f64> {
        handle
            .render()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    };
    (publisher, value)
}

#[cfg(feature = "metrics")]
#[test]
fn metrics_are_registered_at_zero_and_follow_the_output_side() {
    let (publisher, value) = recorded();
    let renews = r#"picolease_statement_duration_seconds_count{lease="m",statement="renew"}"#;
    let to_leader = r#"picolease_transitions_total{lease="m",to="leader",reason="acquired"}"#;
    let lost = r#"picolease_transitions_total{lease="m",to="follower",reason="lost"}"#;
    let timeouts =
        r#"picolease_statement_failures_total{lease="m",statement="renew",kind="timeout"}"#;
    // Every series at zero before any event.
    assert_eq!(value(r#"picolease_leader{lease="m"}"#), Some(0.0));
    assert_eq!(value(r#"picolease_epoch{lease="m"}"#), Some(0.0));
    assert_eq!(
        value(r#"picolease_lease_remaining_seconds{lease="m"}"#),
        Some(0.0)
    );
    assert_eq!(value(to_leader), Some(0.0));
    assert_eq!(value(lost), Some(0.0));
    assert_eq!(value(timeouts), Some(0.0));

    publisher.publish(leading(4));
    publisher.set_deadline(Some(publisher.now() + Duration::from_millis(800)));
    let renew = Operation::Renew {
        epoch: Epoch::new(4),
    };
    publisher.record_statement(renew, Duration::from_millis(2), Outcome::Answered);
    publisher.record_statement(renew, Duration::from_millis(1), Outcome::Answered);
    publisher.record_statement(renew, Duration::from_millis(250), Outcome::Timeout);
    assert_eq!(value(r#"picolease_leader{lease="m"}"#), Some(1.0));
    assert_eq!(value(r#"picolease_epoch{lease="m"}"#), Some(4.0));
    assert_eq!(value(to_leader), Some(1.0));
    assert_eq!(value(renews), Some(2.0), "a timeout has no duration");
    assert_eq!(value(timeouts), Some(1.0));
    let left = value(r#"picolease_lease_remaining_seconds{lease="m"}"#).unwrap();
    assert!(left > 0.5 && left <= 0.8, "{left}");

    publisher.publish(Leadership {
        role: Role::Follower,
        epoch: Some(Epoch::new(4)),
        holder: None,
        reason: Some(picolease_core::Demotion::Lost),
    });
    publisher.set_deadline(None);
    assert_eq!(value(r#"picolease_leader{lease="m"}"#), Some(0.0));
    assert_eq!(value(lost), Some(1.0));
    assert_eq!(
        value(r#"picolease_lease_remaining_seconds{lease="m"}"#),
        Some(0.0)
    );
    // The same term published again is not a new transition.
    publisher.publish(leading(5));
    publisher.publish(leading(5));
    assert_eq!(value(to_leader), Some(2.0));
}

/// `picolease_handovers_total{result}`: at zero before any handover; the
/// second publication of a handover (naming the reservation) counts
/// `reserved`, a refused hand-over statement `refused`, a failed one
/// `failed`; the demotion itself is a `handover` transition.
#[cfg(feature = "metrics")]
#[test]
fn handovers_are_counted_by_result() {
    let (publisher, value) = recorded();
    let result = |r: &str| format!(r#"picolease_handovers_total{{lease="m",result="{r}"}}"#);
    let demoted = r#"picolease_transitions_total{lease="m",to="follower",reason="handover"}"#;
    for r in ["reserved", "refused", "failed"] {
        assert_eq!(value(&result(r)), Some(0.0), "{r}");
    }

    publisher.publish(leading(3));
    let handed = |holder: Option<&str>| Leadership {
        role: Role::Follower,
        epoch: Some(Epoch::new(3)),
        holder: holder.map(|node| HolderId::reserved_for(node).unwrap()),
        reason: Some(picolease_core::Demotion::HandedOver),
    };
    publisher.publish(handed(None));
    assert_eq!(value(demoted), Some(1.0));
    assert_eq!(value(&result("reserved")), Some(0.0), "not yet reserved");
    publisher.publish(handed(Some("web-4")));
    assert_eq!(value(&result("reserved")), Some(1.0));
    assert_eq!(value(demoted), Some(1.0), "one transition");

    let hand_over = Operation::HandOver {
        epoch: Epoch::new(3),
    };
    publisher.record_statement(hand_over, Duration::from_millis(3), Outcome::Answered);
    publisher
        .series()
        .expect("attached")
        .hand_over_answered(Some(&picolease_core::engine::Answer::Row(
            picolease_core::Reply::Rejected,
        )));
    // Given up past the request timeout: no answer (as `Runner::record`
    // reports it).
    publisher.record_statement(hand_over, Duration::from_millis(250), Outcome::Timeout);
    publisher
        .series()
        .expect("attached")
        .hand_over_answered(None);
    assert_eq!(value(&result("refused")), Some(1.0));
    assert_eq!(value(&result("failed")), Some(1.0));
    assert_eq!(value(&result("reserved")), Some(1.0));
}

#[test]
fn the_snapshot_shows_role_holder_progress_and_success() {
    let publisher = Arc::new(Publisher::new(crate::clock::system(), lease()));
    let view = crate::LeaseView::new(attached_config(), Arc::clone(&publisher));
    let snapshot = view.snapshot();
    assert_eq!(snapshot.lease.as_str(), "m");
    assert_eq!(snapshot.me.as_str(), "me");
    assert!(!snapshot.is_leader() && snapshot.epoch.is_none());
    assert_eq!(snapshot.last_success, None);
    // interval 250 ms + 2 × 250 ms + max(250 ms, 100 ms).
    assert_eq!(snapshot.stall_after, Duration::from_millis(1_000));
    assert!(!snapshot.is_wedged());

    publisher.record_statement(Operation::Acquire, Duration::ZERO, Outcome::Answered);
    publisher.publish(leading(2));
    publisher.set_deadline(Some(publisher.now() + Duration::from_secs(1)));
    let snapshot = view.snapshots().snapshot();
    assert!(snapshot.is_leader());
    assert_eq!(snapshot.epoch, Some(Epoch::new(2)));
    assert!(snapshot.last_success.is_some());
    assert!(snapshot.time_left.is_some_and(|left| left > Duration::ZERO));
    // A failure is progress, not success.
    std::thread::sleep(Duration::from_millis(20));
    publisher.record_statement(Operation::Acquire, Duration::ZERO, Outcome::Transient);
    let snapshot = crate::Snapshots::<crate::LeaseView>::new(crate::snapshots::LoneReader(
        Arc::clone(&publisher),
    ))
    .snapshot();
    assert!(snapshot.since_progress < snapshot.since_success.unwrap());
    let stalled = Snapshot {
        since_progress: Duration::from_millis(1_001),
        ..snapshot.clone()
    };
    assert!(stalled.is_wedged());
    assert!(!Snapshot {
        finished: true,
        ..stalled
    }
    .is_wedged());
}

/// A clock that moves only when told.
#[derive(Default)]
struct StillClock(Mutex<Duration>);

impl crate::clock::Clock for StillClock {
    fn now(&self) -> Duration {
        *lock(&self.0)
    }
}

/// Every reading of leadership turns at the deadline by itself, with no
/// publication after it (the loop late: resumed, starved, blocked), and
/// so does a leader published with no deadline to check.
#[test]
fn a_leader_reads_as_follower_once_its_deadline_passes_without_a_publication() {
    let clock = Arc::new(StillClock::default());
    let publisher = Arc::new(Publisher::new(clock.clone(), lease()));
    let view = crate::LeaseView::new(attached_config(), Arc::clone(&publisher));
    publisher.publish(leading(7));
    assert!(
        !view.leadership().is_leader(),
        "a leader with no deadline known is not relied on"
    );
    let deadline = Duration::from_secs(10);
    publisher.set_deadline(Some(deadline));
    *lock(&clock.0) = deadline - Duration::from_nanos(1);
    assert!(view.leadership().is_leader());
    assert!(view.snapshot().is_leader());
    assert_eq!(view.time_left(), Some(Duration::from_nanos(1)));
    *lock(&clock.0) = deadline;
    let read = view.leadership();
    assert_eq!(
        read,
        Leadership {
            role: Role::Follower,
            epoch: Some(Epoch::new(7)),
            holder: None,
            reason: Some(picolease_core::Demotion::Expired),
        }
    );
    assert!(!view.snapshot().is_leader());
    assert_eq!(view.snapshot().time_left, Some(Duration::ZERO));
    assert!(view.leader_until().is_none());
    assert_eq!(publisher.published(), leading(7), "the loop's word is kept");
    assert!(
        view.watch().borrow().is_leader(),
        "and the watch carries it"
    );
}

/// A blocking wait for the end of a term wakes at the deadline, with no
/// publication to wake it (it used to sleep out its whole timeout).
#[test]
fn wait_for_wakes_at_the_deadline() {
    let publisher = Arc::new(Publisher::new(crate::clock::system(), lease()));
    publisher.publish(leading(2));
    let left = Duration::from_millis(100);
    publisher.set_deadline(Some(publisher.now() + left));
    let started = std::time::Instant::now();
    let timeout = Duration::from_secs(30);
    let met = publisher.wait_for(timeout, |l| !l.is_leader());
    assert_eq!(
        met.and_then(|l| l.reason),
        Some(picolease_core::Demotion::Expired)
    );
    let took = started.elapsed();
    assert!(took >= left && took < timeout / 2, "{took:?}");
}

/// A scrape's refresh brings the leader gauge to the deadline's word.
#[cfg(feature = "metrics")]
#[test]
fn refreshed_metrics_say_a_leader_past_its_deadline_is_not() {
    let (publisher, value) = recorded();
    publisher.publish(leading(4));
    publisher.set_deadline(Some(publisher.now() + Duration::from_millis(20)));
    publisher.refresh_metrics();
    assert_eq!(value(r#"picolease_leader{lease="m"}"#), Some(1.0));
    std::thread::sleep(Duration::from_millis(25));
    assert_eq!(
        value(r#"picolease_leader{lease="m"}"#),
        Some(1.0),
        "as of the loop's last step"
    );
    publisher.refresh_metrics();
    assert_eq!(value(r#"picolease_leader{lease="m"}"#), Some(0.0));
    assert_eq!(
        value(r#"picolease_lease_remaining_seconds{lease="m"}"#),
        Some(0.0)
    );
}

/// A set's member keeps no handles (its series are looked up by name at
/// each change): its publication and the refresh both reach its lease's
/// leader gauge, the refresh with the deadline's word.
#[cfg(feature = "metrics")]
#[test]
fn a_set_members_refresh_turns_its_leases_gauge_at_the_deadline() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let member = Publisher::member(
        crate::clock::system(),
        &attached_config(),
        Arc::new(crate::subscription::Fanout::for_leases(1)),
        Health::shared(),
        Arc::default(),
    );
    let gauge = || {
        handle.render().lines().find_map(|l| {
            l.strip_prefix(r#"picolease_leader{lease="m"}"#)?
                .trim()
                .parse::<f64>()
                .ok()
        })
    };
    member.set_deadline(Some(member.now() + Duration::from_millis(20)));
    metrics::with_local_recorder(&recorder, || {
        member.publish(leading(3));
        member.refresh_metrics();
    });
    assert_eq!(gauge(), Some(1.0));
    std::thread::sleep(Duration::from_millis(25));
    metrics::with_local_recorder(&recorder, || member.refresh_metrics());
    assert_eq!(gauge(), Some(0.0));
}
