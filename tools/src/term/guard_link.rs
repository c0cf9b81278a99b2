//! `run`'s end of the socket to one term's guard (`crate::guard`, whose
//! docs give the protocol): starting the guard with CMD, the term's
//! deadline and its environment, sending it lines, and reading its
//! reports, CMD's end among them with whether the guard had signalled it.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use picolease::Term;

use super::status::ChildStatus;
use crate::guard::message;

/// CMD's end, as the guard reports it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Ended {
    pub(super) status: ChildStatus,
    /// The guard had signalled CMD's group before it ended.
    pub(super) stopped: bool,
}

/// What the guard says (the protocol is in `crate::guard`'s docs).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Report {
    Pid(u32),
    Ended(Ended),
    Error(String),
}

impl Report {
    fn parse(line: &str) -> Option<Self> {
        let (kind, rest) = line.split_once(' ')?;
        Some(match kind {
            message::PID => Report::Pid(rest.trim().parse().ok()?),
            message::STOPPED => match Report::parse(rest)? {
                Report::Ended(Ended { status, .. }) => Report::Ended(Ended {
                    status,
                    stopped: true,
                }),
                _ => return None,
            },
            message::CODE => Report::Ended(Ended {
                status: ChildStatus::Code(rest.trim().parse().ok()?),
                stopped: false,
            }),
            message::SIGNAL => Report::Ended(Ended {
                status: ChildStatus::Signal(rest.trim().to_string()),
                stopped: false,
            }),
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
            if let Report::Ended(ended) = report {
                return ended.status;
            }
        }
        // The guard died without reporting: the kernel killed CMD with it.
        ChildStatus::Signal("SIGKILL".into())
    }

    pub(super) fn reap(mut self) {
        let _ = self.process.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(status: ChildStatus, stopped: bool) -> Option<Report> {
        Some(Report::Ended(Ended { status, stopped }))
    }

    #[test]
    fn an_end_the_guard_caused_is_told_from_one_cmd_came_to_by_itself() {
        use ChildStatus::{Code, Signal};
        assert_eq!(Report::parse("code 0"), ended(Code(0), false));
        assert_eq!(
            Report::parse("signal SIGTERM"),
            ended(Signal("SIGTERM".into()), false)
        );
        // A shell's trap, a graceful handler: codes, yet stopped.
        assert_eq!(Report::parse("stopped code 143"), ended(Code(143), true));
        assert_eq!(Report::parse("stopped code 0"), ended(Code(0), true));
        assert_eq!(
            Report::parse("stopped signal SIGKILL"),
            ended(Signal("SIGKILL".into()), true)
        );
        assert_eq!(Report::parse("pid 42"), Some(Report::Pid(42)));
        // Nothing but a status may follow `stopped`.
        assert_eq!(Report::parse("stopped pid 42"), None);
        assert_eq!(Report::parse("stopped"), None);
    }
}
