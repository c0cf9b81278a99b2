//! The demo's closing report: the measured handover times beside the
//! bounds of DESIGN §4, and the account of the fenced maintenance work.

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::maintenance::{Account, Tally};
use crate::duration::show;
use crate::output::line;

/// What the scenario measured.
pub struct Gaps {
    /// From start to the first leader.
    pub first_election: Duration,
    /// From the crash to the successor leading.
    pub after_crash: Duration,
    /// From the clean release to the successor leading.
    pub after_release: Duration,
    /// The median renew statement (the round trip of this database).
    pub rtt: Duration,
}

/// Prints the handover table.
pub fn handovers(gaps: &Gaps, ttl: Duration, interval: Duration) {
    line("");
    line(&format!(
        "Handover times (RTT here = median renew statement, {:.2}ms)",
        gaps.rtt.as_secs_f64() * 1e3
    ));
    line(&format!(
        "  {:<28} {:>9}   {:<30} {}",
        "event", "measured", "DESIGN §4 target", "seed bound"
    ));
    let rows = [
        (
            "first election",
            gaps.first_election,
            "RTT".to_string(),
            format!("interval + RTT = {} + RTT", show(interval)),
        ),
        (
            "takeover after a crash",
            gaps.after_crash,
            format!("ttl + RTT = {} + RTT", show(ttl)),
            format!("ttl + interval = {}", show(ttl + interval)),
        ),
        (
            "takeover after a release",
            gaps.after_release,
            "RTT (release notice)".to_string(),
            format!("interval = {}", show(interval)),
        ),
    ];
    for (event, measured, target, seed) in rows {
        line(&format!(
            "  {event:<28} {:>9}   {target:<30} {seed}",
            show(measured)
        ));
    }
}

/// Prints the account and says whether it balances: every queued item
/// processed exactly once, nothing touched that should not be.
pub fn account(account: &Account, total: &Tally, zombie_fenced: usize, drained: bool) -> bool {
    line("");
    line("Final account");
    line(&format!(
        "  upload reservations reclaimed: {}/{} expired uncommitted; committed ones touched: {}",
        account.reclaimed, account.stale, account.committed_touched
    ));
    line(&format!(
        "  objects deleted:               {}/{} destroyed; live ones touched: {}",
        account.deleted, account.destroyed, account.live_touched
    ));
    line(&format!(
        "  commands: {} applied, {} answered as redundant (already done, re-sent at a term start), {} refused by the fence, {} retried",
        total.done, total.redundant, total.fenced + zombie_fenced, total.failed
    ));
    for (epoch, node, count) in &account.by_term {
        line(&format!("  epoch {epoch}: {node} processed {count} items"));
    }
    let applied = account.reclaimed + account.deleted;
    let all_processed = account.reclaimed == account.stale && account.deleted == account.destroyed;
    let once = usize::try_from(applied).ok() == Some(total.done);
    drained && all_processed && once && account.committed_touched == 0 && account.live_touched == 0
}

/// Prints the verdict line.
pub fn verdict(account: &Account, total: &Tally, balanced: bool, overlaps: usize) {
    let applied = account.reclaimed + account.deleted;
    line(&format!(
        "  every queued item processed: {}; each applied exactly once: {}; nothing lost: {}; two leaders at once: {}",
        yes(account.reclaimed == account.stale && account.deleted == account.destroyed),
        yes(usize::try_from(applied).ok() == Some(total.done)),
        yes(balanced),
        if overlaps == 0 { "never".to_string() } else { format!("{overlaps} times (bug!)") }
    ));
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

/// The library's metrics, as the demo's nodes recorded them.
pub type Metrics = PrometheusHandle;

/// Installs a Prometheus recorder (no listener) for the closing summary;
/// `None` if another recorder is already installed.
pub fn install_metrics() -> Option<Metrics> {
    PrometheusBuilder::new().install_recorder().ok()
}

/// One line from the library's metrics (`picolease_*`, summed over the
/// demo's nodes, which share the `lease` label): terms begun and ended by
/// reason, renew statements and their mean latency, failed statements.
pub fn metrics(handle: &Metrics) {
    let text = handle.render();
    let sum = |name: &str, labels: &[&str]| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name) && labels.iter().all(|want| l.contains(want)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let transitions = "picolease_transitions_total{";
    let ended: Vec<String> = ["lost", "expired", "released", "error"]
        .iter()
        .map(|reason| {
            let n = sum(
                transitions,
                &["to=\"follower\"", &format!("reason=\"{reason}\"")],
            );
            format!("{n} {reason}")
        })
        .collect();
    let renews = sum(
        "picolease_statement_duration_seconds_count{",
        &["statement=\"renew\""],
    );
    let renew_seconds = sum(
        "picolease_statement_duration_seconds_sum{",
        &["statement=\"renew\""],
    );
    let mean_ms = if renews > 0.0 {
        renew_seconds / renews * 1e3
    } else {
        0.0
    };
    line(&format!(
        "  metrics: picolease_transitions_total to=leader {}, to=follower {}; {renews} renews, mean {mean_ms:.2}ms; {} failed statements",
        sum(transitions, &["to=\"leader\""]),
        ended.join(", "),
        sum("picolease_statement_failures_total{", &[]),
    ));
}
