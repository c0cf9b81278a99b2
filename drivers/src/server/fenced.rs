//! What opening a fenced transaction is on every server database: refuse
//! a deadline already past, begin it (the database's own statements: the
//! bounds armed, the fence evaluated, which locks the lease row) racing
//! the deadline, and sort how that ended into the transaction or the
//! error that refuses it. PostgreSQL's and MySQL's `Fence::transaction`
//! bring only their begin; the refusals read the same on both.

use std::future::Future;

use tokio::time::Instant;

/// How a fenced transaction's beginning ended.
pub(crate) enum Begun<T, E> {
    /// The fence holds: the transaction (with what else the database keeps
    /// of it), its lease row locked and its bounds armed.
    Holds(T),
    /// The fence no longer holds: rolled back.
    Refused,
    /// A statement failed.
    Failed(E),
    /// The deadline came first: the database has been told to stop what
    /// it ran (a cancel request, a killed session).
    Late,
}

/// A fence of one term as a fenced transaction's refusals need it.
pub(crate) trait Refuses {
    /// The database's error type.
    type Error;

    /// The error that refuses or ends a fenced transaction of this term
    /// (the database's `Fenced`), saying why.
    fn over(&self, reason: &str) -> Self::Error;
}

/// Opens a fenced transaction of `fence` that must end by `deadline`:
/// `begin` (a future: nothing is sent until it is awaited) once the
/// deadline is known not to have passed, its outcome sorted.
pub(crate) async fn open<F: Refuses, T>(
    fence: &F,
    deadline: Instant,
    begin: impl Future<Output = Begun<T, F::Error>>,
) -> Result<T, F::Error> {
    if deadline <= Instant::now() {
        return Err(fence.over("the leader's deadline had passed before it began"));
    }
    match begin.await {
        Begun::Holds(opened) => Ok(opened),
        Begun::Refused => {
            Err(fence
                .over("the fence no longer holds (the lease was taken over, released or lapsed)"))
        }
        Begun::Failed(e) => Err(e),
        Begun::Late => Err(fence.over("the leader's deadline passed while it began")),
    }
}

/// `work`'s outcome, or `None` if `deadline` comes first: how every
/// statement of a fenced transaction races its deadline on the client.
pub(crate) async fn until<T>(deadline: Instant, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        outcome = work => Some(outcome),
        () = tokio::time::sleep_until(deadline) => None,
    }
}
