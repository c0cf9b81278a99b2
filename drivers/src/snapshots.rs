//! One cloneable reader of a handle's snapshot, for threads that do not
//! own the handle (an HTTP server's `/leader` and `/healthz`, a metrics
//! scrape), the same type for a lone lease and for a set: what it reads
//! is the scope's ([`Snapshot`] or [`SetSnapshot`]), how it is handed out,
//! refreshed and wedged is written once here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use picolease_core::{Leadership, LeaseName};

use crate::publish::{Health, Publisher, SharedHealth};
use crate::scope::Scope;
use crate::set::SetView;
use crate::set::{SetSnapshot, SharedSnapshot};
use crate::view::LeaseView;
#[cfg(doc)]
use crate::view::Snapshot;

/// A cheap, cloneable reader of a handle's snapshot, usable from any
/// thread and outliving the handle: from [`LeaseView::snapshots`] (it
/// reads a [`Snapshot`]) or [`SetView::snapshots`] (a [`SetSnapshot`]).
///
/// Wiring it into a service's health check and "who leads" endpoint (the
/// same answers as `picolease run --listen`), whatever the HTTP framework:
///
/// ```no_run
/// # #[cfg(feature = "sqlite")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use picolease::sqlite::{Database, SqliteLease};
/// use picolease::{unique_holder_id, Config, LeaseName, Snapshots};
///
/// /// GET /healthz: 503 only when the election loop is wedged (a follower,
/// /// or a database out of reach, is healthy).
/// fn healthz(snapshots: &Snapshots) -> (u16, String) {
///     let s = snapshots.snapshot();
///     let status = if s.is_wedged() { 503 } else { 200 };
///     (status, format!("{{\"since_progress_ms\":{}}}", s.since_progress.as_millis()))
/// }
///
/// /// GET /leader: 200 on the leader, 503 elsewhere; who holds it, as seen.
/// fn leader(snapshots: &Snapshots) -> (u16, String) {
///     let s = snapshots.snapshot();
///     let holder = s.holder.as_ref().map_or("null".to_string(), |h| format!("{:?}", h.as_str()));
///     let epoch = s.epoch.map_or("null".to_string(), |e| e.get().to_string());
///     let status = if s.is_leader() { 200 } else { 503 };
///     (status, format!("{{\"name\":{:?},\"holder\":{holder},\"epoch\":{epoch}}}", s.lease.as_str()))
/// }
///
/// let config = Config::with_ttl(LeaseName::new("reports")?, unique_holder_id(), Duration::from_secs(10));
/// let lease = SqliteLease::builder(config, Database::file("app.db")).start()?;
/// let snapshots = lease.snapshots(); // clone it into the server's handlers
/// let (status, body) = healthz(&snapshots);
/// println!("{status} {body}; {:?}", leader(&snapshots));
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "sqlite"))]
/// # fn main() {}
/// ```
pub struct Snapshots<S: Scope = LeaseView> {
    reader: S::Reader,
}

impl<S: Scope> Clone for Snapshots<S> {
    fn clone(&self) -> Self {
        Snapshots {
            reader: self.reader.clone(),
        }
    }
}

impl<S: Scope> std::fmt::Debug for Snapshots<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots").finish_non_exhaustive()
    }
}

impl<S: Scope> Snapshots<S> {
    pub(crate) fn new(reader: S::Reader) -> Self {
        Snapshots { reader }
    }

    /// The state now: a lone lease's [`Snapshot`], checked against the
    /// term's deadline as it is read; a set's [`SetSnapshot`] as of its
    /// last step, except that a lease whose deadline has passed since is
    /// not among the held ones.
    pub fn snapshot(&self) -> S::Snapshot {
        S::read(&self.reader)
    }

    /// Brings the leader gauges (and a lone lease's time-left gauge) to
    /// this moment: the driver sets them at its loop's steps, so a scrape
    /// that comes while the loop is late (a resumed process, a blocked
    /// statement) would read a leader past its deadline. Call it in the
    /// scrape handler, before rendering (as `picolease run --listen`
    /// does).
    #[cfg(feature = "metrics")]
    pub fn refresh_metrics(&self) {
        S::each_publisher(&self.reader, &mut |publisher| publisher.refresh_metrics());
    }

    /// Test seam: blocks the driver's loop at its next step, for ever, so
    /// that a health check can be seen to fail. Not for production use.
    #[doc(hidden)]
    pub fn wedge_loop_for_tests(&self) {
        S::wedge(&self.reader);
    }
}

impl Snapshots<LeaseView> {
    /// The latencies of the most recent accepted renewals, as
    /// [`LeaseView::renew_latencies`].
    pub fn renew_latencies(&self) -> Vec<std::time::Duration> {
        self.reader.0.renew_latencies()
    }
}

impl Snapshots<SetView> {
    /// `lease`'s leadership as [`SetView::leadership`] reads it; `None`
    /// for a lease outside the set.
    pub fn leadership(&self, lease: &LeaseName) -> Option<Leadership> {
        self.reader.leadership(lease)
    }
}

/// What a lone lease's [`Snapshots`] keeps: its publisher (public in a
/// private module, as [`SetReader`]).
#[derive(Clone)]
pub struct LoneReader(pub(crate) Arc<Publisher>);

/// What a set's [`Snapshots`] keeps (public in a private module: the
/// sealed [`Scope`]'s reader type, which nothing outside can name): the set's shared snapshot,
/// its loop's health and wedge flag, and each lease's publisher.
#[derive(Clone)]
pub struct SetReader {
    pub(crate) snapshot: SharedSnapshot,
    pub(crate) health: SharedHealth,
    pub(crate) wedge: Arc<AtomicBool>,
    pub(crate) publishers: Arc<HashMap<LeaseName, Arc<Publisher>>>,
}

impl SetReader {
    /// The set as of its last step, except that a lease whose deadline
    /// has passed since is not among the held ones (its deadline ends it
    /// without a step of the loop, as [`SetView::leadership`] reads it).
    pub(crate) fn read(&self) -> SetSnapshot {
        let mut snapshot = self
            .snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        snapshot.last_step = Some(Health::read(&self.health).last_step);
        snapshot.held.retain(|lease, _| {
            self.publishers
                .get(lease)
                .is_some_and(|p| p.leadership().is_leader())
        });
        snapshot
    }

    /// `lease`'s leadership as [`SetView::leadership`] reads it.
    pub(crate) fn leadership(&self, lease: &LeaseName) -> Option<Leadership> {
        self.publishers.get(lease).map(|p| p.leadership())
    }

    /// Each lease's publisher, in no order.
    pub(crate) fn publishers(&self) -> impl Iterator<Item = &Publisher> {
        self.publishers.values().map(|p| &**p)
    }

    /// The wedge seam: the set's loop blocks at its next step.
    pub(crate) fn wedge(&self) {
        self.wedge.store(true, Ordering::SeqCst);
    }
}
