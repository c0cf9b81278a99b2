//! PostgreSQL as a server [`Database`]: the marker type, the names of its
//! handles (instances of the shared [`Contender`](crate::server::Contender)
//! and [`Builder`](crate::server::Builder)), and the fenced transactions
//! its handles open.

use std::sync::Arc;
use std::time::Duration;

use picolease_core::LeaseName;

use super::connect::Connect;
use super::error::PgError;
use super::fence::Fence;
use super::transaction::FencedTransaction;
use super::LeaderContext;
use crate::scope::Scope;
use crate::server::{Builder, Connects, Contender, Database};
use crate::set::SetView;
use crate::view::LeaseView;

/// PostgreSQL, the [`Database`] of [`PgLease`] and [`PgLeaseSet`].
#[derive(Debug)]
pub struct Postgres;

impl Database for Postgres {}

/// PostgreSQL's own options.
#[derive(Debug)]
pub struct PgOptions {
    pub(crate) notifications: bool,
    pub(crate) linger: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            notifications: true,
            linger: super::DEFAULT_LINGER,
        }
    }
}

/// The options only PostgreSQL has.
impl<S: Scope> Builder<Postgres, S> {
    /// Listen for release notifications on a second connection (default
    /// on, when the connector can provide a listening connection). Off, a
    /// follower notices a release at its next poll (a set: at its next
    /// survey), within one interval.
    pub fn notifications(mut self, on: bool) -> Self {
        self.options.own.notifications = on;
        self
    }

    /// How long `shutdown` keeps the connections open after its release
    /// freed rows, before closing them (default [`super::DEFAULT_LINGER`];
    /// zero closes at once). The successors' acquires then do not share
    /// the server with two backends exiting. Shutdown returns that much
    /// later; nothing else waits for it.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.options.own.linger = linger;
        self
    }
}

/// Any [`Connect`] is a PostgreSQL connector.
impl<C: Connect> Connects<Postgres> for C {
    fn into_connector(self) -> Arc<dyn Connect> {
        Arc::new(self)
    }
}

/// One contender for one lease on PostgreSQL: the handle of the driver
/// task. Made with [`PgLease::builder`]; it dereferences to a
/// [`LeaseView`].
pub type PgLease = Contender<Postgres, LeaseView>;
/// Configures a [`PgLease`] before it starts.
pub type PgLeaseBuilder = Builder<Postgres, LeaseView>;
/// One node contending for a set of leases on PostgreSQL, with a fair
/// share between the live nodes (DESIGN §9). Made with
/// [`PgLeaseSet::builder`]; it dereferences to a [`SetView`].
pub type PgLeaseSet = Contender<Postgres, SetView>;
/// Configures a [`PgLeaseSet`] before it starts.
pub type PgLeaseSetBuilder = Builder<Postgres, SetView>;

/// The term's deadline as it stands now, on tokio's clock, if `fence` and
/// `left` (a lease's fence and time left) say this node leads.
fn opened<'c>(
    fence: Option<Fence>,
    left: Option<std::time::Duration>,
    client: &'c mut tokio_postgres::Client,
) -> Option<impl std::future::Future<Output = Result<FencedTransaction<'c>, PgError>>> {
    let (fence, left) = (fence?, left?);
    Some(async move {
        fence
            .transaction(client, tokio::time::Instant::now() + left)
            .await
    })
}

/// A fenced transaction of the current term (its type and guarantees are
/// in `transaction.rs`).
impl PgLease {
    /// Opens a fenced transaction of the current term on `client`, bounded
    /// by the leader's deadline as it stands now ([`PgLease::fence`],
    /// [`crate::LeaseView::time_left`]); see [`Fence::transaction`]. Refused
    /// ([`PgError::Fenced`]) when this node does not lead.
    pub async fn fenced_transaction<'c>(
        &self,
        client: &'c mut tokio_postgres::Client,
    ) -> Result<FencedTransaction<'c>, PgError> {
        match opened(self.fence(), self.time_left(), client) {
            Some(open) => open.await,
            None => Err(PgError::Fenced {
                lease: self.lease().to_string(),
                epoch: self.leadership().epoch.map_or(0, |e| e.get()),
                reason: "this node does not lead".to_string(),
            }),
        }
    }
}

impl PgLeaseSet {
    /// Opens a fenced transaction of `lease`'s current term on `client`,
    /// bounded by its deadline as it stands now, as a lone lease's
    /// [`PgLease::fenced_transaction`] (see [`Fence::transaction`]).
    /// Refused ([`PgError::Fenced`]) when this node does not lead `lease`.
    pub async fn fenced_transaction<'c>(
        &self,
        lease: &LeaseName,
        client: &'c mut tokio_postgres::Client,
    ) -> Result<FencedTransaction<'c>, PgError> {
        match opened(self.fence(lease), self.time_left(lease), client) {
            Some(open) => open.await,
            None => Err(PgError::Fenced {
                lease: lease.to_string(),
                epoch: self
                    .leadership(lease)
                    .and_then(|l| l.epoch)
                    .map_or(0, |e| e.get()),
                reason: "this node does not lead it".to_string(),
            }),
        }
    }
}

/// A fenced transaction of a term's work.
impl LeaderContext {
    /// Opens a fenced transaction of this term on `client`, bounded by the
    /// leader's deadline as it stands now ([`LeaderContext::time_left`](LeaderContext::time_left));
    /// see [`Fence::transaction`] for what it guarantees and the bound it
    /// puts on a takeover's delay. Refused ([`PgError::Fenced`]) once the
    /// term has ended.
    pub async fn fenced_transaction<'c>(
        &self,
        client: &'c mut tokio_postgres::Client,
    ) -> Result<FencedTransaction<'c>, PgError> {
        if self.is_cancelled() || self.deadline().is_none() {
            return Err(self.fence().over("the term has ended"));
        }
        let deadline = tokio::time::Instant::now() + self.time_left();
        self.fence().transaction(client, deadline).await
    }
}
