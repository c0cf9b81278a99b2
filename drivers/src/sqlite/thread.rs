//! The thread the SQLite loop runs on, and everything a handle (a lone
//! lease's or a set's, alike) says to it.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::changes::{ChangeSource, Notices};
use super::error::SqliteError;
use super::gate::Work;
use super::inbox::Outbox;
use super::inbox::{ConnectionJob, Control, Local};
use super::open::Database;
use super::worker::{run, Connection};
use crate::runner::Runner;

/// The loop's thread and its control channel; the thread is `None` once
/// joined.
pub(crate) struct DriverThread {
    handle: Option<JoinHandle<Result<(), SqliteError>>>,
    /// What runs on it, for the error should it panic.
    what: String,
    /// Shared only with [`DriverThread::poster`]'s weak references, so
    /// the channel closes when the handle goes.
    control: std::sync::Arc<Outbox>,
}

impl DriverThread {
    /// Opens `database`'s table for the loop (`open_watched`: the
    /// watchdog's interrupt handle with it), starts the change source
    /// `notices` asks for and runs `runner` on a thread named `name`.
    pub(crate) fn start(
        name: String,
        what: String,
        database: &mut Database,
        statements: picolease_core::sql::Statements,
        notices: Notices,
        runner: Runner<super::gate::Gate>,
    ) -> Result<Self, SqliteError> {
        let timeout = runner.engine.config().request_timeout;
        let (table, watchdog) = super::watchdog::open_watched(database, statements, timeout)?;
        let (control, inbox) = super::inbox::channel()?;
        let changes = ChangeSource::start(notices, &database.location);
        let connection = Connection { table, watchdog };
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(runner, connection, inbox, changes))
            .map_err(|e| SqliteError::Spawn(e.to_string()))?;
        Ok(DriverThread {
            handle: Some(handle),
            what,
            control: std::sync::Arc::new(control),
        })
    }

    /// What posts an input to the loop without keeping its channel open:
    /// false once the loop is gone or its handle dropped.
    pub(crate) fn poster(
        &self,
    ) -> impl Fn(picolease_core::engine::Input) -> bool + Send + Sync + 'static {
        let weak = std::sync::Arc::downgrade(&self.control);
        move |input| {
            weak.upgrade()
                .is_some_and(|control| control.send(Control::Engine(input)))
        }
    }

    /// Says `control` to the loop; false once it has stopped.
    pub(crate) fn send(&self, control: Control) -> bool {
        self.control.send(control)
    }

    /// Registers work on every lease (started at once where held).
    pub(crate) fn add_work(&self, work: Work) {
        self.send(Control::AddWork(work));
    }

    /// Runs `job` on the loop's connection between two statements and
    /// waits for its result; `None` if the loop has stopped.
    pub(crate) fn with_connection<R: Send + 'static>(
        &self,
        job: impl FnOnce(&rusqlite::Connection) -> R + Send + 'static,
    ) -> Option<R> {
        let (tx, rx) = mpsc::channel();
        let job: ConnectionJob = Box::new(move |conn| {
            let _ = tx.send(job(conn));
        });
        if !self.send(Control::Loop(Local::Run(job))) {
            return None;
        }
        rx.recv().ok()
    }

    /// Says `message` (shut down, or abort) to the loop, then waits for
    /// it; its fatal error, if any.
    pub(crate) fn stop(&mut self, message: Control) -> Result<(), SqliteError> {
        self.send(message);
        self.join()
    }

    /// A dropped handle's end: asks for a shutdown and waits for it at
    /// most `limit`, so a drop never hangs; a thread still running then
    /// is detached.
    pub(crate) fn stop_within(&mut self, limit: Duration) {
        if !self.is_joinable() {
            return;
        }
        self.send(Control::SHUTDOWN);
        let until = std::time::Instant::now() + limit;
        while !self.is_finished() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.is_finished() {
            let _ = self.join();
        } else {
            tracing::warn!(what = %self.what, "the driver's thread did not stop in time; detaching it");
        }
    }

    /// True once the thread has ended (or was joined).
    pub(crate) fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// True until joined.
    fn is_joinable(&self) -> bool {
        self.handle.is_some()
    }

    /// Waits for the thread; its fatal error, if any. A panic is
    /// [`SqliteError::Panicked`]. Joining twice returns `Ok`.
    fn join(&mut self) -> Result<(), SqliteError> {
        match self.handle.take() {
            Some(handle) => handle.join().unwrap_or_else(|_| {
                Err(SqliteError::Panicked {
                    lease: self.what.clone(),
                })
            }),
            None => Ok(()),
        }
    }
}
