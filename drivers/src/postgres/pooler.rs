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
//!
//! A URL that says nothing ([`Pooler::Unannounced`], the default) gets
//! unnamed statements too: users often do not know that a managed
//! service's port is a pooler's, and named statements behind one run
//! *another client's* `s0` with our parameters (issue 43 saw two
//! contenders of different tables each read the other's holder); no
//! error need come, so detection cannot be relied on. The parse costs
//! about 0.2–0.3 ms per statement on a local server (`picolease bench`,
//! `renew_p50_ms` with and without `picolease_pooler=none`); only
//! `picolease_pooler=none` (a promise that no transaction pooler is in
//! the way) turns named statements on.

/// How the driver's connections reach the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pooler {
    /// The URL does not say (the default): every statement is sent
    /// unnamed, as through a transaction pooler, since one may be in the
    /// way unannounced; release notices are listened for on a second
    /// connection to the same URL (behind a pooler they may be lost or
    /// land elsewhere: a notice only wakes a follower early, it proves
    /// nothing, so the follower's poll still finds every release).
    #[default]
    Unannounced,
    /// Directly, or through a session pooler, as the URL promises with
    /// `picolease_pooler=none`: a connection keeps one server session for
    /// its life, so statements are prepared once per connection and
    /// release notices are listened for on a second one.
    None,
    /// Through a transaction pooler: every statement is sent unnamed
    /// (the server plans it each time: one round trip, as a prepared
    /// statement's, plus the parse), and release notices come only through
    /// a direct connection ([`PgConnector::with_notify_url`](super::PgConnector::with_notify_url));
    /// without one, followers notice a release at their next poll.
    Transaction,
}

/// The connection-string parameter that sets the [`Pooler`]:
/// `transaction` or `none` (absent: [`Pooler::Unannounced`]).
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
