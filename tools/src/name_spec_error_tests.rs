//! Unit tests of `name_spec.rs`: what `--name` refuses, and how it says so.

use super::tests::{err, message, ok};
use super::*;

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
