//! What both drivers' handles show of their lease, written once.
//!
//! `SqliteLease` and `PgLease` dereference to a [`LeaseView`], so reading
//! the configuration, the leadership, the subscriptions and the renew
//! latencies is the same code, with the same names, for both drivers.
//! Gated work's contexts dereference to a [`Term`] the same way.

use std::sync::Arc;
use std::time::Duration;

use picolease_core::{Config, Epoch, HolderId, Leadership, LeaseName};
use tokio::sync::watch;

use crate::publish::Publisher;
use crate::subscription::Subscription;

/// The read side of a running contender: its configuration and everything
/// its driver publishes. Reached through `SqliteLease` or `PgLease`.
pub struct LeaseView {
    config: Config,
    publisher: Arc<Publisher>,
}

impl std::fmt::Debug for LeaseView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseView")
            .field("lease", &self.config.lease)
            .field("holder", &self.config.holder)
            .field("leadership", &self.publisher.leadership())
            .finish_non_exhaustive()
    }
}

impl LeaseView {
    pub(crate) fn new(config: Config, publisher: Arc<Publisher>) -> Self {
        LeaseView { config, publisher }
    }

    pub(crate) fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// This contender's configuration (its lease name, holder id, timings).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The lease name.
    pub fn lease(&self) -> &LeaseName {
        &self.config.lease
    }

    /// This contender's holder id, as stored in the row (use it in fences).
    pub fn holder(&self) -> &HolderId {
        &self.config.holder
    }

    /// The current leadership state: role, epoch, holder in view and, on
    /// demotion, the reason.
    pub fn leadership(&self) -> Leadership {
        self.publisher.leadership()
    }

    /// A watch receiver of the leadership state, updated on every change
    /// (usable with or without a tokio runtime).
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.publisher.watch()
    }

    /// Every leadership change from now on, in order (bounded; see
    /// [`Subscription`]).
    pub fn subscribe(&self) -> Subscription {
        self.publisher.subscribe()
    }

    /// While leading, the time left before this node demotes itself unless
    /// a renewal succeeds first (on the drivers' suspend-aware clock);
    /// `None` while following, zero once the deadline has passed.
    pub fn time_left(&self) -> Option<Duration> {
        self.publisher.time_left()
    }

    /// The latencies of the most recent accepted renewals (up to
    /// [`crate::RENEW_SAMPLES`]), oldest first: from the driver issuing the
    /// statement to the core having handled its reply.
    pub fn renew_latencies(&self) -> Vec<Duration> {
        self.publisher.renew_latencies()
    }
}

/// One term of leadership: the lease, this node's holder id and the epoch,
/// the fencing token of everything done in the term. Gated work's
/// `LeaderContext` (of either driver) dereferences to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    lease: LeaseName,
    holder: HolderId,
    epoch: Epoch,
}

impl Term {
    pub(crate) fn new(lease: LeaseName, holder: HolderId, epoch: Epoch) -> Self {
        Term {
            lease,
            holder,
            epoch,
        }
    }

    /// The lease.
    pub fn lease(&self) -> &LeaseName {
        &self.lease
    }

    /// This node's holder id.
    pub fn holder(&self) -> &HolderId {
        &self.holder
    }

    /// The term's epoch: the fencing token for the work's writes.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }
}
