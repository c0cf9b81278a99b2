//! `run`'s end of the socket to one term's guard (`crate::guard`, whose
//! docs give the protocol): starting the guard with CMD, the term's
//! deadline and its environment, sending it lines, and reading its
//! reports.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use picolease::Term;

use super::child::ChildStatus;
use crate::guard::message;

/// What the guard says.
pub(super) enum Report {
    Pid(u32),
    Status(ChildStatus),
    Error(String),
}

impl Report {
    pub(super) fn status(self) -> Option<ChildStatus> {
        match self {
            Report::Status(status) => Some(status),
            _ => None,
        }
    }

    fn parse(line: &str) -> Option<Self> {
        let (kind, rest) = line.split_once(' ')?;
        Some(match kind {
            message::PID => Report::Pid(rest.trim().parse().ok()?),
            message::CODE => Report::Status(ChildStatus::Code(rest.trim().parse().ok()?)),
            message::SIGNAL => Report::Status(ChildStatus::Signal(rest.trim().to_string())),
            message::ERROR => Report::Error(rest.to_string()),
            _ => return None,
        })
    }
}

/// The guard process of one term and the socket to it.
pub(super) struct Guard {
    process: std::process::Child,
    socket: UnixStream,
    /// What the guard reports, line by line.
    pub(super) reports: mpsc::Receiver<Report>,
}

impl Guard {
    pub(super) fn start(
        command: &[String],
        grace: Duration,
        deadline: Duration,
        term: &Term,
        node: &str,
    ) -> Result<Guard, String> {
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| format!("cannot create the guard's socket: {e}"))?;
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the picolease binary for the guard: {e}"))?;
        let process = std::process::Command::new(exe)
            .arg("__guard")
            .arg("--grace-ms")
            .arg(grace.as_millis().to_string())
            .arg("--deadline-ns")
            .arg(deadline.as_nanos().to_string())
            .arg("--")
            .args(command)
            .env("PICOLEASE_NAME", term.lease().as_str())
            .env("PICOLEASE_NODE", node)
            .env("PICOLEASE_HOLDER", term.holder().as_str())
            .env("PICOLEASE_EPOCH", term.epoch().to_string())
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .spawn()
            .map_err(|e| format!("cannot start the guard of {:?}: {e}", command[0]))?;
        let (tx, reports) = mpsc::channel();
        let reader = ours.try_clone().map_err(|e| format!("guard socket: {e}"))?;
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines().map_while(Result::ok) {
                if let Some(report) = Report::parse(&line) {
                    if tx.send(report).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Guard {
            process,
            socket: ours,
            reports,
        })
    }

    pub(super) fn send(&mut self, line: &str) {
        // A guard that is gone has stopped CMD already.
        let _ = writeln!(self.socket, "{line}");
    }

    /// Waits for the guard's report of CMD's end (it comes by the
    /// deadline at the latest: the guard kills CMD then).
    pub(super) fn wait_status(&mut self) -> ChildStatus {
        while let Ok(report) = self.reports.recv() {
            if let Some(status) = report.status() {
                return status;
            }
        }
        // The guard died without reporting: the kernel killed CMD with it.
        ChildStatus::Signal("SIGKILL".into())
    }

    pub(super) fn reap(mut self) {
        let _ = self.process.wait();
    }
}
