//! What a server database brings to the shared handle and task: its
//! connector, its options, its statement connection and fence, and how
//! its task starts. PostgreSQL ([`crate::postgres::Postgres`]) and MySQL
//! ([`crate::mysql::Mysql`]) are the two.

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::LeaseName;

use super::driver::TaskRunner;
use super::options::ServerOptions;
use super::task::DriverTask;
use super::{DriverError, Link, TermFence};

/// A server database the generic [`Contender`](super::Contender) runs on:
/// PostgreSQL or MySQL. Sealed.
pub trait Database: sealed::Driver {}

/// Which release notices a task's listener passes on, where the database
/// has them (MySQL's lone-lease wake-up hears only its own lease).
#[derive(Clone, Debug)]
pub(crate) enum Listen {
    /// A lone lease: only its own row's, coalesced (one pending notice is
    /// all the driver needs to try at once).
    Lease(Arc<str>),
    /// A lease set: every row's (a lease or a membership row freed by
    /// another node's release batch), none dropped (the channel applies
    /// back pressure instead).
    Every,
}

impl Listen {
    /// A lone lease's listening (its name) or a set's (`None`).
    pub(crate) fn for_lease(lease: Option<LeaseName>) -> Self {
        match lease {
            Some(lease) => Listen::Lease(lease.as_str().into()),
            None => Listen::Every,
        }
    }
}

// The sealed trait's methods name crate-private types (the runner, the
// gates); outside the crate they cannot be named or called with
// anything, so nothing leaks but the bound.
#[allow(private_interfaces, private_bounds)]
pub(crate) mod sealed {
    use super::*;

    /// How a database's task is made; unnameable outside the crate.
    pub trait Driver: Sized + Send + Sync + 'static {
        /// The database's name in documentation and messages.
        const NAME: &'static str;
        /// Its SQL dialect.
        const DIALECT: Dialect;
        /// Where its connections come from.
        type Connector: Send + Sync + 'static;
        /// The options only this database has.
        type Options: Default + std::fmt::Debug + Send + Sync;
        /// Its error type.
        type Error: DriverError + std::error::Error + From<picolease_core::ConfigError>;
        /// Its statement connection.
        type Link: Link<Error = Self::Error>;
        /// Its fence of one term.
        type Fence: TermFence;

        /// Spawns `runner`'s task with its statement connection and, where
        /// the database has them and the options ask, its release notices.
        fn start(
            runner: TaskRunner<Self::Fence>,
            connector: Self::Connector,
            statements: &Arc<Statements>,
            options: &ServerOptions<Self::Fence, Self::Options>,
            listen: Listen,
        ) -> DriverTask<Self::Link, Self::Fence>;
    }
}

/// What a builder takes as `D`'s connector: for PostgreSQL any
/// [`Connect`](crate::postgres::Connect), for MySQL a
/// [`MysqlConnector`](crate::mysql::MysqlConnector).
pub trait Connects<D: Database> {
    /// The connector the task keeps.
    fn into_connector(self) -> D::Connector;
}
