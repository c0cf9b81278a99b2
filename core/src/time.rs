//! Time as the core sees it: a monotonic instant supplied by the caller.
//!
//! The core never reads a clock. A driver picks an origin (for example the
//! `std::time::Instant` at which it started) and passes the nanoseconds
//! elapsed since then; the simulator passes virtual time. Keeping the type
//! our own (rather than `std::time::Instant`) lets the simulator and the
//! fuzzer construct any instant they like, bit for bit reproducibly.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point on a node's local monotonic clock, in nanoseconds since an origin
/// chosen by the driver. Arithmetic saturates: no input can make it panic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The origin of the clock.
    pub const ZERO: Instant = Instant(0);

    /// The instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// Nanoseconds in a duration, saturating at `u64::MAX` (about 584 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(d)))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(nanos(d)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        let max = Instant::from_nanos(u64::MAX);
        assert_eq!(max + Duration::from_secs(1), max);
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::ZERO.saturating_duration_since(max), Duration::ZERO);
        assert_eq!(
            Instant::from_nanos(1_500).saturating_duration_since(Instant::from_nanos(500)),
            Duration::from_nanos(1_000)
        );
    }
}
