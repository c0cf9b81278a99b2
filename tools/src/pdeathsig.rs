//! The one place the workspace uses `unsafe`: a `pre_exec` hook asking the
//! kernel to SIGKILL CMD when its parent (the guard) dies.
//!
//! `CommandExt::pre_exec` is `unsafe` because the closure runs in the child
//! between `fork` and `exec`, where only async-signal-safe calls are
//! allowed. The closure below makes exactly two system calls, `prctl` and
//! `getppid`, both async-signal-safe, allocates nothing and takes no lock.
//!
//! Linux only (`PR_SET_PDEATHSIG`): built under `all(target_os = "linux",
//! not(picolease_portable))`. Elsewhere `run -- CMD` is refused
//! ([`check_available`], exit 2) and `run` without CMD works as on Linux.
//! Why not do without: if the guard is SIGKILLed, nothing else stops CMD,
//! which would then run past its term. macOS and the BSDs could have a
//! third process watch the guard (kqueue `EVFILT_PROC` with `NOTE_EXIT`,
//! which nix wraps safely) and kill CMD's group, but that process can be
//! killed as well, and none of it could be run, let alone tested, on the
//! Linux machines that build this; FreeBSD's `procctl(PROC_PDEATHSIG_CTL)`
//! would be the closest match there. `--cfg picolease_portable` takes the
//! refusal path on Linux, so CI tests it.

#[cfg(all(target_os = "linux", not(picolease_portable)))]
pub use linux::die_with_parent;

use crate::failure::CliError;

/// `Ok` where CMD can be made to die with its guard; otherwise the error
/// `run -- CMD` (and `__guard`) stop with.
#[cfg(all(target_os = "linux", not(picolease_portable)))]
pub fn check_available() -> Result<(), CliError> {
    Ok(())
}

/// `Ok` where CMD can be made to die with its guard; otherwise the error
/// `run -- CMD` (and `__guard`) stop with.
#[cfg(not(all(target_os = "linux", not(picolease_portable))))]
pub fn check_available() -> Result<(), CliError> {
    Err(unavailable())
}

/// The platform, as the refusal names it.
#[cfg(all(target_os = "linux", picolease_portable))]
const PLATFORM: &str = "Linux built with --cfg picolease_portable";
/// The platform, as the refusal names it (`macos`, `freebsd`, …).
#[cfg(not(target_os = "linux"))]
const PLATFORM: &str = std::env::consts::OS;

/// The one-line refusal of `run -- CMD` (a usage error: exit 2).
#[cfg(not(all(target_os = "linux", not(picolease_portable))))]
pub fn unavailable() -> CliError {
    CliError::usage(format!(
        "run -- CMD is not supported on {PLATFORM}: nothing would stop CMD if its guard process were killed \
         (the parent-death signal, PR_SET_PDEATHSIG, is Linux-only); run without -- CMD works here"
    ))
}

/// The hook itself, the one module allowed `unsafe`.
#[cfg(all(target_os = "linux", not(picolease_portable)))]
#[allow(unsafe_code)]
mod linux {
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    use nix::sys::signal::Signal;

    /// Makes the command's process receive SIGKILL when the process
    /// spawning it exits, and exit at once if that already happened before
    /// the request took effect.
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
                // The parent may have died between fork and prctl: the
                // signal would then never come.
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
                }
                Ok(())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    #[test]
    fn on_linux_a_command_can_be_tied_to_its_guard() {
        assert!(check_available().is_ok());
    }

    /// The error the command `line` (words split at spaces) ends with.
    #[cfg(not(all(target_os = "linux", not(picolease_portable))))]
    fn dispatch(line: &str) -> CliError {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(line.split(' ')).unwrap();
        crate::commands::dispatch(cli).unwrap_err()
    }

    /// Where there is no parent-death signal, `run -- CMD` stops before it
    /// touches the database, with exit 2 and one line naming the platform;
    /// `__guard` refuses alike.
    #[cfg(not(all(target_os = "linux", not(picolease_portable))))]
    #[test]
    fn elsewhere_run_with_a_command_is_refused_with_exit_2_naming_the_platform() {
        let dir = tempfile::tempdir().unwrap();
        // A path whose parent does not exist: opening it would fail with
        // another error, so the refusal must come first.
        let db = format!("sqlite://{}/missing/a.db", dir.path().display());
        let error = dispatch(&format!("picolease --db {db} run --name job -- true"));
        assert!(matches!(error, CliError::Usage(_)), "{error:?}");
        assert_eq!(error.exit_code(), std::process::ExitCode::from(2));
        let message = error.to_string();
        assert!(message.contains(PLATFORM), "{message}");
        assert!(
            message.starts_with("run -- CMD is not supported"),
            "{message}"
        );
        assert!(!message.contains('\n'));

        let guard = dispatch("picolease __guard --grace-ms 0 --deadline-ns 0 -- true");
        assert_eq!(guard.to_string(), message);
    }
}
