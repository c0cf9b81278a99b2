//! `bench`'s figures, the ttl and interval they recommend, and how they
//! are printed: a table (with a progress line while measuring) or one JSON
//! object with fixed keys.

use std::io::Write;
use std::time::Duration;

use crate::backend::Backend;

/// The command that measures, printed with the figures.
pub const COMMAND: &str = "picolease bench --db URL [--rounds N] [--json]";

/// Every sample taken.
pub struct Figures {
    /// `SELECT 1` round trips.
    pub rtt: Vec<Duration>,
    /// The driver's renewals.
    pub renew: Vec<Duration>,
    /// The same UPDATE on a plain connection, at the same pace.
    pub renew_floor: Vec<Duration>,
    /// Leader's shutdown to the successor's leadership.
    pub handover: Vec<Duration>,
    /// Release and acquire commits on plain connections.
    pub handover_floor: Vec<Duration>,
    /// The leader's `hand_over` to the successor's leadership.
    pub planned_handover: Vec<Duration>,
    /// The row's expiry to the successor's leadership, after a crash.
    pub crash_lag: Vec<Duration>,
    /// Connections set up with the URL's TLS settings (none on SQLite);
    /// in the table only, not in `--json`, whose keys are fixed.
    pub connect: Vec<Duration>,
    /// The same in plain text (none where the server takes only TLS).
    pub connect_plain: Vec<Duration>,
    /// The ttl the contenders ran with.
    pub ttl: Duration,
    /// On a Galera node, the commit stall a lost node causes
    /// (`super::cluster`); the recommendation covers it.
    pub cluster_stall: Option<Duration>,
}

/// The `q`-quantile (nearest rank) in milliseconds.
fn quantile_ms(samples: &[Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    ms(sorted[rank - 1])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn p50(samples: &[Duration]) -> f64 {
    quantile_ms(samples, 0.5)
}

fn max(samples: &[Duration]) -> f64 {
    quantile_ms(samples, 1.0)
}

/// A ttl and interval from the figures (milliseconds).
///
/// The interval leaves room for a renewal ten times slower than the worst
/// seen (the request timeout defaults to the interval, so a renew that
/// slow still lands), and is at least 100 ms; the ttl is four intervals,
/// the default shape, so one lost renewal and one slow one still keep the
/// lease. Rounded up to 50 ms. On a Galera node the ttl also covers the
/// commit stall of a lost node (`super::cluster::ttl_through`).
pub fn recommend(figures: &Figures) -> (u64, u64) {
    let worst = max(&figures.renew)
        .max(quantile_ms(&figures.rtt, 0.99))
        .max(0.0);
    let mut interval = ((worst * 10.0 / 50.0).ceil() as u64 * 50).max(100);
    if let Some(stall) = figures.cluster_stall {
        let through = super::cluster::ttl_through(stall);
        interval = interval.max((through / 4).div_ceil(50) * 50);
    }
    (interval * 4, interval)
}

/// What a planned handover's p50 may cost against a clean one's, measured
/// on the same database in the same run (issue 22).
const PLANNED_TARGET: f64 = 1.5;

/// The planned handover's p50 over the clean handover's (0 without a clean
/// one).
fn planned_ratio(figures: &Figures) -> f64 {
    let clean = p50(&figures.handover);
    if clean > 0.0 {
        p50(&figures.planned_handover) / clean
    } else {
        0.0
    }
}

/// Prints the figures as a table or as one JSON object.
pub fn print(figures: &Figures, backend: &Backend, json: bool, took: Duration) {
    let (ttl, interval) = recommend(figures);
    let row = |name: &str, samples: &[Duration]| (name.to_string(), p50(samples), max(samples));
    if json {
        let object = serde_json::json!({
            "rtt_p50_ms": round(p50(&figures.rtt)),
            "renew_p50_ms": round(p50(&figures.renew)),
            "renew_p99_ms": round(quantile_ms(&figures.renew, 0.99)),
            "renew_floor_p50_ms": round(p50(&figures.renew_floor)),
            "clean_handover_p50_ms": round(p50(&figures.handover)),
            "clean_handover_max_ms": round(max(&figures.handover)),
            "clean_handover_floor_p50_ms": round(p50(&figures.handover_floor)),
            "planned_handover_p50_ms": round(p50(&figures.planned_handover)),
            "planned_handover_max_ms": round(max(&figures.planned_handover)),
            "planned_to_clean_handover_p50_ratio": round(planned_ratio(figures)),
            "crash_lag_p50_ms": round(p50(&figures.crash_lag)),
            "crash_lag_max_ms": round(max(&figures.crash_lag)),
            "recommended_ttl_ms": ttl,
            "recommended_interval_ms": interval,
        });
        println!("{object}");
        return;
    }
    println!(
        "picolease bench on {} ({} handover and crash rounds, contenders at ttl {:?}, took {:.1}s)",
        backend.place(),
        figures.handover.len(),
        figures.ttl,
        took.as_secs_f64()
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9}  {:>12}",
        "figure", "p50 ms", "p99 ms", "max ms", "floor p50 ms"
    );
    let lines = [
        (
            row("round trip (SELECT 1)", &figures.rtt),
            &figures.rtt,
            None,
        ),
        (
            row("renew through the driver", &figures.renew),
            &figures.renew,
            Some(&figures.renew_floor),
        ),
        (
            row("clean handover", &figures.handover),
            &figures.handover,
            Some(&figures.handover_floor),
        ),
        (
            row("planned handover (hand_over)", &figures.planned_handover),
            &figures.planned_handover,
            None,
        ),
        (
            row("crash takeover, lag past expiry", &figures.crash_lag),
            &figures.crash_lag,
            None,
        ),
    ];
    let connects = [
        ("connection set-up (as the URL says)", &figures.connect),
        ("connection set-up (plain text)", &figures.connect_plain),
    ];
    for ((name, median, most), samples, floor) in lines {
        let floor = floor.map_or(String::from("—"), |f| {
            let f50 = p50(f);
            if f50 > 0.0 {
                format!("{f50:.3} (x{:.1})", median / f50)
            } else {
                format!("{f50:.3}")
            }
        });
        println!(
            "{name:<34} {median:>9.3} {:>9.3} {most:>9.3}  {floor:>12}",
            quantile_ms(samples, 0.99)
        );
    }
    for (name, samples) in connects.iter().filter(|(_, s)| !s.is_empty()) {
        println!(
            "{name:<34} {:>9.3} {:>9.3} {:>9.3}  {:>12}",
            p50(samples),
            quantile_ms(samples, 0.99),
            max(samples),
            "—"
        );
    }
    println!(
        "planned handover / clean handover, p50: x{:.2} (target: within x{PLANNED_TARGET})",
        planned_ratio(figures)
    );
    println!(
        "floors: renew = the same UPDATE on a plain connection at the same pace; clean handover = release commit{} then acquire commit on plain connections",
        match backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) if target.has_release_notices() => {
                " with NOTIFY, its delivery,"
            }
            // No release notice on SQLite's floor, nor behind a pooler
            // without a direct notice connection (the driver polls);
            // MySQL's floor leaves its wake-up lock out.
            _ => "",
        }
    );
    if let Some(stall) = figures.cluster_stall {
        println!(
            "Galera: losing any node stalls every commit until it is evicted, about {:.1}s here (evs.suspect_timeout + 2s); a leader keeps its term through it at a ttl of 4/3 of that, {}ms or more (docs/operations.md §8)",
            stall.as_secs_f64(),
            super::cluster::ttl_through(stall)
        );
    }
    println!(
        "recommended: --ttl {ttl}ms --interval {interval}ms (interval: 10x the slowest renewal, at least 100ms{}; ttl: 4 intervals)",
        if figures.cluster_stall.is_some() {
            ", and a ttl through a Galera node's eviction"
        } else {
            ""
        }
    );
    println!("reproduce: {COMMAND}");
}

/// Three decimals are more than the clocks involved can tell.
fn round(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// Progress on stderr: one line rewritten in place on a terminal, one line
/// per stage otherwise (so logs stay readable).
pub struct Progress {
    terminal: bool,
    stage: Option<String>,
    shown_at: Option<std::time::Instant>,
}

impl Progress {
    pub fn new() -> Self {
        Progress {
            terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            stage: None,
            shown_at: None,
        }
    }

    /// Shows `what` at `done` of `total` (at most every 100 ms on a
    /// terminal; once per stage otherwise).
    pub fn step(&mut self, what: &str, done: usize, total: usize) {
        let new_stage = self.stage.as_deref() != Some(what);
        let due = self
            .shown_at
            .is_none_or(|at| at.elapsed() >= std::time::Duration::from_millis(100));
        let mut err = std::io::stderr().lock();
        if self.terminal && (new_stage || due) {
            let _ = write!(err, "\r\x1b[2Kbench: {what} {done}/{total}");
            let _ = err.flush();
            self.shown_at = Some(std::time::Instant::now());
        } else if !self.terminal && new_stage {
            let _ = writeln!(err, "bench: {what} ({total} samples)");
        }
        if new_stage {
            self.stage = Some(what.to_string());
        }
    }

    /// Ends the progress line.
    pub fn done(&mut self) {
        if self.terminal && self.stage.is_some() {
            eprint!("\r\x1b[2K");
        }
        self.stage = None;
    }
}
