//! A node's local clock: real (virtual) time scaled by a rate within ρ.

/// A clock that runs `ppm` parts per million fast (positive) or slow
/// (negative) relative to real time, starting at zero with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriftingClock {
    ppm: i64,
}

const MILLION: i128 = 1_000_000;

impl DriftingClock {
    /// A clock with rate `1 + ppm/10⁶`. `ppm` must be above −10⁶.
    pub fn new(ppm: i64) -> Self {
        DriftingClock {
            ppm: ppm.max(-999_999),
        }
    }

    /// The rate error in parts per million.
    pub fn ppm(self) -> i64 {
        self.ppm
    }

    /// Local reading at real time `real` (nanoseconds).
    pub fn local(self, real: u64) -> u64 {
        let local = i128::from(real) * (MILLION + i128::from(self.ppm)) / MILLION;
        u64::try_from(local.max(0)).unwrap_or(u64::MAX)
    }

    /// The earliest real time at which the local reading is at least
    /// `local`.
    pub fn real_at(self, local: u64) -> u64 {
        let rate = MILLION + i128::from(self.ppm);
        let real = (i128::from(local) * MILLION + rate - 1) / rate;
        let mut real = u64::try_from(real.max(0)).unwrap_or(u64::MAX);
        // Integer division can land one nanosecond short; step forward.
        while self.local(real) < local && real < u64::MAX {
            real += 1;
        }
        real
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_at_inverts_local() {
        for ppm in [-9_000, -1, 0, 1, 9_000] {
            let clock = DriftingClock::new(ppm);
            for local in [0u64, 1, 999, 1_000_000_007, 12_345_678_901] {
                let real = clock.real_at(local);
                assert!(clock.local(real) >= local);
                assert!(
                    real == 0 || clock.local(real - 1) < local,
                    "ppm {ppm} local {local}"
                );
            }
        }
    }
}
