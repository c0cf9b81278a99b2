//! `run --health-cmd`: the health probe (DESIGN §5 "Work that fails").
//! A thread runs the command with `sh -c` every interval; exit 0 within
//! the timeout is healthy, anything else unhealthy, with a reason (the
//! exit code or signal and the last line the command printed, or the
//! timeout). Each change of verdict, and the first, goes to `run`'s loop,
//! which prints it and tells the core.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How often a running probe is looked at for its end.
const POLL: Duration = Duration::from_millis(10);

/// The most of a probe's output kept for its reason.
const OUTPUT_CAP: usize = 4096;

/// The probe's settings.
#[derive(Clone, Debug)]
pub struct ProbeSpec {
    /// The shell command.
    pub command: String,
    /// How often it runs.
    pub every: Duration,
    /// How long one run may take.
    pub timeout: Duration,
}

/// Runs the probe on its own thread; `report(healthy, reason)` gets the
/// first verdict and every change, and returns false to stop the probe.
pub fn start(
    spec: ProbeSpec,
    report: impl Fn(bool, String) -> bool + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("picolease-probe".into())
        .spawn(move || {
            let mut last = None;
            loop {
                let verdict = probe_once(&spec);
                let healthy = verdict.is_ok();
                if last != Some(healthy) {
                    last = Some(healthy);
                    let reason = match verdict {
                        Ok(reason) | Err(reason) => reason,
                    };
                    if !report(healthy, reason) {
                        return;
                    }
                }
                std::thread::sleep(spec.every);
            }
        })
        .map(|_| ())
}

/// One run: `Ok(reason)` when healthy, `Err(reason)` when not.
fn probe_once(spec: &ProbeSpec) -> Result<String, String> {
    // Output goes to a file, not a pipe: a probe that leaves a process
    // behind holding its output must not hang the read.
    let cannot = |e: std::io::Error| format!("cannot start the probe {:?}: {e}", spec.command);
    let mut output = tempfile::tempfile().map_err(cannot)?;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&spec.command)
        .stdin(Stdio::null())
        .stdout(Stdio::from(output.try_clone().map_err(cannot)?))
        .stderr(Stdio::from(output.try_clone().map_err(cannot)?))
        .spawn()
        .map_err(cannot)?;
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= spec.timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the probe took longer than {}",
                    crate::duration::show(spec.timeout)
                ));
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => return Err(format!("cannot wait for the probe: {e}")),
        }
    };
    let said = last_line(&mut output);
    if status.success() {
        return Ok(if said.is_empty() {
            "the probe exited with code 0".to_string()
        } else {
            said
        });
    }
    let how = match status.code() {
        Some(code) => format!("the probe exited with code {code}"),
        None => "the probe was ended by a signal".to_string(),
    };
    Err(if said.is_empty() {
        how
    } else {
        format!("{how}: {said}")
    })
}

/// The last non-empty line the probe wrote (stdout and stderr alike).
fn last_line(output: &mut std::fs::File) -> String {
    use std::io::{Seek, SeekFrom};
    let mut text = String::new();
    let length = output.seek(SeekFrom::End(0)).unwrap_or(0);
    let from = length.saturating_sub(OUTPUT_CAP as u64);
    if output.seek(SeekFrom::Start(from)).is_ok() {
        let mut bytes = Vec::new();
        let _ = output.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().chars().take(200).collect::<String>())
        .unwrap_or_default()
}

/// What `/healthz` and the metrics report of the work (DESIGN §5): the
/// probe's last verdict and the failures counted.
#[derive(Debug, Default)]
pub struct WorkHealth {
    /// The probe's last verdict and reason; `None` without a probe, or
    /// before its first run.
    pub probe: Mutex<Option<(bool, String)>>,
    /// CMD's failures under `--restart on-failure`.
    pub failures: AtomicU64,
}

impl WorkHealth {
    /// Registers the series at their start (healthy until a probe says
    /// otherwise, no failures), so a dashboard sees them at once.
    pub fn register(&self, leases: &[picolease::LeaseName]) {
        for lease in leases {
            metrics::gauge!("picolease_healthy", "lease" => lease.as_str().to_string()).set(1.0);
            metrics::counter!("picolease_work_failures_total", "lease" => lease.as_str().to_string())
                .absolute(0);
        }
    }

    /// Records a verdict of the probe.
    pub fn heard(&self, lease: &str, healthy: bool, reason: &str) {
        *self.probe.lock().unwrap_or_else(|p| p.into_inner()) = Some((healthy, reason.to_string()));
        metrics::gauge!("picolease_healthy", "lease" => lease.to_string()).set(if healthy {
            1.0
        } else {
            0.0
        });
    }

    /// Records a failure of CMD.
    pub fn failed(&self, lease: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("picolease_work_failures_total", "lease" => lease.to_string())
            .increment(1);
    }

    /// The probe's verdict (`None` without one) and the failures.
    pub fn read(&self) -> (Option<(bool, String)>, u64) {
        (
            self.probe.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            self.failures.load(Ordering::Relaxed),
        )
    }
}
