//! `picolease timeline`: a picture of a run. Reads `run --json` streams
//! (files, or stdin), merges them by time, and writes one self-contained
//! HTML page: who led which lease when, the leaderless gaps beside their
//! bounds, crashes, handovers and CMD's starts and ends as marks, and any
//! moment two processes led one lease in red. Two leaders are also named
//! on stderr, with exit 1, so the command is a checker for anyone's
//! black-box test. `demo`, `simulate` and `check` write the same lines
//! for their own runs (`--timeline FILE`).

mod aggregate;
mod analysis;
mod events;
pub mod from_core;
mod html;
mod lanes;
mod terms;

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::failure::CliError;
use crate::output::line;

use analysis::DEFAULT_TTL_MS;

/// What to draw and where.
pub struct TimelineArgs<'a> {
    /// `run --json` streams; `-` (or none) is stdin.
    pub inputs: &'a [String],
    /// The page to write.
    pub output: &'a Path,
    /// The ttl of terms whose lines do not say it.
    pub ttl: Duration,
    /// The page's title.
    pub title: Option<&'a str>,
}

/// Reads the streams, writes the page, reports; exit 1 when two processes
/// led one lease at once.
pub fn run(args: &TimelineArgs) -> Result<ExitCode, CliError> {
    let started = Instant::now();
    let mut events = Vec::new();
    let stdin_only = [String::from("-")];
    let inputs = if args.inputs.is_empty() {
        &stdin_only[..]
    } else {
        args.inputs
    };
    for input in inputs {
        let text = if input == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::usage(format!("cannot read stdin: {e}")))?;
            text
        } else {
            std::fs::read_to_string(input)
                .map_err(|e| CliError::usage(format!("cannot read {input}: {e}")))?
        };
        let source = if input == "-" {
            "stdin"
        } else {
            input.as_str()
        };
        events.extend(events::parse_stream(source, &text, events.len())?);
    }
    if events.is_empty() {
        return Err(CliError::usage(format!(
            "no events in {}: give the lines of `run --json` (or of demo/simulate/check --timeline)",
            inputs.join(", ")
        )));
    }
    let ttl_ms = i64::try_from(args.ttl.as_millis()).unwrap_or(i64::MAX);
    let analysis = terms::analyse(&events::merge(events), ttl_ms);
    let title = args.title.map_or_else(
        || format!("picolease timeline of {}", inputs.join(", ")),
        str::to_string,
    );
    write_page(&analysis, &title, args.output)?;
    report(&analysis, args.output, started.elapsed(), false)
}

/// Writes the page of already merged events (`demo`, `simulate` and
/// `check` call this with the lines of their own runs) and reports as
/// `timeline` does.
pub fn write_lines(
    lines: &[String],
    title: &str,
    output: &Path,
    say_on_stderr: bool,
) -> Result<ExitCode, CliError> {
    let started = Instant::now();
    let events = events::parse_stream("the run", &lines.join("\n"), 0)?;
    let analysis = terms::analyse(&events::merge(events), DEFAULT_TTL_MS);
    write_page(&analysis, title, output)?;
    report(&analysis, output, started.elapsed(), say_on_stderr)
}

fn write_page(analysis: &analysis::Analysis, title: &str, output: &Path) -> Result<(), CliError> {
    let page = html::page(analysis, title);
    // Not a file (`/dev/stdout`, a pipe): written as it is.
    if output.exists() && !output.is_file() {
        return std::fs::write(output, page)
            .map_err(|e| CliError::runtime(format!("cannot write {}: {e}", output.display())));
    }
    // Written beside its place and renamed over it: a reader never sees
    // half a page.
    let partial = output.with_extension("html.partial");
    std::fs::write(&partial, page)
        .and_then(|()| std::fs::rename(&partial, output))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            CliError::runtime(format!("cannot write {}: {e}", output.display()))
        })
}

fn report(
    analysis: &analysis::Analysis,
    output: &Path,
    took: Duration,
    say_on_stderr: bool,
) -> Result<ExitCode, CliError> {
    let longest = analysis.gaps.iter().max_by_key(|g| g.len_ms());
    let say = |text: &str| match say_on_stderr {
        true => eprintln!("{text}"),
        false => line(text),
    };
    say(&format!(
        "wrote {} in {} ms: {}, {}, {}, {}{}, {} late reports of a term's end, {} overlaps",
        output.display(),
        took.as_millis(),
        html::count(analysis.nodes.len(), "process", "processes"),
        html::count(analysis.leases.len(), "lease", "leases"),
        html::count(analysis.terms.len(), "term", "terms"),
        html::count(analysis.gaps.len(), "leaderless gap", "leaderless gaps"),
        longest.map_or(String::new(), |g| format!(
            " (longest {} ms on {}, after {}; bound {} ms)",
            g.len_ms(),
            g.lease,
            g.after,
            g.bound_ms
        )),
        analysis.late_reports.len(),
        analysis.overlaps.len(),
    ));
    for gap in analysis
        .gaps
        .iter()
        .filter(|g| !g.unknown_start && g.len_ms() > g.bound_ms)
    {
        eprintln!(
            "warning: {} had no leader for {} ms after {}, beyond its bound of {} ms",
            gap.lease,
            gap.len_ms(),
            gap.after,
            gap.bound_ms
        );
    }
    for overlap in &analysis.overlaps {
        eprintln!(
            "error: two leaders of {} for {} ms from unix_ms {}: {} (epoch {}) and {} (epoch {}): {} | {}",
            overlap.lease,
            overlap.to_ms - overlap.from_ms,
            overlap.from_ms,
            overlap.first.node,
            overlap.first.epoch.map_or("?".to_string(), |e| e.to_string()),
            overlap.second.node,
            overlap.second.epoch.map_or("?".to_string(), |e| e.to_string()),
            overlap.first.start_json,
            overlap.second.start_json,
        );
    }
    Ok(if analysis.overlaps.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
