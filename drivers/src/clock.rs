//! The clock the drivers time deadlines on (DESIGN §4b).
//!
//! A leader's deadline must keep running while the machine sleeps: a laptop
//! or VM suspended past the ttl must wake up as a follower. Linux's
//! `CLOCK_MONOTONIC` (what `std::time::Instant` reads) stops during
//! suspend; `CLOCK_BOOTTIME` does not, so the drivers read that (through
//! rustix, no hand-written FFI). Elsewhere they fall back to the monotonic
//! clock.
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

/// The system's suspend-aware clock: `CLOCK_BOOTTIME` on Linux.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        boottime()
    }
}

/// `CLOCK_BOOTTIME`: time since boot, including suspend. The same value in
/// every process of the host, so a deadline can be handed to another
/// process (the CLI's guard) as a number.
#[cfg(target_os = "linux")]
pub fn boottime() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Outside Linux: the monotonic clock since the first call.
#[cfg(not(target_os = "linux"))]
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
}
