//! The handles of a running PostgreSQL contender (a lone lease) and of a
//! lease set, and their builders: the shared server handles
//! (`crate::server::handles`) with PostgreSQL's connector, options, task
//! and fenced transactions.

use std::sync::Arc;

use picolease_core::sql::Dialect;
use picolease_core::LeaseName;

use super::connect::Connect;
use super::error::PgError;
use super::fence::Fence;
use super::link::Link;
use super::options::{pg_option_methods, PgOptions};
use super::task::start;
use super::transaction::FencedTransaction;
use super::LeaderContext;
use crate::server::handles::server_handles;

server_handles! {
    database: "PostgreSQL",
    dialect: Dialect::Postgres,
    error: PgError,
    connector: impl Connect => Arc<dyn Connect>, by |c| -> Arc<dyn Connect> { Arc::new(c) },
    options: PgOptions, pg_option_methods,
    start: start,
    lease: PgLease, PgLeaseBuilder,
    set: PgLeaseSet, PgLeaseSetBuilder,
}

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
