//! Transaction poolers (PgBouncer in transaction mode, and managed poolers
//! that pool the same way): what the driver must not do through one, and
//! the connection-string parameters that say one is in the way.
//!
//! Behind a transaction pooler each transaction may run on another server
//! session, so nothing may outlive a statement on the session: no named
//! prepared statement (another client's `s0` is already there, or ours is
//! gone: SQLSTATE 42P05, 26000) and no `LISTEN` (the notifications go to
//! whichever client holds that server session next). Under
//! [`Pooler::Transaction`] the driver sends every statement unnamed, with
//! its parameter types, in one round trip (`Client::query_typed`: Parse,
//! Bind, Describe, Execute, Sync), and listens for release notices only on
//! a direct connection, when it has one (`picolease_notify_url`).

/// How the driver's connections reach the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pooler {
    /// Directly, or through a session pooler: a connection keeps one
    /// server session for its life, so statements are prepared once per
    /// connection and release notices are listened for on a second one.
    #[default]
    None,
    /// Through a transaction pooler: every statement is sent unnamed
    /// (the server plans it each time: one round trip, as a prepared
    /// statement's, plus the parse), and release notices come only through
    /// a direct connection ([`PgConnector::with_notify_url`](super::PgConnector::with_notify_url));
    /// without one, followers notice a release at their next poll.
    Transaction,
}

/// The connection-string parameter that sets the [`Pooler`]:
/// `transaction` or `none`.
pub const POOLER_PARAM: &str = "picolease_pooler";

/// The connection-string parameter naming a direct connection (a
/// percent-encoded `postgres://` URL) for release notices behind a
/// transaction pooler.
pub const NOTIFY_URL_PARAM: &str = "picolease_notify_url";

/// SQLSTATEs a transaction pooler causes: a named prepared statement that
/// another client's session already has (42P05) or that this client's
/// previous session had (26000).
pub(crate) fn is_pooler_signature(code: &str) -> bool {
    matches!(code, "42P05" | "26000")
}
