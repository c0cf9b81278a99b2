//! The lanes of a lone lease (one per process) or of a small set (one per
//! lease): each term a bar labelled with its epoch, the leaderless gaps
//! under them with their lengths and bounds, a paused process greyed, late
//! reports and two leaders over them, and the marks.

use std::fmt::Write;

use super::analysis::{Analysis, Mark, Term, TermEnd};
use super::html::{axis, colour, esc, secs, Scale, LANE, LEFT, TOP, WIDTH};

/// Lanes of terms: per process for a lone lease, per lease for a set.
pub(super) fn lanes(analysis: &Analysis, per_node: bool) -> String {
    let scale = Scale::new(analysis);
    let keys: &[String] = if per_node {
        &analysis.nodes
    } else {
        &analysis.leases
    };
    let label_space = if per_node {
        14.0 * analysis.gaps.len().clamp(1, 6) as f64 + 10.0
    } else {
        0.0
    };
    let height = TOP + LANE * keys.len() as f64 + 10.0 + label_space;
    let lane_of = |term_node: &str, lease: &str| {
        let key = if per_node { term_node } else { lease };
        keys.iter().position(|k| k == key).unwrap_or(0) as f64
    };
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg id=\"lanes\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\">"
    );
    out.push_str(&axis(scale, TOP - 14.0));
    for (i, key) in keys.iter().enumerate() {
        let y = TOP + LANE * i as f64;
        let _ = write!(
            out,
            "<text class=\"lane-label\" x=\"4\" y=\"{:.1}\">{}</text>",
            y + LANE / 2.0 + 4.0,
            esc(key)
        );
    }
    // Gaps under the terms: on a lease's lane, or across every process's
    // lane for a lone lease; a lone lease's gap labels go in rows below
    // the lanes, each in the first row where it does not cover another.
    let mut label_rows: Vec<f64> = Vec::new();
    for gap in &analysis.gaps {
        let (x1, x2) = (scale.x(gap.from_ms), scale.x(gap.to_ms));
        let (y, h) = if per_node {
            (TOP, LANE * keys.len() as f64)
        } else {
            (TOP + LANE * lane_of("", &gap.lease), LANE)
        };
        let over = if gap.unknown_start {
            " unknown-start"
        } else if gap.len_ms() > gap.bound_ms {
            " over-bound"
        } else {
            ""
        };
        let label = if gap.unknown_start {
            format!(
                "gap ≤ {} since its last line (bound {})",
                secs(gap.len_ms()),
                secs(gap.bound_ms)
            )
        } else {
            format!("gap {} (bound {})", secs(gap.len_ms()), secs(gap.bound_ms))
        };
        let width = 6.5 * label.chars().count() as f64;
        let label_x = (x1 + 2.0).min(WIDTH - width).max(LEFT);
        let label_y = if per_node {
            let row = match label_rows
                .iter()
                .position(|free_from| *free_from <= label_x)
            {
                Some(row) => row,
                None => {
                    label_rows.push(0.0);
                    label_rows.len() - 1
                }
            };
            label_rows[row] = label_x + width;
            y + h + 14.0 + 14.0 * row as f64
        } else {
            y + h - 3.0
        };
        let _ = write!(
            out,
            "<g><rect class=\"gap{over}\" data-lease=\"{}\" data-ms=\"{}\" data-bound-ms=\"{}\" x=\"{x1:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\"><title>{}</title></rect><text class=\"gap-label\" x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
            esc(&gap.lease),
            gap.len_ms(),
            gap.bound_ms,
            (x2 - x1).max(1.0),
            esc(&format!(
                "no leader of {} for {} after {} (bound {})",
                gap.lease,
                secs(gap.len_ms()),
                gap.after,
                secs(gap.bound_ms)
            )),
            label_x,
            label_y,
            esc(&label),
        );
    }
    for term in &analysis.terms {
        let y = TOP + LANE * lane_of(&term.node, &term.lease) + 4.0;
        out.push_str(&bar(analysis, scale, term, y, LANE - 12.0, !per_node));
    }
    // A paused process's terms, greyed where it could not act.
    for term in &analysis.terms {
        for (_, from, to) in analysis.pauses.iter().filter(|(node, from, to)| {
            *node == term.node && *from < term.end_ms && *to > term.start_ms
        }) {
            let (x1, x2) = (
                scale.x((*from).max(term.start_ms)),
                scale.x((*to).min(term.end_ms)),
            );
            let y = TOP + LANE * lane_of(&term.node, &term.lease) + 4.0;
            let _ = write!(
                out,
                "<rect class=\"paused\" data-node=\"{}\" x=\"{x1:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{} paused for {}</title></rect>",
                esc(&term.node),
                (x2 - x1).max(1.0),
                LANE - 12.0,
                esc(&term.node),
                secs(to - from)
            );
        }
    }
    for overlap in &analysis.overlaps {
        let (x1, x2) = (scale.x(overlap.from_ms), scale.x(overlap.to_ms));
        let (y, h) = if per_node {
            let a = lane_of(&overlap.first.node, "");
            let b = lane_of(&overlap.second.node, "");
            (TOP + LANE * a.min(b), LANE * ((a - b).abs() + 1.0))
        } else {
            (TOP + LANE * lane_of("", &overlap.lease), LANE)
        };
        let _ = write!(
            out,
            "<rect class=\"overlap\" data-lease=\"{}\" data-first=\"{}\" data-second=\"{}\" x=\"{x1:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\"><title>two leaders of {}:\n{}\n{}</title></rect>",
            esc(&overlap.lease),
            esc(&overlap.first.node),
            esc(&overlap.second.node),
            (x2 - x1).max(3.0),
            esc(&overlap.lease),
            esc(&overlap.first.start_json),
            esc(&overlap.second.start_json),
        );
    }
    for late in &analysis.late_reports {
        let (x1, x2) = (scale.x(late.from_ms), scale.x(late.to_ms));
        let y = TOP + LANE * lane_of(&late.first.node, &late.lease) + LANE - 7.0;
        let _ = write!(
            out,
            "<rect class=\"late-report\" data-lease=\"{}\" data-node=\"{}\" x=\"{x1:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"3\"><title>{} said it left {} only {} after {} led (its term ended by its deadline, before the row lapsed: a paused or starved process reporting late)</title></rect>",
            esc(&late.lease),
            esc(&late.first.node),
            (x2 - x1).max(2.0),
            esc(&late.first.node),
            esc(&late.lease),
            secs(late.to_ms - late.from_ms),
            esc(&late.second.node),
        );
    }
    for mark in &analysis.marks {
        let lane = lane_of(&mark.node, &mark.lease);
        out.push_str(&mark_svg(
            mark,
            scale.x(mark.at_ms),
            TOP + LANE * lane + LANE / 2.0,
        ));
    }
    out.push_str("</svg>\n");
    out
}

/// One term's bar, with its label when it fits.
pub(super) fn bar(
    analysis: &Analysis,
    scale: Scale,
    term: &Term,
    y: f64,
    h: f64,
    name_node: bool,
) -> String {
    let (x1, x2) = (scale.x(term.start_ms), scale.x(term.end_ms));
    let width = (x2 - x1).max(2.0);
    let epoch = term.epoch.map_or("?".to_string(), |e| e.to_string());
    let presumed = if term.end == TermEnd::StreamEnded {
        " presumed"
    } else {
        ""
    };
    let label = if name_node {
        format!("{} e{epoch}", term.node)
    } else {
        format!("e{epoch}")
    };
    let mut title = term.start_json.clone();
    if let Some(end) = &term.end_json {
        title.push('\n');
        title.push_str(end);
    }
    if term.end == TermEnd::StreamEnded {
        title.push_str("\n(its stream ended here while it led: a crash or a kill)");
    }
    let mut out = format!(
        "<rect class=\"term{presumed}\" data-lease=\"{}\" data-node=\"{}\" data-epoch=\"{epoch}\" data-start-ms=\"{}\" data-end-ms=\"{}\" x=\"{x1:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{}</title></rect>",
        esc(&term.lease),
        esc(&term.node),
        term.start_ms,
        term.end_ms,
        colour(analysis, &term.node),
        esc(&title),
    );
    if width > 7.0 * label.len() as f64 {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#fff\" pointer-events=\"none\">{}</text>",
            x1 + 3.0,
            y + h / 2.0 + 4.0,
            esc(&label)
        );
    }
    if term.end == TermEnd::StreamEnded {
        let _ = write!(
            out,
            "<text class=\"mark\" data-event=\"stream-ended\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">✕</text>",
            x2,
            y + h / 2.0 + 4.0
        );
    }
    out
}

/// One event's mark.
pub(super) fn mark_svg(mark: &Mark, x: f64, y: f64) -> String {
    let glyph = match mark.event.as_str() {
        "child" => "▲",
        "child_exit" => "▼",
        "work_failed" => "✖",
        "crash" => "✕",
        "unhealthy" | "healthy" => "◆",
        "handover" | "handover_asked" => "↦",
        "stop" => "■",
        "failover" => "⚡",
        "pause" => "‖",
        "resume" => "›",
        _ => "•",
    };
    format!(
        "<text class=\"mark\" data-event=\"{}\" data-node=\"{}\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{glyph}<title>{}</title></text>",
        esc(&mark.event),
        esc(&mark.node),
        y + 4.0,
        esc(&mark.json)
    )
}
