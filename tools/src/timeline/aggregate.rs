//! A set too big for a lane per lease (10 processes × 10,000 leases): one
//! lane per process with how many leases it held over time, one lane with
//! how many leases had no leader, and a drill-down that draws one picked
//! lease's terms in the page's own script.

use std::fmt::Write;

use serde_json::json;

use super::analysis::{Analysis, TermEnd};
use super::html::{axis, colour, esc, Scale, LANE, LEFT, PALETTE, RIGHT, TOP, WIDTH};

/// Height of a count lane.
const COUNT_LANE: f64 = 2.0 * LANE;

/// Columns a count lane is drawn in: one per pixel of the plot at most, each
/// at the highest count it saw, so a 10,000-lease run draws in a few
/// hundred points per process.
fn columns() -> usize {
    (WIDTH - LEFT - RIGHT) as usize
}

/// Per column, the most of `changes` (time, +1/−1) in force within it.
fn per_column(scale: Scale, mut changes: Vec<(i64, i32)>) -> Vec<i32> {
    changes.sort();
    let n = columns();
    let mut out = vec![0; n];
    let mut level = 0;
    let mut next = 0;
    for (column, slot) in out.iter_mut().enumerate() {
        let column_end = scale.start_ms + (scale.span_ms * (column as i64 + 1)) / n as i64;
        let mut most = level;
        while next < changes.len() && changes[next].0 <= column_end {
            level += changes[next].1;
            most = most.max(level);
            next += 1;
        }
        *slot = most;
    }
    out
}

fn step_path(scale: Scale, levels: &[i32], top: f64, height: f64, max: i32) -> String {
    let n = levels.len() as f64;
    let plot = WIDTH - LEFT - RIGHT;
    let mut path = String::new();
    for (i, level) in levels.iter().enumerate() {
        let x = LEFT + plot * i as f64 / n;
        let y = top + height - height * f64::from(*level) / f64::from(max.max(1));
        let _ = write!(
            path,
            "{}{x:.1},{y:.1}H{:.1}",
            if i == 0 { "M" } else { "L" },
            x + plot / n
        );
    }
    let _ = scale;
    path
}

/// The count lanes.
pub fn counts(analysis: &Analysis) -> String {
    let scale = Scale::new(analysis);
    let lanes = analysis.nodes.len() + 1;
    let height = TOP + COUNT_LANE * lanes as f64 + 10.0;
    let mut out = format!(
        "<svg id=\"counts\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\">"
    );
    out.push_str(&axis(scale, TOP - 14.0));
    let mut levels = Vec::new();
    for node in &analysis.nodes {
        let changes = analysis
            .terms
            .iter()
            .filter(|t| &t.node == node)
            .flat_map(|t| [(t.start_ms, 1), (t.end_ms, -1)])
            .collect();
        levels.push(per_column(scale, changes));
    }
    let unled = per_column(
        scale,
        analysis
            .gaps
            .iter()
            .flat_map(|g| [(g.from_ms, 1), (g.to_ms, -1)])
            .collect(),
    );
    let max = levels.iter().flatten().copied().max().unwrap_or(1);
    let rows = analysis
        .nodes
        .iter()
        .zip(&levels)
        .map(|(node, levels)| (node.as_str(), levels, colour(analysis, node), max))
        .chain(std::iter::once((
            "without a leader",
            &unled,
            "#999",
            unled.iter().copied().max().unwrap_or(1),
        )));
    for (i, (label, levels, fill, max)) in rows.enumerate() {
        let top = TOP + COUNT_LANE * i as f64;
        let held_most = levels.iter().copied().max().unwrap_or(0);
        let _ = write!(
            out,
            "<text class=\"lane-label\" x=\"4\" y=\"{:.1}\">{}</text><text class=\"tick\" x=\"4\" y=\"{:.1}\">up to {held_most}</text><path class=\"count\" data-node=\"{}\" data-most=\"{held_most}\" d=\"{}\" fill=\"none\" stroke=\"{fill}\" stroke-width=\"1.5\"><title>{}: leases held over time (most {held_most})</title></path>",
            top + COUNT_LANE / 2.0,
            esc(label),
            top + COUNT_LANE / 2.0 + 14.0,
            esc(label),
            step_path(scale, levels, top + 4.0, COUNT_LANE - 8.0, max),
            esc(label),
        );
    }
    for overlap in &analysis.overlaps {
        let x = scale.x(overlap.from_ms);
        let _ = write!(
            out,
            "<rect class=\"overlap\" data-lease=\"{}\" data-first=\"{}\" data-second=\"{}\" x=\"{:.1}\" y=\"{TOP}\" width=\"4\" height=\"{:.1}\"><title>two leaders of {}:\n{}\n{}</title></rect>",
            esc(&overlap.lease),
            esc(&overlap.first.node),
            esc(&overlap.second.node),
            x - 2.0,
            COUNT_LANE * lanes as f64,
            esc(&overlap.lease),
            esc(&overlap.first.start_json),
            esc(&overlap.second.start_json),
        );
    }
    out.push_str("</svg>\n");
    out
}

/// The drill-down: a lease picker, an empty picture the script fills, and
/// every lease's terms as JSON (`[process, epoch, start, end, presumed]`).
pub fn drill_down(analysis: &Analysis) -> String {
    let mut terms = serde_json::Map::new();
    for term in &analysis.terms {
        let node = analysis
            .nodes
            .iter()
            .position(|n| *n == term.node)
            .unwrap_or(0);
        let entry = terms.entry(term.lease.clone()).or_insert_with(|| json!([]));
        if let Some(list) = entry.as_array_mut() {
            list.push(json!([
                node,
                term.epoch,
                term.start_ms,
                term.end_ms,
                u8::from(term.end == TermEnd::StreamEnded)
            ]));
        }
    }
    let data = json!({
        "nodes": analysis.nodes,
        "colours": analysis.nodes.iter().enumerate().map(|(i, _)| PALETTE[i % PALETTE.len()]).collect::<Vec<_>>(),
        "start": analysis.start_ms,
        "span": (analysis.end_ms - analysis.start_ms).max(1),
        "left": LEFT,
        "plot": WIDTH - LEFT - RIGHT,
        "terms": terms,
    });
    let mut out = String::from("<p><label>One lease: <select id=\"lease-pick\">");
    for lease in &analysis.leases {
        let _ = write!(out, "<option value=\"{0}\">{0}</option>", esc(lease));
    }
    let _ = write!(
        out,
        "</select></label></p><svg id=\"drill\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{LANE}\"></svg>\n<script type=\"application/json\" id=\"lease-terms\">{}</script>\n<script>{DRILL}</script>\n",
        // No `<`, `>` or `&` in the script element's text, whatever the
        // lease names hold (`</script>`, `<!--`): JSON's own escapes.
        data.to_string()
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026")
    );
    out
}

/// Draws one lease's terms into `#drill`.
const DRILL: &str = "window.picoleaseDrill=function(d,lease){\
var svg=document.getElementById('drill'),ns='http://www.w3.org/2000/svg';\
while(svg.firstChild){svg.removeChild(svg.firstChild);}\
var x=function(ms){return d.left+(ms-d.start)/d.span*d.plot;};\
var label=document.createElementNS(ns,'text');label.setAttribute('x',4);label.setAttribute('y',19);label.textContent=lease;svg.appendChild(label);\
(Object.prototype.hasOwnProperty.call(d.terms,lease)?d.terms[lease]:[]).forEach(function(t){\
var r=document.createElementNS(ns,'rect');\
r.setAttribute('class',t[4]?'term presumed':'term');r.setAttribute('x',x(t[2]));r.setAttribute('y',6);\
r.setAttribute('width',Math.max(2,x(t[3])-x(t[2])));r.setAttribute('height',18);r.setAttribute('fill',d.colours[t[0]]);\
r.setAttribute('data-lease',lease);r.setAttribute('data-node',d.nodes[t[0]]);r.setAttribute('data-epoch',t[1]);\
var title=document.createElementNS(ns,'title');\
title.textContent=d.nodes[t[0]]+' led '+lease+' at epoch '+t[1]+' from +'+((t[2]-d.start)/1000).toFixed(2)+' s to +'+((t[3]-d.start)/1000).toFixed(2)+' s';\
r.appendChild(title);svg.appendChild(r);});};";
