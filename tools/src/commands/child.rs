//! `run -- CMD`: the command runs only while this node leads.
//!
//! It is gated work like any other: started at the start of a term, in its
//! own process group with the term in its environment; on demotion the
//! group gets SIGTERM, then SIGKILL after the grace period. The driver
//! joins this work before its next statement, so the command is gone
//! before the lease is released or contended for again. The same code
//! serves both backends: only how a term's end is noticed differs.

use std::os::unix::process::CommandExt;
use std::process::{Child, ExitStatus};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use picolease::{Epoch, HolderId, LeaseName};

/// What the supervisor reports to the main loop.
#[derive(Debug)]
pub enum ChildEvent {
    /// CMD exited by itself while this node led.
    Exited(ExitStatus),
    /// CMD could not be started.
    SpawnFailed(String),
}

const POLL: Duration = Duration::from_millis(20);

/// `-- CMD`, as gated work of either backend: [`Gated::run_term`] runs it
/// for one term. The SQLite driver calls it on its work thread; the
/// PostgreSQL driver on a blocking thread of its runtime (see
/// `crate::backend`).
#[derive(Debug)]
pub struct Gated {
    command: Vec<String>,
    grace: Duration,
    events: mpsc::Sender<ChildEvent>,
}

impl Gated {
    /// CMD with its arguments, the grace between SIGTERM and SIGKILL, and
    /// where to report its own exit.
    pub fn new(command: Vec<String>, grace: Duration, events: mpsc::Sender<ChildEvent>) -> Self {
        Gated {
            command,
            grace,
            events,
        }
    }

    /// Runs CMD for the term at `epoch` until it exits by itself (reported
    /// as [`ChildEvent::Exited`]) or the term ends, then stops it: SIGTERM
    /// to its group, SIGKILL after the grace period, reaped before this
    /// returns. `ended(timeout)` sleeps up to `timeout`, waking early when
    /// the term ends, and says whether it has.
    pub fn run_term(
        &self,
        lease: &LeaseName,
        node: &HolderId,
        epoch: Epoch,
        ended: impl Fn(Duration) -> bool,
    ) {
        let send = |event| {
            let _ = self.events.send(event);
        };
        let Some((program, args)) = self.command.split_first() else {
            return;
        };
        if ended(Duration::ZERO) {
            // The term was over before its work started.
            return;
        }
        let spawned = std::process::Command::new(program)
            .args(args)
            .env("PICOLEASE_NAME", lease.as_str())
            .env("PICOLEASE_NODE", node.as_str())
            .env("PICOLEASE_EPOCH", epoch.to_string())
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                send(ChildEvent::SpawnFailed(format!(
                    "cannot start {program:?}: {e}"
                )));
                return;
            }
        };
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    // Whatever it left behind in its group goes too.
                    signal_group(&child, Signal::SIGKILL);
                    send(ChildEvent::Exited(status));
                    return;
                }
                Ok(None) => {}
                Err(e) => {
                    send(ChildEvent::SpawnFailed(format!(
                        "cannot wait for {program:?}: {e}"
                    )));
                    break;
                }
            }
            if ended(POLL) {
                break;
            }
        }
        stop(&mut child, self.grace);
    }
}

fn signal_group(child: &Child, signal: Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // ESRCH (already gone) is fine.
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// SIGTERM to the group, SIGKILL after `grace`, and reap.
fn stop(child: &mut Child, grace: Duration) {
    signal_group(child, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(POLL);
    }
    signal_group(child, Signal::SIGKILL);
    let _ = child.wait();
}

/// The exit code that mirrors CMD's status (128 + signal when killed).
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}
