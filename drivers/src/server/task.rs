//! The handle's side of a server database's task, a lone lease's or a
//! set's alike: starting it, and everything a handle says to it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::driver::{run, Control, LastError, Task, TaskRunner};
use super::gate::GatedTask;
use super::{DriverError, Link, Notice, TermFence};

/// Release notices, and the task that listens for them.
pub(crate) type Listening = (mpsc::Receiver<Notice>, tokio::task::JoinHandle<()>);

/// The running task: its control channel, its join handle (`None` once
/// joined or detached) and its last error.
pub(crate) struct DriverTask<L: Link, F> {
    control: mpsc::UnboundedSender<Control<F>>,
    task: Option<tokio::task::JoinHandle<Result<(), L::Error>>>,
    last_error: LastError<L::Error>,
}

impl<L: Link, F: TermFence> DriverTask<L, F> {
    /// Spawns `runner`'s task on the current tokio runtime (panics outside
    /// one, like `tokio::spawn`) with its statement connection `link` and,
    /// where the database has them, its release notices. Connecting
    /// happens in the task. After a release that freed rows the task
    /// keeps its connections `linger` longer.
    pub(crate) fn start(
        runner: TaskRunner<F>,
        link: Arc<L>,
        listening: Option<Listening>,
        linger: Duration,
    ) -> Self {
        let (notices, listener) = listening.unzip();
        let (control, inbox) = mpsc::unbounded_channel();
        let last_error: LastError<L::Error> = Arc::new(Mutex::new(None));
        let task = tokio::spawn(run(Task {
            runner,
            link,
            notices,
            listener,
            inbox,
            linger,
            last_error: Arc::clone(&last_error),
        }));
        DriverTask {
            control,
            task: Some(task),
            last_error,
        }
    }

    /// What posts an input to the task's loop without keeping its channel
    /// open: false once the loop is gone or its handle dropped.
    pub(crate) fn poster(
        &self,
    ) -> impl Fn(picolease_core::engine::Input) -> bool + Send + Sync + 'static {
        let weak = self.control.downgrade();
        move |input| {
            weak.upgrade()
                .is_some_and(|control| control.send(Control::Engine(input)).is_ok())
        }
    }

    /// Says `control` to the task (nothing once it has ended).
    pub(crate) fn send(&self, control: Control<F>) {
        let _ = self.control.send(control);
    }

    /// Registers work on every lease (started at once where held).
    pub(crate) fn add_work(&self, task: GatedTask<F>) {
        self.send(Control::AddWork(task));
    }

    /// The most recent error, cleared by the next successful statement.
    pub(crate) fn last_error(&self) -> Option<L::Error> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// True once the task has ended (or was joined or detached).
    pub(crate) fn is_finished(&self) -> bool {
        self.task
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
    }

    /// Asks for a shutdown and waits for the task.
    pub(crate) async fn shutdown(&mut self) -> Result<(), L::Error> {
        self.send(Control::SHUTDOWN);
        self.join().await
    }

    /// Waits for the task to end; its fatal error, if any. Cancel-safe;
    /// once it has returned, later calls return `Ok(())` at once.
    pub(crate) async fn join(&mut self) -> Result<(), L::Error> {
        let Some(task) = self.task.as_mut() else {
            return Ok(());
        };
        let outcome = task.await;
        self.task = None;
        outcome.unwrap_or_else(|e| Err(L::Error::stopped(e.to_string())))
    }

    /// Stops the task at once without releasing anything, and detaches
    /// it: the work is cancelled by the task in the background.
    pub(crate) fn abort(&mut self) {
        self.send(Control::Abort);
        self.task = None;
    }
}
