//! What a bench on a Galera node adds to its recommendation: a ttl a
//! leader keeps its term through while the cluster evicts a lost node
//! (`picolease::mysql::galera_commit_stall` estimates the stall).
//!
//! A leader's renewals wait out the stall. It keeps its term if a renewal
//! lands before its deadline: in the worst case its last renewal landed
//! one interval before the stall began, so the stall must end within
//! `ttl − interval`, 3/4 of the ttl in the default shape (four
//! intervals). Hence a ttl of at least 4/3 of the stall. At Galera's
//! defaults (5 s + 2 s) that is about 9.35 s: the default ttl of 10 s
//! kept its term through the 6.2 s stall of `tests/tests/mysql_galera.rs`,
//! and 6 s lost it (docs/operations.md §8).

use std::time::Duration;

/// The smallest ttl (milliseconds, rounded up to 50 ms) at which a leader
/// keeps its term through `stall`: 4/3 of it.
pub fn ttl_through(stall: Duration) -> u64 {
    let ms = stall.as_secs_f64() * 1000.0 * 4.0 / 3.0;
    (ms / 50.0).ceil() as u64 * 50
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttl_covers_four_thirds_of_the_stall() {
        // Galera's defaults: 5 s + 2 s = 7 s of stall, so 9.35 s,
        // between the 6 s that lost its term and the default 10 s that
        // kept it.
        assert_eq!(ttl_through(Duration::from_millis(7000)), 9350);
        // The measured stall, 6.2 s, needs 8.3 s at least.
        assert_eq!(ttl_through(Duration::from_millis(6200)), 8300);
    }
}
