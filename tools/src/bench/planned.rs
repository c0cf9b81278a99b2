//! `bench`'s planned handover (DESIGN §3): two contenders that take turns
//! handing the lease over to each other with the library's `hand_over`.
//!
//! [`Backend::start`]'s contenders only shut down or abort, so the bench
//! starts these itself, the same way: the same builder and table, with no
//! gated work, and on PostgreSQL and MySQL the driver on a current-thread
//! runtime of its own thread, told what to do across threads as `run`'s
//! contenders are (so a clean and a planned handover pay the same hop).

#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::future::Future;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::thread::JoinHandle;

use picolease::{Config, ConfigError, Subscription, TableName};

use crate::backend::Backend;
use crate::failure::CliError;

/// A running lone lease the bench can ask to hand over.
pub trait Handing {
    /// `hand_over(Some(to))` on the lease: returns at once.
    fn hand_over(&self, to: &str) -> Result<(), CliError>;
    /// Stops the lease (releasing it if held) and returns the driver's
    /// outcome.
    fn shutdown(self: Box<Self>) -> Result<(), CliError>;
}

/// Starts a lease for `config` on `table`, and every transition it
/// publishes from its start.
pub fn start(
    backend: &Backend,
    table: &TableName,
    config: Config,
) -> Result<(Box<dyn Handing>, Subscription), CliError> {
    match backend {
        Backend::Sqlite(location) => {
            use picolease::sqlite::SqliteLease;
            let database = crate::backend::sqlite::database(location, table);
            let builder = SqliteLease::builder(config, database);
            let transitions = builder.subscribe();
            Ok((Box::new(builder.start()?), transitions))
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres(target) => {
            use picolease::postgres::PgLease;
            let builder = PgLease::builder(config, target.connector().clone()).table(table.clone());
            let transitions = builder.subscribe();
            Ok((spawn("PostgreSQL", move || builder.start())?, transitions))
        }
        #[cfg(feature = "mysql")]
        Backend::Mysql(target) => {
            use picolease::mysql::MysqlLease;
            let connector = target.connector().clone();
            let builder = MysqlLease::builder(config, connector).table(table.clone());
            let transitions = builder.subscribe();
            Ok((spawn("MySQL", move || builder.start())?, transitions))
        }
    }
}

fn refused(e: ConfigError) -> CliError {
    CliError::usage(format!("bench: hand_over refused: {e}"))
}

impl Handing for picolease::sqlite::SqliteLease {
    fn hand_over(&self, to: &str) -> Result<(), CliError> {
        picolease::sqlite::SqliteLease::hand_over(self, Some(to)).map_err(refused)
    }

    fn shutdown(self: Box<Self>) -> Result<(), CliError> {
        picolease::sqlite::SqliteLease::shutdown(*self).map_err(CliError::from)
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// What the bench needs of a running async lone lease.
trait AsyncHanding: Sized + 'static {
    type Error: Into<CliError> + Send + 'static;
    /// Completes when the driver stops by itself (a fatal error).
    fn stopped(&mut self) -> impl Future<Output = Result<(), Self::Error>>;
    fn hand_over(&self, to: &str) -> Result<(), ConfigError>;
    fn shutdown(self) -> impl Future<Output = Result<(), Self::Error>>;
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! async_handing {
    ($lease:ty, $error:ty) => {
        impl AsyncHanding for $lease {
            type Error = $error;

            async fn stopped(&mut self) -> Result<(), $error> {
                <$lease>::stopped(self).await
            }

            fn hand_over(&self, to: &str) -> Result<(), ConfigError> {
                <$lease>::hand_over(self, Some(to))
            }

            async fn shutdown(self) -> Result<(), $error> {
                <$lease>::shutdown(self).await
            }
        }
    };
}

#[cfg(feature = "postgres")]
async_handing!(picolease::postgres::PgLease, picolease::postgres::PgError);
#[cfg(feature = "mysql")]
async_handing!(picolease::mysql::MysqlLease, picolease::mysql::MysqlError);

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// What the bench tells a driver thread.
enum Command {
    /// Hand over to this node, and say whether the handle took it.
    HandOver(String, std::sync::mpsc::Sender<Result<(), ConfigError>>),
    /// Shut down.
    Shutdown,
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// An async lease on its own thread and runtime.
struct ServerHanding {
    commands: tokio::sync::mpsc::UnboundedSender<Command>,
    thread: Option<JoinHandle<Result<(), CliError>>>,
    database: &'static str,
}

/// Runs the lease `start` makes on a current-thread runtime of its own
/// thread until it stops by itself or is shut down.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn spawn<L: AsyncHanding, E: Into<CliError> + Send + 'static>(
    database: &'static str,
    start: impl FnOnce() -> Result<L, E> + Send + 'static,
) -> Result<Box<dyn Handing>, CliError> {
    let runtime = crate::backend::runtime()?;
    let (commands, mut inbox) = tokio::sync::mpsc::unbounded_channel();
    let thread = std::thread::Builder::new()
        .name(format!("bench-{}", database.to_lowercase()))
        .spawn(move || {
            runtime.block_on(async move {
                let mut lease = start().map_err(Into::into)?;
                loop {
                    tokio::select! {
                        result = lease.stopped() => return result.map_err(Into::into),
                        command = inbox.recv() => match command {
                            Some(Command::HandOver(to, reply)) => {
                                let _ = reply.send(lease.hand_over(&to));
                            }
                            Some(Command::Shutdown) | None => {
                                return lease.shutdown().await.map_err(Into::into)
                            }
                        },
                    }
                }
            })
        })
        .map_err(|e| CliError::runtime(format!("cannot start the lease thread: {e}")))?;
    Ok(Box::new(ServerHanding {
        commands,
        thread: Some(thread),
        database,
    }))
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl ServerHanding {
    /// The driver's outcome once its thread ended.
    fn joined(&mut self) -> Result<(), CliError> {
        match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(_)) => Err(CliError::runtime(format!(
                "the {} lease thread panicked",
                self.database
            ))),
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl Handing for ServerHanding {
    fn hand_over(&self, to: &str) -> Result<(), CliError> {
        let (reply, answer) = std::sync::mpsc::channel();
        let stopped = || {
            CliError::runtime(format!(
                "bench: the {} lease stopped before its handover",
                self.database
            ))
        };
        self.commands
            .send(Command::HandOver(to.to_string(), reply))
            .map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?.map_err(refused)
    }

    fn shutdown(mut self: Box<Self>) -> Result<(), CliError> {
        let _ = self.commands.send(Command::Shutdown);
        self.joined()
    }
}
