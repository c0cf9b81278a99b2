//! The thread a SQLite driver runs on, a lone lease's or a lease set's,
//! and how its handle ends it.

use std::thread::JoinHandle;

use super::error::Error;

/// A driver's thread; `None` once joined.
pub(crate) struct DriverThread {
    handle: Option<JoinHandle<Result<(), Error>>>,
    /// What runs on it, for the error should it panic.
    what: String,
}

impl DriverThread {
    /// Says `message` to the thread (through `control`), then waits for
    /// it: how a handle shuts its driver down or aborts it.
    pub(crate) fn stop<C>(
        &mut self,
        control: &std::sync::mpsc::Sender<C>,
        message: C,
    ) -> Result<(), Error> {
        let _ = control.send(message);
        self.join()
    }

    /// Starts `run` on a thread named `name`.
    pub(crate) fn spawn(
        name: String,
        what: String,
        run: impl FnOnce() -> Result<(), Error> + Send + 'static,
    ) -> Result<Self, Error> {
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(run)
            .map_err(|e| Error::Spawn(e.to_string()))?;
        Ok(DriverThread {
            handle: Some(handle),
            what,
        })
    }

    /// True once the thread has ended (or was joined).
    pub(crate) fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// True until joined.
    pub(crate) fn is_joinable(&self) -> bool {
        self.handle.is_some()
    }

    /// Waits for the thread; its fatal error, if any. A panic is
    /// [`Error::Panicked`]. Joining twice returns `Ok`.
    pub(crate) fn join(&mut self) -> Result<(), Error> {
        match self.handle.take() {
            Some(handle) => handle.join().unwrap_or_else(|_| {
                Err(Error::Panicked {
                    lease: self.what.clone(),
                })
            }),
            None => Ok(()),
        }
    }
}

/// A driver thread's wait for its handle: the next control message within
/// `wait`, `None` when none came. Once the handle is gone (`handle_gone`
/// is then set), `shutdown` is returned once, as if the handle had asked,
/// and later waits merely sleep.
pub(crate) fn receive<C>(
    inbox: &std::sync::mpsc::Receiver<C>,
    wait: std::time::Duration,
    handle_gone: &mut bool,
    shutdown: impl FnOnce() -> C,
) -> Option<C> {
    use std::sync::mpsc::RecvTimeoutError;
    if *handle_gone {
        std::thread::sleep(wait);
        return None;
    }
    match inbox.recv_timeout(wait) {
        Ok(control) => Some(control),
        Err(RecvTimeoutError::Timeout) => None,
        Err(RecvTimeoutError::Disconnected) => {
            *handle_gone = true;
            Some(shutdown())
        }
    }
}
