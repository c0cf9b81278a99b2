//! Unit tests of `name_spec.rs`: what every form of `--name` expands to,
//! and what it refuses.

use std::time::{Duration, Instant};

use super::*;

fn expand(specs: &[&str]) -> Result<Vec<String>, NameSpecError> {
    let specs: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
    expand_names(&specs)
}

fn ok(specs: &[&str]) -> Vec<String> {
    expand(specs).unwrap_or_else(|e| panic!("{specs:?}: {e}"))
}

fn err(specs: &[&str]) -> NameSpecError {
    match expand(specs) {
        Ok(names) => panic!("{specs:?} expanded to {} names", names.len()),
        Err(e) => e,
    }
}

fn message(specs: &[&str]) -> String {
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
fn an_empty_spec_is_an_error() {
    assert_eq!(err(&[""]), NameSpecError::Empty);
    assert_eq!(err(&["a", ""]), NameSpecError::Empty);
    assert_eq!(message(&[""]), "--name \"\": a lease name cannot be empty");
}

#[test]
fn unmatched_and_nested_braces_are_errors() {
    for spec in [
        "{",
        "}",
        "a{",
        "a}",
        "{a",
        "}a",
        "a}b{1..2}",
        "{1..2",
        "1..2}",
        "{1..2}}",
        "{{1..2}",
        "{{1..2}}",
        "a{1{..}2}",
        "}{",
    ] {
        match err(&[spec]) {
            NameSpecError::Brace { spec: s, .. } => assert_eq!(s, spec),
            other => panic!("{spec:?}: {other:?}"),
        }
    }
    assert_eq!(
        message(&["s{1..2"]),
        "--name \"s{1..2\": a '{' without its '}'; a range is written like {0..9}"
    );
    assert_eq!(
        message(&["s1..2}"]),
        "--name \"s1..2}\": a '}' without its '{'; a range is written like {0..9}"
    );
    assert_eq!(
        message(&["s{{1..2}}"]),
        "--name \"s{{1..2}}\": a '{' inside braces; a range is written like {0..9}"
    );
}

#[test]
fn two_ranges_in_one_spec_are_an_error() {
    for spec in ["{1..2}{3..4}", "a{1..2}b{3..4}c", "{1..2}{}", "{x}{y}"] {
        assert_eq!(
            err(&[spec]),
            NameSpecError::TwoRanges {
                spec: spec.to_owned()
            },
            "{spec:?}"
        );
    }
    assert_eq!(
        message(&["a{1..2}b{3..4}"]),
        "--name \"a{1..2}b{3..4}\": only one {A..B} range is allowed in a name"
    );
}

#[test]
fn braces_without_a_decimal_range_are_errors() {
    for (spec, range) in [
        ("{}", "{}"),
        ("s{}", "{}"),
        ("{a..b}", "{a..b}"),
        ("s{1..}", "{1..}"),
        ("s{..2}", "{..2}"),
        ("{..}", "{..}"),
        ("{1...3}", "{1...3}"),
        ("{1..2..3}", "{1..2..3}"),
        ("{1,2}", "{1,2}"),
        ("{1.2}", "{1.2}"),
        ("{12}", "{12}"),
        ("{-1..3}", "{-1..3}"),
        ("{1..-3}", "{1..-3}"),
        ("{+1..3}", "{+1..3}"),
        ("{1..+3}", "{1..+3}"),
        ("{ 1..3}", "{ 1..3}"),
        ("{1..3 }", "{1..3 }"),
        ("{0x1..0x3}", "{0x1..0x3}"),
        ("{1.0..3}", "{1.0..3}"),
        ("{١..٣}", "{١..٣}"),
        ("{１..３}", "{１..３}"),
        ("x{a..3}y", "{a..3}"),
    ] {
        assert_eq!(
            err(&[spec]),
            NameSpecError::NotARange {
                spec: spec.to_owned(),
                range: range.to_owned(),
            },
            "{spec:?}"
        );
    }
    assert_eq!(
        message(&["s{a..b}"]),
        "--name \"s{a..b}\": \"{a..b}\" is not a range of decimal numbers; \
         write {A..B}, e.g. {0..9} or {00..99}"
    );
}

#[test]
fn a_backwards_range_is_an_error() {
    assert_eq!(
        err(&["s{5..3}"]),
        NameSpecError::Backwards {
            spec: "s{5..3}".to_owned(),
            start: 5,
            end: 3
        }
    );
    assert_eq!(
        message(&["s{5..3}"]),
        "--name \"s{5..3}\": the range ends before it starts (5 > 3)"
    );
    assert_eq!(
        message(&["{010..009}"]),
        "--name \"{010..009}\": the range ends before it starts (10 > 9)"
    );
    assert_eq!(
        message(&["{1..0}"]),
        "--name \"{1..0}\": the range ends before it starts (1 > 0)"
    );
}

#[test]
fn numbers_beyond_u64_are_errors() {
    let over = "18446744073709551616"; // u64::MAX + 1
    for (spec, number) in [
        (format!("s{{0..{over}}}"), over),
        (format!("s{{{over}..{over}}}"), over),
        (format!("{{{over}..1}}"), over),
        (
            "{0..99999999999999999999999999}".to_owned(),
            "99999999999999999999999999",
        ),
    ] {
        assert_eq!(
            err(&[&spec]),
            NameSpecError::NumberTooLarge {
                spec: spec.clone(),
                number: number.to_owned(),
            },
            "{spec:?}"
        );
    }
    assert_eq!(
        message(&["s{0..18446744073709551616}"]),
        "--name \"s{0..18446744073709551616}\": the number 18446744073709551616 \
         is too large (at most 18446744073709551615)"
    );
    // Leading zeros do not make a number too large.
    assert_eq!(
        ok(&["{0000000000000000000000001..0000000000000000000000002}"]).len(),
        2
    );
}

#[test]
fn a_name_repeated_across_specs_is_an_error() {
    assert_eq!(
        err(&["a", "a"]),
        NameSpecError::Duplicate {
            spec: "a".to_owned(),
            name: "a".to_owned(),
            first: "a".to_owned(),
        }
    );
    assert_eq!(
        message(&["a", "b", "a"]),
        "--name \"a\": lease name \"a\" is given twice (first by --name \"a\")"
    );
    assert_eq!(
        err(&["s{0..3}", "s2"]),
        NameSpecError::Duplicate {
            spec: "s2".to_owned(),
            name: "s2".to_owned(),
            first: "s{0..3}".to_owned(),
        }
    );
    assert_eq!(
        message(&["s2", "s{0..3}"]),
        "--name \"s{0..3}\": lease name \"s2\" is given twice (first by --name \"s2\")"
    );
    // Overlapping ranges: the first shared name is the one reported.
    assert_eq!(
        err(&["s{0..5}", "s{3..9}"]),
        NameSpecError::Duplicate {
            spec: "s{3..9}".to_owned(),
            name: "s3".to_owned(),
            first: "s{0..5}".to_owned(),
        }
    );
    // The same range twice.
    assert_eq!(
        err(&["{1..2}", "{1..2}"]),
        NameSpecError::Duplicate {
            spec: "{1..2}".to_owned(),
            name: "1".to_owned(),
            first: "{1..2}".to_owned(),
        }
    );
    // Different specs, the same text: `s{1..1}0` gives "s10".
    assert_eq!(
        err(&["s{8..12}", "s{1..1}0"]),
        NameSpecError::Duplicate {
            spec: "s{1..1}0".to_owned(),
            name: "s10".to_owned(),
            first: "s{8..12}".to_owned(),
        }
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

#[test]
fn the_first_error_in_spec_order_is_reported() {
    assert_eq!(
        err(&["a", "a", "{5..3}"]),
        NameSpecError::Duplicate {
            spec: "a".to_owned(),
            name: "a".to_owned(),
            first: "a".to_owned(),
        }
    );
    assert_eq!(
        err(&["{5..3}", "a", "a"]),
        NameSpecError::Backwards {
            spec: "{5..3}".to_owned(),
            start: 5,
            end: 3
        }
    );
}

#[test]
fn every_message_is_one_line_and_names_the_spec() {
    for specs in [
        &["{"][..],
        &["{1..2}{3..4}"],
        &["{a..b}"],
        &["{0..18446744073709551616}"],
        &["{5..3}"],
        &["{0..100000}"],
        &["s{0..3}", "s2"],
    ] {
        let text = message(specs);
        let spec = specs.last().unwrap();
        assert!(!text.contains('\n'), "{text}");
        assert!(text.starts_with(&format!("--name {spec:?}: ")), "{text}");
    }
}
