//! What the exact-vector tests of a set and of the engine share: one node,
//! `me`, ttl 10 s, times in whole milliseconds from zero.

use std::time::Duration;

use picolease_core::sql::MEMBER_PREFIX;
use picolease_core::{Demotion, Epoch, HolderId, Instant, Leadership, LeaseName, Role};

pub const TTL: Duration = Duration::from_secs(10);
/// ttl − ρ·ttl − 1 ms: how long after its send a statement's success
/// keeps a lease (`Config::local_validity`).
pub const VALIDITY_MS: u64 = 10_000 - 100 - 1;

pub fn ms(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000_000)
}

pub fn me() -> HolderId {
    HolderId::new("me").unwrap()
}

pub fn name(n: &str) -> LeaseName {
    LeaseName::new(n).unwrap()
}

/// The name of `me`'s membership row in a set.
pub fn member() -> String {
    format!("{MEMBER_PREFIX}me")
}

/// The node a planned handover reserves rows for.
pub fn successor() -> HolderId {
    HolderId::reserved_for("n2").unwrap()
}

/// `me` leading at `epoch`.
pub fn leading(epoch: u64) -> Leadership {
    Leadership {
        role: Role::Leader,
        epoch: Some(Epoch::new(epoch)),
        holder: Some(me()),
        reason: None,
    }
}

/// A follower once `me`'s term `epoch` ended for `reason`, `holder`
/// leading now if known.
pub fn ended(epoch: u64, reason: Demotion, holder: Option<HolderId>) -> Leadership {
    Leadership {
        role: Role::Follower,
        epoch: Some(Epoch::new(epoch)),
        holder,
        reason: Some(reason),
    }
}
