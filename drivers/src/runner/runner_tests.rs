//! Unit tests of `Runner` (`runner.rs`).
use super::*;

use crate::runner::{test_template as template, NoWork};
use crate::set::SetView;
use picolease_core::LeaseSet;

fn runner() -> (Runner<NoWork>, SetView) {
    let set = LeaseSet::new(
        template(),
        vec![LeaseName::new("a").unwrap(), LeaseName::new("b").unwrap()],
        picolease_core::Instant::ZERO,
    )
    .unwrap();
    Runner::new(
        set,
        crate::clock::system(),
        Arc::new(Fanout::for_leases(2)),
        |_, _| NoWork,
    )
}

#[test]
fn carry_out_stamps_the_last_step_with_the_sets_bound() {
    let (mut runner, view) = runner();
    let snapshots = view.snapshots();
    let started = snapshots.snapshot();
    assert_eq!(
        started.stall_after,
        crate::publish::stall_after(&template())
    );
    let first = started.last_step.expect("stamped at the start");
    assert!(!started.is_wedged());
    std::thread::sleep(Duration::from_millis(5));
    runner.handle(crate::runner::Input::Timeout);
    assert!(
        runner.carry_out().execute.is_some(),
        "the first batch goes out"
    );
    let stepped = snapshots.snapshot();
    assert!(stepped.last_step.unwrap() > first);
    assert!(stepped.since_progress() < started.stall_after);
    assert!(!stepped.is_wedged());
}

#[test]
fn every_lease_is_known_from_the_start_and_a_finished_set_closes_its_subscribers() {
    let (mut runner, view) = runner();
    let a = LeaseName::new("a").unwrap();
    assert_eq!(
        view.leadership(&a),
        Some(picolease_core::Leadership::unknown())
    );
    assert_eq!(view.leadership(&LeaseName::new("z").unwrap()), None);
    let mut subscription = view.subscribe();
    runner.stop_all();
    assert!(runner.has_stopped());
    runner.finish();
    assert_eq!(
        subscription.recv_timeout(Duration::from_secs(1)),
        Err(crate::RecvError::Closed)
    );
    assert!(view.snapshot().finished);
    assert!(view.watch().borrow().is_empty());
    let mut late = view.subscribe();
    assert_eq!(late.try_recv(), Err(crate::RecvError::Closed));
}
