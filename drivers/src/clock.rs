//! The clock the drivers time deadlines on (DESIGN §4b).
//!
//! A leader's deadline must keep running while the machine sleeps: a laptop
//! or VM suspended past the ttl must wake up as a follower. It must also
//! read the same in every process of the host: the CLI hands a deadline to
//! its guard process as a number. So the drivers read a system-wide clock
//! (through rustix, no hand-written FFI), the one that counts through
//! suspend where the OS has one:
//!
//! | OS | clock read | across a suspend |
//! | --- | --- | --- |
//! | Linux | `CLOCK_BOOTTIME` | counts (its `CLOCK_MONOTONIC`, which `std::time::Instant` reads, stops) |
//! | macOS | `CLOCK_MONOTONIC` | counts: Apple's `clock_gettime(3)` says it "will continue to increment while the system is asleep"; `Instant` reads `CLOCK_UPTIME_RAW` there, which stops |
//! | OpenBSD | `CLOCK_MONOTONIC` | counts: its `clock_gettime(2)` leaves out suspended time only from `CLOCK_RUNTIME` |
//! | FreeBSD | `CLOCK_MONOTONIC` | stops, as far as we know: FreeBSD commit 108de784 (2023) says it has no monotonic clock that counts suspended time yet, and makes `CLOCK_BOOTTIME` an alias of `CLOCK_MONOTONIC` (a 2024 review comment disputes it; not tested) |
//! | NetBSD, other Unixes | `CLOCK_MONOTONIC` | not checked |
//! | Linux built with `--cfg picolease_portable` | `CLOCK_MONOTONIC` | stops: this build only tests the other platforms' code on Linux |
//!
//! Where the clock stops, a leader suspended past its ttl wakes up still
//! believing it leads until its next renewal (within an interval) finds
//! the row taken; its fenced writes are refused meanwhile, but unfenced
//! gated work may run on that long.
//!
//! The Linux choice is made by one predicate, `all(target_os = "linux",
//! not(picolease_portable))`, the same one that turns the SQLite file
//! watch (inotify) on: `--cfg picolease_portable` builds, on Linux, the
//! code macOS and the BSDs run, so that CI compiles and tests it.
//!
//! The [`Clock`] trait is the seam: a test can hand a driver a clock that
//! jumps, as a suspend would, and see the node demote before its gated work
//! goes on.

use std::sync::Arc;
use std::time::Duration;

/// A clock that never goes back: time since some fixed origin.
pub trait Clock: Send + Sync + 'static {
    /// The time now, since the clock's origin.
    fn now(&self) -> Duration;
}

/// The system's suspend-aware clock: `CLOCK_BOOTTIME` on Linux,
/// `CLOCK_MONOTONIC` on the other Unixes (see the module docs for what each
/// does across a suspend).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        boottime()
    }
}

/// `CLOCK_BOOTTIME`: time since boot, including suspend. The same value in
/// every process of the host, so a deadline can be handed to another
/// process (the CLI's guard) as a number. Elsewhere the clock of the same
/// role (see the module docs): the name is the Linux one.
#[cfg(all(target_os = "linux", not(picolease_portable)))]
pub fn boottime() -> Duration {
    read(rustix::time::ClockId::Boottime)
}

/// Outside Linux (or under `--cfg picolease_portable`): `CLOCK_MONOTONIC`,
/// system-wide like `CLOCK_BOOTTIME`; whether it counts through a suspend
/// depends on the OS (see the module docs).
#[cfg(all(unix, not(all(target_os = "linux", not(picolease_portable)))))]
pub fn boottime() -> Duration {
    read(rustix::time::ClockId::Monotonic)
}

/// A clock's reading as time since its origin (never negative).
#[cfg(unix)]
fn read(clock: rustix::time::ClockId) -> Duration {
    let t = rustix::time::clock_gettime(clock);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Not a Unix (not a supported platform): std's monotonic clock since the
/// first call, which no other process shares.
#[cfg(not(unix))]
pub fn boottime() -> Duration {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed()
}

/// The longest a driver loop sleeps before reading its clock again. Sleeps
/// run on the monotonic clock, which stops during suspend; after a resume
/// the loop notices a passed deadline within this.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// The clock a driver was given (the system's unless a test swapped it).
pub(crate) type SharedClock = Arc<dyn Clock>;

/// The system clock, shared.
pub(crate) fn system() -> SharedClock {
    Arc::new(SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boottime_advances_and_is_at_least_the_monotonic_time_since_boot() {
        let a = boottime();
        std::thread::sleep(Duration::from_millis(5));
        let b = boottime();
        assert!(b >= a + Duration::from_millis(5), "{a:?} then {b:?}");
        assert!(a > Duration::ZERO);
    }

    /// `CLOCK_BOOTTIME` is `CLOCK_MONOTONIC` plus the time spent suspended.
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    #[test]
    fn on_linux_the_clock_is_never_behind_the_monotonic_clock() {
        let monotonic = read(rustix::time::ClockId::Monotonic);
        assert!(boottime() >= monotonic);
    }

    /// The fallback is the system-wide `CLOCK_MONOTONIC`, not a per-process
    /// origin: the guard process must read the same deadline.
    #[cfg(all(unix, not(all(target_os = "linux", not(picolease_portable)))))]
    #[test]
    fn elsewhere_the_clock_is_the_system_wide_monotonic_clock() {
        let before = read(rustix::time::ClockId::Monotonic);
        let now = boottime();
        let after = read(rustix::time::ClockId::Monotonic);
        assert!(
            before <= now && now <= after,
            "{before:?} {now:?} {after:?}"
        );
    }
}
