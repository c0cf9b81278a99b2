//! The guard: a small process (this same binary, `picolease __guard`)
//! between `picolease run` and CMD, so that CMD and its whole process group
//! die with the term whatever happens to `run` (DESIGN §4b).
//!
//! ```text
//!   picolease run ──socket──▶ picolease __guard ──parent of──▶ CMD (own process group)
//!   "deadline N" / "stop"      SIGTERM at N − grace,           PR_SET_PDEATHSIG: SIGKILL
//!   ◀── "pid P" / "code C" …   SIGKILL at N
//! ```
//!
//! - `run` hands the guard the leader's deadline (`CLOCK_BOOTTIME`
//!   nanoseconds, the same number in every process of the host) at the
//!   start of the term and again after every renewal. The guard needs
//!   nothing else: if `run` is SIGSTOPped or hung, no extension comes, and
//!   the guard sends SIGTERM to CMD's group at the deadline minus the grace
//!   and SIGKILL at the deadline.
//! - If `run` dies (SIGKILL, the OOM killer), the kernel closes its end of
//!   the socket: the guard stops CMD at once (SIGTERM, SIGKILL after the
//!   grace, and never later than the deadline).
//! - If the guard itself is killed, CMD gets SIGKILL from the kernel
//!   (parent-death signal).
//! - The guard reaps CMD itself, and signals CMD's group *before* reaping
//!   its leader, so the group id cannot have been reused.
//! - SIGTERM, SIGINT and SIGHUP (a closed terminal) make the guard stop CMD
//!   as `run` would.
//!
//! It reports CMD's pid when it starts and CMD's status when it ends, and
//! with the status whether it had signalled CMD's group by then (for any
//! of the reasons above: its deadline, a `stop`, `run` gone, its own
//! signal). That is how `run` tells a CMD stopped at the term's planned
//! end from one that exited by itself, even when the guard's SIGTERM at
//! `deadline − grace` comes before the core's own stop at the same instant
//! and CMD exits with a code (143 from a shell's trap, 0 from a graceful
//! handler) before the term has ended in `run` (DESIGN §4b).
//!
//! The protocol, one line each way per message ([`message`]):
//!
//! ```text
//!   run → guard:  deadline NANOS          the term's deadline moved (boottime)
//!                 stop                    stop CMD now
//!   guard → run:  pid P                   CMD started
//!                 error TEXT              CMD could not be started
//!                 code C | signal NAME    CMD ended before the guard signalled it
//!                 stopped code C          CMD ended after the guard had
//!                 stopped signal NAME       signalled its group
//! ```
//!
//! Linux only. The guard's promise needs the parent-death signal (the
//! third point), which only Linux has (`crate::pdeathsig`), and it waits
//! for CMD with `waitid(WNOWAIT)`, which nix does not offer on macOS. So
//! the guard proper (`linux` below) is built under `all(target_os =
//! "linux", not(picolease_portable))`; elsewhere [`run`] refuses, as
//! `run -- CMD` does before it would start a guard.

/// A message on the socket, one per line.
pub mod message {
    /// `run` → guard: the term's deadline moved to boottime `nanos`.
    pub const DEADLINE: &str = "deadline";
    /// `run` → guard: stop CMD (SIGTERM, SIGKILL after the grace).
    pub const STOP: &str = "stop";
    /// guard → `run`: CMD started with this pid.
    pub const PID: &str = "pid";
    /// guard → `run`: CMD exited with this code.
    pub const CODE: &str = "code";
    /// guard → `run`: CMD was ended by this signal.
    pub const SIGNAL: &str = "signal";
    /// guard → `run`: put before `code …` or `signal …` when the guard had
    /// sent CMD's group SIGTERM or SIGKILL before CMD ended (`stopped code
    /// 143`): CMD did not exit by itself, whatever its status says.
    pub const STOPPED: &str = "stopped";
    /// guard → `run`: CMD could not be started.
    pub const ERROR: &str = "error";
}

#[cfg(all(target_os = "linux", not(picolease_portable)))]
pub use linux::run;

/// Without the parent-death signal a killed guard would leave CMD running
/// past its term: refused, with the message `run -- CMD` gives (exit 2).
#[cfg(not(all(target_os = "linux", not(picolease_portable))))]
pub fn run(
    _grace: std::time::Duration,
    _deadline: std::time::Duration,
    _command: &[String],
) -> Result<std::process::ExitCode, crate::failure::CliError> {
    Err(crate::pdeathsig::unavailable())
}

/// The guard proper: Linux only (see the module docs).
#[cfg(all(target_os = "linux", not(picolease_portable)))]
mod linux {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{ExitCode, ExitStatus, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    use nix::sys::signal::{killpg, Signal};
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    use nix::unistd::Pid;
    use picolease::boottime;

    use super::message;
    use crate::failure::CliError;

    /// The longest the guard sleeps before reading the clock again: its
    /// sleeps run on the monotonic clock, which stops during a suspend.
    const LONGEST_WAIT: Duration = Duration::from_millis(250);

    /// What reaches the guard's loop.
    enum Event {
        /// A new deadline (boottime).
        Deadline(Duration),
        /// Stop CMD now (the term ended, or a signal).
        Stop,
        /// `run` is gone.
        Orphaned,
        /// CMD exited (not reaped yet).
        Exited,
    }

    /// Runs the guard: stdin is the socket to `run`.
    pub fn run(
        grace: Duration,
        deadline: Duration,
        command: &[String],
    ) -> Result<ExitCode, CliError> {
        let socket = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map(UnixStream::from)
            .map_err(|e| CliError::runtime(format!("guard: no control socket: {e}")))?;
        let mut report = socket
            .try_clone()
            .map_err(|e| CliError::runtime(format!("guard: {e}")))?;
        let Some((program, args)) = command.split_first() else {
            return Err(CliError::usage("guard: no command to run"));
        };
        let mut cmd = std::process::Command::new(program);
        cmd.args(args).process_group(0).stdin(Stdio::null());
        crate::pdeathsig::die_with_parent(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let _ = writeln!(report, "{} cannot start {program:?}: {e}", message::ERROR);
                return Ok(ExitCode::from(1));
            }
        };
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let _ = writeln!(report, "{} {pid}", message::PID);

        let (events, inbox) = mpsc::channel();
        listen(socket, events.clone());
        watch_exit(pid, events.clone());
        watch_signals(events);

        let mut term = Term::new(pid, grace, deadline);
        loop {
            let now = boottime();
            term.act(now);
            let wait = term.next_action(now).min(LONGEST_WAIT);
            match inbox.recv_timeout(wait) {
                Ok(Event::Deadline(at)) => term.deadline = at,
                Ok(Event::Stop) | Ok(Event::Orphaned) => term.stop(boottime()),
                Ok(Event::Exited) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        // The leader is a zombie until reaped: its group id is still ours.
        let _ = killpg(pid, Signal::SIGKILL);
        let status = child
            .wait()
            .map_err(|e| CliError::runtime(format!("guard: cannot reap {pid}: {e}")))?;
        let _ = writeln!(report, "{}", describe(status, term.signalled()));
        Ok(ExitCode::SUCCESS)
    }

    /// `code C` or `signal NAME`, after `stopped ` when the guard had
    /// signalled CMD's group before it ended.
    fn describe(status: ExitStatus, signalled: bool) -> String {
        let how = match (status.code(), status.signal()) {
            (Some(code), _) => format!("{} {code}", message::CODE),
            (None, Some(signal)) => {
                let name =
                    Signal::try_from(signal).map_or_else(|_| signal.to_string(), |s| s.to_string());
                format!("{} {name}", message::SIGNAL)
            }
            (None, None) => format!("{} 1", message::CODE),
        };
        if signalled {
            format!("{} {how}", message::STOPPED)
        } else {
            how
        }
    }

    /// The signals the guard sends, and when.
    struct Term {
        group: Pid,
        grace: Duration,
        deadline: Duration,
        /// SIGKILL no later than this, once a stop was asked.
        stop_by: Option<Duration>,
        termed: bool,
        killed: bool,
    }

    impl Term {
        fn new(group: Pid, grace: Duration, deadline: Duration) -> Self {
            Term {
                group,
                grace,
                deadline,
                stop_by: None,
                termed: false,
                killed: false,
            }
        }

        /// When SIGKILL is due: the deadline, or sooner after a stop.
        fn kill_at(&self) -> Duration {
            self.stop_by
                .map_or(self.deadline, |by| by.min(self.deadline))
        }

        /// When SIGTERM is due: the grace before the kill.
        fn term_at(&self) -> Duration {
            match self.stop_by {
                Some(_) => Duration::ZERO,
                None => self.deadline.saturating_sub(self.grace),
            }
        }

        /// True once SIGTERM or SIGKILL went to CMD's group (the last
        /// SIGKILL, after CMD's leader exited, is not counted: CMD had
        /// ended by then).
        fn signalled(&self) -> bool {
            self.termed || self.killed
        }

        fn stop(&mut self, now: Duration) {
            self.stop_by.get_or_insert(now + self.grace);
        }

        /// Sends what is due at `now`.
        fn act(&mut self, now: Duration) {
            if !self.killed && now >= self.kill_at() {
                self.killed = true;
                let _ = killpg(self.group, Signal::SIGKILL);
            } else if !self.termed && !self.killed && now >= self.term_at() {
                self.termed = true;
                let _ = killpg(self.group, Signal::SIGTERM);
            }
        }

        /// How long until the next signal is due (long once both are sent).
        fn next_action(&self, now: Duration) -> Duration {
            let next = match (self.termed, self.killed) {
                (_, true) => return LONGEST_WAIT,
                (false, false) => self.term_at().min(self.kill_at()),
                (true, false) => self.kill_at(),
            };
            next.saturating_sub(now)
        }
    }

    /// Reads `run`'s messages; EOF or an error means `run` is gone.
    fn listen(socket: UnixStream, events: mpsc::Sender<Event>) {
        std::thread::spawn(move || {
            for line in BufReader::new(socket).lines() {
                let Ok(line) = line else { break };
                let event = match line.split_once(' ') {
                    Some((message::DEADLINE, nanos)) => match nanos.trim().parse::<u64>() {
                        Ok(nanos) => Event::Deadline(Duration::from_nanos(nanos)),
                        Err(_) => continue,
                    },
                    None if line.trim() == message::STOP => Event::Stop,
                    _ => continue,
                };
                if events.send(event).is_err() {
                    return;
                }
            }
            let _ = events.send(Event::Orphaned);
        });
    }

    /// Waits for CMD to exit without reaping it.
    fn watch_exit(pid: Pid, events: mpsc::Sender<Event>) {
        std::thread::spawn(move || {
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
            while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(pid), flags) {}
            let _ = events.send(Event::Exited);
        });
    }

    /// SIGTERM, SIGINT and SIGHUP stop CMD as `run` would.
    fn watch_signals(events: mpsc::Sender<Event>) {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]) else {
            return;
        };
        std::thread::spawn(move || {
            for _ in signals.forever() {
                if events.send(Event::Stop).is_err() {
                    return;
                }
            }
        });
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn ms(n: u64) -> Duration {
            Duration::from_millis(n)
        }

        #[test]
        fn without_extensions_sigterm_comes_a_grace_before_the_deadline_and_sigkill_at_it() {
            let term = Term::new(Pid::from_raw(0), ms(200), ms(1_000));
            assert_eq!(term.term_at(), ms(800));
            assert_eq!(term.kill_at(), ms(1_000));
            assert_eq!(term.next_action(ms(500)), ms(300));
        }

        #[test]
        fn a_stop_terminates_now_and_kills_after_the_grace_but_never_past_the_deadline() {
            let mut term = Term::new(Pid::from_raw(0), ms(200), ms(1_000));
            term.stop(ms(100));
            assert_eq!((term.term_at(), term.kill_at()), (ms(0), ms(300)));
            let mut late = Term::new(Pid::from_raw(0), ms(200), ms(1_000));
            late.stop(ms(900));
            assert_eq!(late.kill_at(), ms(1_000));
            // A second stop does not push the kill back.
            late.stop(ms(950));
            assert_eq!(late.kill_at(), ms(1_000));
        }

        #[test]
        fn a_grace_of_zero_kills_at_the_deadline() {
            let term = Term::new(Pid::from_raw(0), Duration::ZERO, ms(1_000));
            assert_eq!((term.term_at(), term.kill_at()), (ms(1_000), ms(1_000)));
        }

        #[test]
        fn statuses_are_described_by_code_or_signal_name() {
            assert_eq!(describe(ExitStatus::from_raw(7 << 8), false), "code 7");
            assert_eq!(describe(ExitStatus::from_raw(9), false), "signal SIGKILL");
        }

        #[test]
        fn a_status_after_the_guards_own_signal_says_stopped_whatever_cmd_exited_with() {
            // 143 from a shell's trap, 0 from a graceful handler.
            let graceful = ExitStatus::from_raw(0);
            assert_eq!(describe(graceful, true), "stopped code 0");
            assert_eq!(
                describe(ExitStatus::from_raw(143 << 8), true),
                "stopped code 143"
            );
            assert_eq!(
                describe(ExitStatus::from_raw(15), true),
                "stopped signal SIGTERM"
            );
        }

        #[test]
        fn the_guard_has_signalled_cmd_once_its_sigterm_or_sigkill_is_due() {
            let group = Pid::from_raw(i32::MAX);
            let mut term = Term::new(group, ms(200), ms(1_000));
            term.act(ms(799));
            assert!(!term.signalled(), "nothing due before deadline − grace");
            // The group does not exist: the signal fails, but was sent.
            term.act(ms(800));
            assert!(term.signalled(), "SIGTERM at deadline − grace");
            let mut stopped = Term::new(group, ms(200), ms(1_000));
            stopped.stop(ms(100));
            stopped.act(ms(100));
            assert!(stopped.signalled(), "SIGTERM at once on a stop");
        }
    }
}
