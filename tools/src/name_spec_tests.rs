//! Unit tests of `name_spec.rs`: what every form of `--name` expands to,
//! within its limits (what it refuses: `name_spec_error_tests.rs`).

use std::time::{Duration, Instant};

use super::*;

pub(super) fn expand(specs: &[&str]) -> Result<Vec<String>, NameSpecError> {
    let specs: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
    expand_names(&specs)
}

pub(super) fn ok(specs: &[&str]) -> Vec<String> {
    expand(specs).unwrap_or_else(|e| panic!("{specs:?}: {e}"))
}

pub(super) fn err(specs: &[&str]) -> NameSpecError {
    match expand(specs) {
        Ok(names) => panic!("{specs:?} expanded to {} names", names.len()),
        Err(e) => e,
    }
}

pub(super) fn message(specs: &[&str]) -> String {
    err(specs).to_string()
}

#[test]
fn no_specs_no_names() {
    assert_eq!(ok(&[]), Vec::<String>::new());
}

#[test]
fn plain_names_are_kept_as_is_in_order() {
    assert_eq!(ok(&["b"]), ["b"]);
    assert_eq!(ok(&["b", "a", "c"]), ["b", "a", "c"]);
    assert_eq!(
        ok(&["with space", "dots..here", "é-ü", "a/b:c"]),
        ["with space", "dots..here", "é-ü", "a/b:c"]
    );
}

#[test]
fn a_range_substitutes_each_number() {
    assert_eq!(ok(&["s{0..3}"]), ["s0", "s1", "s2", "s3"]);
    assert_eq!(
        ok(&["shard-{8..10}-x"]),
        ["shard-8-x", "shard-9-x", "shard-10-x"]
    );
    assert_eq!(ok(&["{1..3}"]), ["1", "2", "3"]);
    assert_eq!(ok(&["{1..2}-tail"]), ["1-tail", "2-tail"]);
    assert_eq!(ok(&["head{1..2}"]), ["head1", "head2"]);
    assert_eq!(ok(&["x{7..7}y"]), ["x7y"]);
    assert_eq!(ok(&["{0..0}"]), ["0"]);
}

#[test]
fn a_range_without_leading_zero_is_not_padded() {
    let names = ok(&["{0..10}"]);
    assert_eq!(names.len(), 11);
    assert_eq!(names[0], "0");
    assert_eq!(names[9], "9");
    assert_eq!(names[10], "10");
    assert_eq!(ok(&["{8..10}"]), ["8", "9", "10"]);
    // A single "0" is not a leading zero; B's zeros do not count.
    assert_eq!(ok(&["{0..010}"]).len(), 11);
    assert_eq!(ok(&["{0..010}"])[10], "10");
    assert_eq!(ok(&["{9..0010}"]), ["9", "10"]);
}

#[test]
fn a_leading_zero_pads_to_the_start_width() {
    let names = ok(&["{00..99}"]);
    assert_eq!(names.len(), 100);
    assert_eq!(names[0], "00");
    assert_eq!(names[7], "07");
    assert_eq!(names[99], "99");
    assert_eq!(ok(&["{007..010}"]), ["007", "008", "009", "010"]);
    assert_eq!(ok(&["n{00..00}"]), ["n00"]);
    assert_eq!(ok(&["s-{01..03}.x"]), ["s-01.x", "s-02.x", "s-03.x"]);
    // Numbers wider than the start keep all their digits.
    assert_eq!(ok(&["{08..100}"])[..3], ["08", "09", "10"]);
    assert_eq!(ok(&["{08..100}"])[92], "100");
    assert_eq!(ok(&["{098..101}"]), ["098", "099", "100", "101"]);
}

#[test]
fn specs_expand_one_after_another_in_order() {
    assert_eq!(
        ok(&["z", "s{2..3}", "a", "t{01..02}"]),
        ["z", "s2", "s3", "a", "t01", "t02"]
    );
}

#[test]
fn ranges_reach_the_top_of_u64() {
    let max = u64::MAX;
    assert_eq!(
        ok(&[&format!("n{{{}..{max}}}", max - 1)]),
        [format!("n{}", max - 1), format!("n{max}")]
    );
}

#[test]
fn padding_makes_names_distinct() {
    // "s1" and "s01" are different names.
    assert_eq!(ok(&["s{1..2}", "s{01..02}"]), ["s1", "s2", "s01", "s02"]);
    assert_eq!(
        err(&["s{01..02}", "s02"]),
        NameSpecError::Duplicate {
            spec: "s02".to_owned(),
            name: "s02".to_owned(),
            first: "s{01..02}".to_owned(),
        }
    );
}

#[test]
fn exactly_max_names_is_allowed() {
    let names = ok(&["{1..100000}"]);
    assert_eq!(names.len(), MAX_NAMES);
    assert_eq!(names[0], "1");
    assert_eq!(names[MAX_NAMES - 1], "100000");
    assert_eq!(ok(&["{00000..99999}"]).len(), MAX_NAMES);
    assert_eq!(ok(&["a{1..99999}", "b"]).len(), MAX_NAMES);
    assert_eq!(ok(&["a{1..50000}", "b{1..50000}"]).len(), MAX_NAMES);
}

#[test]
fn one_more_than_max_names_is_an_error() {
    assert_eq!(
        err(&["{0..100000}"]),
        NameSpecError::TooMany {
            spec: "{0..100000}".to_owned(),
            total: 100_001,
        }
    );
    assert_eq!(
        err(&["a{1..99999}", "b", "c"]),
        NameSpecError::TooMany {
            spec: "c".to_owned(),
            total: 100_001,
        }
    );
    assert_eq!(
        err(&["a{1..50000}", "b{0..50000}"]),
        NameSpecError::TooMany {
            spec: "b{0..50000}".to_owned(),
            total: 100_001,
        }
    );
    assert_eq!(
        message(&["{0..100000}"]),
        "--name \"{0..100000}\": 100001 lease names in total, more than the limit of 100000"
    );
}

#[test]
fn a_huge_range_fails_fast() {
    let started = Instant::now();
    assert_eq!(
        err(&["s{0..99999999999}"]),
        NameSpecError::TooMany {
            spec: "s{0..99999999999}".to_owned(),
            total: 100_000_000_000,
        }
    );
    // The whole of u64: 2^64 names, counted without overflow.
    let all = format!("s{{0..{}}}", u64::MAX);
    assert_eq!(
        err(&[&all]),
        NameSpecError::TooMany {
            spec: all.clone(),
            total: 1 << 64,
        }
    );
    let top = format!("s{{{}..{}}}", u64::MAX - 200_000, u64::MAX);
    assert!(matches!(err(&[&top]), NameSpecError::TooMany { .. }));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
}
