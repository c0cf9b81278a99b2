//! Each planted bug is found by the model checker, and the shortest trace
//! it reports replays to the same violation (feature `mutants`):
//!
//! `cargo test -p picolease-core --features mutants --test check_mutants`

use picolease_core::check::{check, replay, Bounds, Budget, Property};
use picolease_core::Mutation;

fn finds(mutation: Mutation, faults: usize, expected: Property) {
    let mut bounds = Bounds::default_for(2);
    bounds.mutation = mutation;
    bounds.faults = faults;
    let budget = Budget {
        stop_at_first_violation: true,
        ..Budget::default()
    };
    let report = check(&bounds, budget, |_| {}).expect("valid bounds");
    println!("{mutation:?}: {report}");
    let found = report
        .violations
        .first()
        .unwrap_or_else(|| panic!("{mutation:?} not found: {report}"));
    assert_eq!(found.property, expected, "{found}");
    let replayed = replay(&found.trace, &bounds).expect("the trace replays");
    assert_eq!(replayed.violation.as_ref(), Some(found), "{replayed}");
}

/// (a) The deadline from the reply: a leader outlives its row.
#[test]
fn deadline_from_the_reply_is_found() {
    finds(Mutation::DeadlineFromReply, 1, Property::Validity);
}

/// (b) No deadline: a paused leader resumes past its row's expiry and
/// still leads.
#[test]
fn no_deadline_is_found() {
    finds(Mutation::NoDeadline, 1, Property::Validity);
}

/// (c) A stale reply taken for the request in flight.
#[test]
fn a_stale_reply_accepted_is_found() {
    finds(Mutation::StaleReplyAccepted, 1, Property::Validity);
}

/// (d) Renew without the epoch condition (model database): needs two
/// faults, a stray acquire and one that lets its node win the row.
#[test]
fn renew_without_the_epoch_condition_is_found() {
    finds(Mutation::RenewIgnoresEpoch, 2, Property::Validity);
}

/// (e) Work not stopped on demotion.
#[test]
fn work_kept_on_demotion_is_found() {
    finds(Mutation::WorkKeptOnDemotion, 1, Property::Gating);
}

/// The real machine at the same bounds as (d): the residual risk a stray
/// acquire opens is closed by the next renew, so nothing is found within
/// the first 24 steps, the depth at which (d) shows (the full 2-fault
/// space is far larger).
#[test]
fn the_real_machine_survives_a_stray_acquire() {
    let mut bounds = Bounds::default_for(2);
    bounds.faults = 2;
    bounds.depth = 24;
    let report = check(&bounds, Budget::default(), |_| {}).expect("valid bounds");
    println!("{report}");
    assert!(report.violations.is_empty(), "{report}");
}
