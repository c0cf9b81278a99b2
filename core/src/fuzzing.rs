//! Fuzz bodies (feature `fuzzing`): the code each `cargo fuzz` target runs,
//! kept in the library so that a normal build compiles it and a stable
//! `cargo test` replays the committed corpus through it (the targets in
//! `fuzz/fuzz_targets/` are three lines each).
//!
//! - [`lease_state::run`] — an arbitrary configuration and an arbitrary
//!   sequence of inputs (timeouts at monotone or, in a second mode, arbitrary
//!   instants; replies with the right, stale, future or random request id
//!   and every [`crate::Reply`] variant; shutdowns; release notices) fed to
//!   one [`crate::LeaseState`], checking the contract after every step.
//! - [`lease_set::run`] — arbitrary batch results (grants, refusals and
//!   omissions per lease, any subset matched, any survey rows), notices,
//!   stopped work, give-ups, database-clock readings and shutdowns fed to
//!   one [`crate::LeaseSet`] of three leases, checking the set's contract
//!   (DESIGN §9) after every step.
//! - [`decode::run`] — arbitrary rows of [`crate::sql::Cell`]s into the
//!   decoders, arbitrary strings into the name validators, arbitrary
//!   durations into [`crate::Config::validate`]: never a panic, and every
//!   accepted value means what the type promises.
//!
//! Every body takes the raw fuzzer bytes and panics on a broken invariant;
//! running out of bytes simply ends the input.

pub mod decode;
pub mod lease_set;
pub mod lease_state;

/// A fuzz body: the raw fuzzer bytes in, a panic on a broken invariant.
pub type Body = fn(&[u8]);

/// Every fuzz target by name (the name of its folder under `fuzz/corpus/`
/// and of its file under `fuzz/fuzz_targets/`), with its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("lease_state", lease_state::run),
    ("lease_set", lease_set::run),
    ("decode", decode::run),
];

/// Runs `execute` twice on the same bytes and checks that it gave the same
/// commands both times (determinism, DESIGN §6), for the bodies that drive
/// a machine.
fn deterministic<T: PartialEq + std::fmt::Debug>(data: &[u8], execute: fn(&[u8]) -> T) {
    let first = execute(data);
    let second = execute(data);
    assert_eq!(first, second, "same inputs, different commands");
}
