//! The one place the workspace uses `unsafe`: a `pre_exec` hook asking the
//! kernel to SIGKILL CMD when its parent (the guard) dies.
//!
//! `CommandExt::pre_exec` is `unsafe` because the closure runs in the child
//! between `fork` and `exec`, where only async-signal-safe calls are
//! allowed. The closure below makes exactly two system calls, `prctl` and
//! `getppid`, both async-signal-safe, allocates nothing and takes no lock.
#![allow(unsafe_code)]

use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::signal::Signal;

/// Makes the command's process receive SIGKILL when the process spawning
/// it exits, and exit at once if that already happened before the request
/// took effect.
pub fn die_with_parent(command: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the hook runs in the forked child before `exec`. It calls
    // only `prctl(PR_SET_PDEATHSIG)` and `getppid` (async-signal-safe
    // system calls), allocates nothing, touches no lock, and returns an
    // `io::Error` built from a raw errno (no allocation) on failure.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|errno| std::io::Error::from_raw_os_error(errno as i32))?;
            // The parent may have died between fork and prctl: the signal
            // would then never come.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
}
