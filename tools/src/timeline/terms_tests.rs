//! `terms::analyse` on small runs: each rule of the module doc, one test.

use super::super::analysis::DEFAULT_TTL_MS;
use super::super::events::{merge, parse_stream};
use super::*;

fn run(lines: &[&str]) -> Analysis {
    let events = parse_stream("t", &lines.join("\n"), 0).expect("valid lines");
    analyse(&merge(events), DEFAULT_TTL_MS)
}

fn leader(node: &str, at: i64, epoch: u64) -> String {
    format!(
        r#"{{"event":"leader","name":"l","node":"{node}","unix_ms":{at},"epoch":{epoch},"ttl_ms":2000,"interval_ms":500}}"#
    )
}

fn follower(node: &str, at: i64, epoch: u64, reason: &str) -> String {
    format!(
        r#"{{"event":"follower","name":"l","node":"{node}","unix_ms":{at},"epoch":{epoch},"reason":"{reason}"}}"#
    )
}

#[test]
fn a_release_and_a_takeover_make_two_terms_and_one_gap_within_an_interval_and_its_statement() {
    let a = run(&[
        &leader("a", 1_000, 1),
        &follower("a", 5_000, 1, "released"),
        &leader("b", 5_004, 2),
        &follower("b", 9_000, 2, "released"),
    ]);
    assert_eq!(a.terms.len(), 2);
    assert_eq!(a.terms[0].end, TermEnd::Left("released".to_string()));
    assert_eq!(a.gaps.len(), 1);
    // An interval (500 ms), and a tenth of one for the taking statement.
    assert_eq!((a.gaps[0].len_ms(), a.gaps[0].bound_ms), (4, 550));
    assert!(a.overlaps.is_empty());
}

#[test]
fn two_leader_lines_with_no_follower_between_are_an_overlap() {
    let a = run(&[&leader("a", 1_000, 1), &leader("b", 1_500, 2)]);
    assert_eq!(a.overlaps.len(), 1, "{a:?}");
    let overlap = &a.overlaps[0];
    assert_eq!(
        (overlap.first.node.as_str(), overlap.second.node.as_str()),
        ("a", "b")
    );
    assert_eq!(overlap.from_ms, 1_500);
}

#[test]
fn a_leader_that_goes_on_printing_overlaps_however_late_the_other_came() {
    let a = run(&[
        &leader("a", 1_000, 1),
        &leader("b", 60_000, 2),
        &follower("a", 61_000, 1, "released"),
    ]);
    assert_eq!(a.overlaps.len(), 1);
    assert_eq!(
        (a.overlaps[0].from_ms, a.overlaps[0].to_ms),
        (60_000, 61_000)
    );
}

#[test]
fn a_silent_leader_taken_over_after_its_ttl_is_a_crash_takeover_not_an_overlap() {
    let a = run(&[&leader("a", 1_000, 1), &leader("b", 3_400, 2)]);
    assert!(a.overlaps.is_empty(), "{a:?}");
    assert_eq!(a.terms[0].end, TermEnd::StreamEnded);
    assert_eq!(a.gaps.len(), 1);
    assert_eq!((a.gaps[0].len_ms(), a.gaps[0].bound_ms), (2_400, 2_500));
}

#[test]
fn a_term_reported_expired_after_another_led_is_a_late_report_not_an_overlap() {
    let a = run(&[
        &leader("a", 1_000, 1),
        &leader("b", 4_000, 2),
        &follower("a", 9_000, 1, "expired"),
    ]);
    assert!(a.overlaps.is_empty(), "{a:?}");
    assert_eq!(a.late_reports.len(), 1);
    assert_eq!(a.late_reports[0].to_ms, 9_000);
}

#[test]
fn a_crash_line_ends_the_term_where_it_says() {
    let crash = r#"{"event":"crash","name":"l","node":"a","unix_ms":2000}"#;
    let a = run(&[&leader("a", 1_000, 1), crash, &leader("b", 4_300, 2)]);
    assert!(a.overlaps.is_empty());
    assert_eq!(a.terms[0].end, TermEnd::Crashed);
    assert_eq!(a.gaps[0].len_ms(), 2_300);
    assert_eq!(a.marks.len(), 1);
}

#[test]
fn a_term_still_open_at_the_end_runs_to_the_capture_end() {
    let observed =
        r#"{"event":"observed","name":"l","node":"b","unix_ms":7000,"holder":"a#1","epoch":1}"#;
    let a = run(&[&leader("a", 1_000, 1), observed]);
    assert_eq!(a.terms[0].end, TermEnd::Open);
    assert_eq!(a.terms[0].end_ms, 7_000);
    assert_eq!(a.nodes, ["a", "b"]);
}

#[test]
fn a_paused_leader_overlaps_only_if_it_still_leads_once_it_runs_again() {
    let line = |event: &str, node: &str, at: i64| {
        format!(r#"{{"event":"{event}","name":"","node":"{node}","unix_ms":{at}}}"#)
    };
    // Paused, taken over, demoted as it resumes: no overlap.
    let a = run(&[
        &leader("a", 1_000, 1),
        &line("pause", "a", 1_500),
        &leader("b", 4_000, 2),
        &follower("a", 6_000, 1, "expired"),
        &line("resume", "a", 6_000),
    ]);
    assert!(a.overlaps.is_empty(), "{a:?}");
    assert_eq!(a.pauses, [("a".to_string(), 1_500, 6_000)]);
    // Resumed still leading beside b: two leaders from the resume on.
    let a = run(&[
        &leader("a", 1_000, 1),
        &line("pause", "a", 1_500),
        &leader("b", 4_000, 2),
        &line("resume", "a", 6_000),
        &follower("a", 6_500, 1, "lost"),
    ]);
    assert_eq!(a.overlaps.len(), 1, "{a:?}");
    assert_eq!((a.overlaps[0].from_ms, a.overlaps[0].to_ms), (6_000, 6_500));
    assert_eq!(a.leases, ["l"]);
}

fn line_of(event: &str, node: &str, holder: &str, at: i64, extra: &str) -> String {
    format!(
        r#"{{"event":"{event}","name":"l","node":"{node}","holder":"{holder}","unix_ms":{at},"epoch":1,"ttl_ms":2000,"interval_ms":500{extra}}}"#
    )
}

#[test]
fn two_processes_sharing_a_node_name_are_told_apart_by_their_holder_ids() {
    let a = run(&[
        &line_of("leader", "web", "web#a", 1_000, ""),
        &line_of("leader", "web", "web#b", 1_500, ""),
    ]);
    assert_eq!(a.overlaps.len(), 1, "{a:?}");
    assert_eq!(a.nodes, ["web (web#a)", "web (web#b)"]);
}

#[test]
fn a_restarted_process_of_the_same_name_does_not_keep_the_dead_ones_term_alive() {
    // n1 (holder n1#a) leads and is killed; restarted as n1#b it observes
    // n2 take the lease after the ttl: a crash takeover, no overlap.
    let observed =
        r#"{"event":"observed","name":"l","node":"n1","unix_ms":2500,"holder":"n2#c","epoch":2}"#;
    let streams = [
        line_of("leader", "n1", "n1#a", 1_000, ""),
        line_of("leader", "n2", "n2#c", 3_100, ""),
        observed.to_string(),
    ];
    // One stream per process, as `run` writes them.
    let mut events = Vec::new();
    for (i, text) in streams.iter().enumerate() {
        events.extend(parse_stream("s", text, i).unwrap());
    }
    let a = analyse(&merge(events), DEFAULT_TTL_MS);
    assert!(a.overlaps.is_empty(), "{a:?}");
    assert_eq!(a.terms[0].end, TermEnd::StreamEnded);
}

#[test]
fn a_term_ending_in_the_millisecond_another_begins_is_no_overlap() {
    // b's stream comes first in the input, so its leader line precedes
    // a's release at the same millisecond.
    let a = run(&[
        &leader("a", 1_000, 1),
        &leader("b", 5_000, 2),
        &follower("a", 5_000, 1, "released"),
    ]);
    assert!(a.overlaps.is_empty(), "{a:?}");
    // A term led and left within one millisecond closes.
    let a = run(&[
        &leader("a", 1_000, 1),
        &follower("a", 1_000, 1, "released"),
        &leader("b", 1_200, 2),
        r#"{"event":"observed","name":"l","node":"a","unix_ms":9000,"epoch":2}"#,
    ]);
    assert!(a.overlaps.is_empty(), "{a:?}");
    assert_eq!(a.terms.len(), 2);
}

#[test]
fn a_late_expired_report_is_excused_only_if_its_process_was_silent_meanwhile() {
    let child_exit =
        r#"{"event":"child_exit","name":"l","node":"a","unix_ms":5000,"epoch":1,"pid":7,"code":0}"#;
    let a = run(&[
        &leader("a", 1_000, 1),
        &leader("b", 4_000, 2),
        child_exit,
        &follower("a", 9_000, 1, "expired"),
    ]);
    assert_eq!(a.overlaps.len(), 1, "{a:?}");
    assert!(a.late_reports.is_empty());
}

#[test]
fn an_overlap_never_runs_backwards_and_no_gap_hides_inside_it() {
    // a leads and goes silent; b leads too soon (two leaders); b releases;
    // c leads long after: a's term ends no earlier than b's start.
    let a = run(&[
        &leader("a", 0, 1),
        &leader("b", 500, 2),
        &follower("b", 600, 2, "released"),
        &leader("c", 20_000, 3),
    ]);
    assert_eq!(a.overlaps.len(), 1, "{a:?}");
    assert!(a.overlaps[0].to_ms >= a.overlaps[0].from_ms);
    assert!(a.gaps.iter().all(|g| g.from_ms >= 600), "{:?}", a.gaps);
}

#[test]
fn a_gap_after_a_silent_end_is_not_held_to_the_bound() {
    let a = run(&[&leader("a", 1_000, 1), &leader("b", 60_000, 2)]);
    assert!(a.overlaps.is_empty());
    assert_eq!(a.gaps.len(), 1);
    assert!(a.gaps[0].unknown_start);
}
