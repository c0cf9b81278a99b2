//! The picture: one self-contained HTML page (inline SVG, one small
//! script, no external asset), readable offline. Every drawn element
//! carries its data in `data-*` attributes and its event's JSON in a
//! `<title>` (shown on hover), so a browser test can check the picture
//! against the input.

use std::fmt::Write;

use super::aggregate;
use super::analysis::Analysis;
use super::lanes::lanes;

/// Leases drawn one lane each; above this a set is drawn as held-lease
/// counts per process, with a drill-down to one lease.
pub const MAX_LEASE_LANES: usize = 40;

pub(super) const WIDTH: f64 = 1200.0;
pub(super) const LEFT: f64 = 190.0;
pub(super) const RIGHT: f64 = 30.0;
pub(super) const LANE: f64 = 30.0;
pub(super) const TOP: f64 = 34.0;

/// Process colours, by order of appearance.
pub(super) const PALETTE: &[&str] = &[
    "#4e79a7", "#59a14f", "#9c755f", "#f28e2b", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#8cd17d", "#86bcb6",
];

/// The time scale of a picture.
#[derive(Clone, Copy)]
pub(super) struct Scale {
    pub start_ms: i64,
    pub span_ms: i64,
}

impl Scale {
    pub fn new(analysis: &Analysis) -> Self {
        Scale {
            start_ms: analysis.start_ms,
            span_ms: (analysis.end_ms - analysis.start_ms).max(1),
        }
    }

    pub fn x(&self, ms: i64) -> f64 {
        LEFT + (ms - self.start_ms) as f64 / self.span_ms as f64 * (WIDTH - LEFT - RIGHT)
    }
}

/// Escapes text for HTML and attribute values.
pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `n` and the noun in the number it needs.
pub(super) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Seconds with two decimals.
pub(super) fn secs(ms: i64) -> String {
    format!("{:.2} s", ms as f64 / 1000.0)
}

pub(super) fn colour(analysis: &Analysis, node: &str) -> &'static str {
    let index = analysis.nodes.iter().position(|n| n == node).unwrap_or(0);
    PALETTE[index % PALETTE.len()]
}

/// The whole page.
pub fn page(analysis: &Analysis, title: &str) -> String {
    let mut body = String::new();
    let lone = analysis.leases.len() == 1;
    let (what, svg) = if analysis.leases.len() > MAX_LEASE_LANES {
        (
            "one lane per process: how many leases it held over time; pick a lease below to see its terms",
            aggregate::counts(analysis),
        )
    } else if lone {
        (
            "one lane per process: its terms, labelled with their epochs",
            lanes(analysis, true),
        )
    } else {
        (
            "one lane per lease: its terms, coloured by process",
            lanes(analysis, false),
        )
    };
    let _ = write!(
        body,
        "<h1>{}</h1>\n<p class=\"summary\">{}, {}, {}, {} (longest {}), <b class=\"{}\">{} overlaps</b>; {what}. Hover over a bar or a mark for its event.</p>\n",
        esc(title),
        count(analysis.nodes.len(), "process", "processes"),
        count(analysis.leases.len(), "lease", "leases"),
        count(analysis.terms.len(), "term", "terms"),
        count(analysis.gaps.len(), "leaderless gap", "leaderless gaps"),
        analysis.gaps.iter().map(|g| g.len_ms()).max().map_or("none".to_string(), secs),
        if analysis.overlaps.is_empty() { "ok" } else { "bad" },
        analysis.overlaps.len(),
    );
    body.push_str(&legend(analysis));
    body.push_str(&svg);
    if analysis.leases.len() > MAX_LEASE_LANES {
        body.push_str(&aggregate::drill_down(analysis));
    }
    body.push_str(&tables(analysis));
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>{STYLE}</style></head>\n<body data-rendered=\"no\">\n{body}<script>{SCRIPT}</script>\n</body></html>\n",
        esc(title)
    )
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:16px;color:#222}\
h1{font-size:18px}.bad{color:#c00}.ok{color:#2a2}\
svg{display:block;margin:8px 0}text{font-size:11px}\
.term{stroke:#333;stroke-width:.5}.term.presumed{stroke-dasharray:3 2}\
.gap{fill:#ddd;opacity:.8}.late-report{fill:#f28e2b}.paused{fill:#fff;opacity:.6}.gap.over-bound{fill:#f6c26b}.overlap{fill:#e00;opacity:.55}\
.lane-label{font-size:12px}.axis{stroke:#999}.tick{fill:#555}\
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}\
.legend span{display:inline-block;margin-right:12px}.swatch{display:inline-block;width:12px;height:12px;vertical-align:middle;margin-right:4px}";

/// Marks the page as drawn (a browser test reads it) and runs the
/// drill-down, when there is one.
const SCRIPT: &str = "(function(){\
var pick=document.getElementById('lease-pick');\
if(pick){var data=JSON.parse(document.getElementById('lease-terms').textContent);\
var draw=function(){window.picoleaseDrill(data,pick.value)};pick.addEventListener('change',draw);draw();}\
document.body.setAttribute('data-rendered','yes');})();";

fn legend(analysis: &Analysis) -> String {
    let mut out = String::from("<p class=\"legend\">");
    for node in &analysis.nodes {
        let _ = write!(
            out,
            "<span><i class=\"swatch\" style=\"background:{}\"></i>{}</span>",
            colour(analysis, node),
            esc(node)
        );
    }
    out.push_str("<span><i class=\"swatch\" style=\"background:#ddd\"></i>leaderless gap</span>\
<span><i class=\"swatch\" style=\"background:#e00\"></i>two leaders</span>\
<span><i class=\"swatch\" style=\"background:#f28e2b;height:3px\"></i>a term reported ended late</span>\
<span>▲ CMD started ▼ CMD ended ✖ work failed ✕ crash ‖ pause › resume ■ stop ◆ health ↦ handover ⚡ failover</span></p>\n");
    out
}

/// The time axis, with ticks at a round step.
pub(super) fn axis(scale: Scale, y: f64) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\"/>",
        WIDTH - RIGHT
    );
    let raw = scale.span_ms as f64 / 10.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(magnitude * 10.0)
        .max(1.0) as i64;
    let mut at = 0;
    while at <= scale.span_ms {
        let x = scale.x(scale.start_ms + at);
        let _ = write!(
            out,
            "<line class=\"axis\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{}\" y2=\"{}\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">+{}</text>",
            y - 4.0,
            y + 4.0,
            y - 8.0,
            secs(at)
        );
        at += step;
    }
    out
}

/// The gaps and overlaps as tables: every overlap; the longest gaps.
fn tables(analysis: &Analysis) -> String {
    const MAX_ROWS: usize = 50;
    let mut out = String::new();
    if !analysis.overlaps.is_empty() {
        out.push_str("<h2 class=\"bad\">Two leaders</h2><table id=\"overlaps\"><tr><th>lease</th><th>first</th><th>second</th><th>for</th></tr>");
        for o in &analysis.overlaps {
            let _ = write!(
                out,
                "<tr><td>{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td></tr>",
                esc(&o.lease),
                esc(&o.first.start_json),
                esc(&o.second.start_json),
                secs(o.to_ms - o.from_ms)
            );
        }
        out.push_str("</table>\n");
    }
    let mut gaps: Vec<_> = analysis.gaps.iter().collect();
    gaps.sort_by_key(|g| std::cmp::Reverse(g.len_ms()));
    if !gaps.is_empty() {
        let _ = write!(
            out,
            "<h2>Leaderless gaps ({} in all{})</h2><table id=\"gaps\"><tr><th>lease</th><th>after</th><th>length</th><th>bound</th></tr>",
            gaps.len(),
            if gaps.len() > MAX_ROWS { ", the longest 50" } else { "" }
        );
        for g in gaps.iter().take(MAX_ROWS) {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&g.lease),
                esc(&g.after),
                secs(g.len_ms()),
                secs(g.bound_ms)
            );
        }
        out.push_str("</table>\n");
    }
    out
}
