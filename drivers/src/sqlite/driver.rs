//! The lease thread and its handle.
//!
//! The thread owns one connection and one `LeaseState`. It sleeps until the
//! machine's `poll_timeout` (or a shutdown request), feeds the machine, and
//! carries out its commands in order. It makes no decision of its own.

use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use picolease_core::sql::{Bindings, Dialect, Statements};
use picolease_core::{
    Command, Config, Epoch, Failure, HolderId, Instant, Leadership, LeaseName, LeaseState,
    Operation, Reply,
};
use tokio::sync::watch;

use super::connection::{Database, Fence, LeaseTable};
use super::error::Error;
use super::watchdog::Watchdog;
use super::work::{Gate, WorkContext};

/// One published change of leadership, stamped with the wall-clock time at
/// which the driver published it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The new state.
    pub leadership: Leadership,
    /// When it was published.
    pub at: SystemTime,
}

/// How many renew latencies are kept (the most recent).
const RENEW_SAMPLES: usize = 10_000;

/// A closure run on the lease thread's connection, between statements.
type ConnectionJob = Box<dyn FnOnce(&rusqlite::Connection) + Send>;

/// What the handle asks of the thread.
enum Control {
    /// Stop the work, release, finish.
    Shutdown,
    /// Stop at once without releasing: a simulated crash.
    Abandon,
    /// Run a closure on the connection.
    Run(ConnectionJob),
}

#[derive(Default)]
struct Progress {
    generation: u64,
    finished: bool,
}

/// What the thread shares with the handle.
struct Shared {
    leadership: watch::Sender<Leadership>,
    progress: Mutex<Progress>,
    changed: Condvar,
    subscribers: Mutex<Vec<mpsc::Sender<Transition>>>,
    renew_latencies: Mutex<Vec<Duration>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn publish(&self, leadership: Leadership) {
        let at = SystemTime::now();
        self.leadership.send_replace(leadership.clone());
        let transition = Transition { leadership, at };
        lock(&self.subscribers).retain(|s| s.send(transition.clone()).is_ok());
        lock(&self.progress).generation += 1;
        self.changed.notify_all();
    }

    fn finish(&self) {
        lock(&self.progress).finished = true;
        self.changed.notify_all();
    }
}

/// Configures and starts a lease driver.
pub struct Builder {
    config: Config,
    database: Database,
    gate: Gate,
    subscribers: Vec<mpsc::Sender<Transition>>,
}

impl Builder {
    /// A driver for `config` on `database`.
    pub fn new(config: Config, database: Database) -> Self {
        Builder {
            config,
            database,
            gate: Gate::default(),
            subscribers: Vec::new(),
        }
    }

    /// Registers work to run while this node leads: `work` is started on its
    /// own thread at the start of every term with a [`WorkContext`], and
    /// must return soon after the context is cancelled. Several may be
    /// registered.
    pub fn while_leader(mut self, work: impl Fn(WorkContext) + Send + Sync + 'static) -> Self {
        self.gate.add(Arc::new(work));
        self
    }

    /// Every leadership change from the start on, in order (the watch
    /// channel only keeps the latest).
    pub fn subscribe(&mut self) -> mpsc::Receiver<Transition> {
        let (tx, rx) = mpsc::channel();
        self.subscribers.push(tx);
        rx
    }

    /// Validates the configuration, opens the database (creating the file
    /// and table if allowed), checks the table, and starts the thread. A bad
    /// configuration is reported before the file is touched.
    pub fn start(self) -> Result<SqliteLease, Error> {
        let Builder {
            config,
            mut database,
            gate,
            subscribers,
        } = self;
        let state = LeaseState::new(config.clone(), Instant::ZERO)?;
        database.busy_timeout = database.busy_timeout.min(config.request_timeout * 3 / 4);
        let table = LeaseTable::open(&database)?;
        let watchdog = Watchdog::start(
            table.connection().get_interrupt_handle(),
            config.request_timeout,
        )
        .map_err(|e| Error::Spawn(e.to_string()))?;
        let (leadership, _) = watch::channel(Leadership::unknown());
        let shared = Arc::new(Shared {
            leadership,
            progress: Mutex::default(),
            changed: Condvar::new(),
            subscribers: Mutex::new(subscribers),
            renew_latencies: Mutex::default(),
        });
        let (control, inbox) = mpsc::channel();
        let worker = Worker {
            lease: config.lease.clone(),
            holder: config.holder.clone(),
            ttl_millis: config.ttl_millis(),
            state,
            table,
            watchdog,
            gate,
            shared: Arc::clone(&shared),
            origin: std::time::Instant::now(),
            inbox,
            fatal: None,
        };
        let thread = std::thread::Builder::new()
            .name(format!("picolease-{}", config.lease))
            .spawn(move || worker.run())
            .map_err(|e| Error::Spawn(e.to_string()))?;
        Ok(SqliteLease {
            statements: Statements::new(Dialect::Sqlite, &database.table),
            config,
            control,
            thread: Some(thread),
            shared,
        })
    }
}

/// A running contender: the handle to the lease thread.
///
/// Call [`SqliteLease::shutdown`] to stop the work and release the lease.
/// Dropping the handle asks for the same shutdown and waits for it at most
/// a ttl, so a drop never hangs.
pub struct SqliteLease {
    config: Config,
    statements: Statements,
    control: mpsc::Sender<Control>,
    thread: Option<JoinHandle<Result<(), Error>>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SqliteLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteLease")
            .field("lease", &self.config.lease)
            .field("holder", &self.config.holder)
            .field("leadership", &*self.shared.leadership.borrow())
            .finish()
    }
}

impl SqliteLease {
    /// Starts a driver with no gated work: shorthand for
    /// `Builder::new(config, database).start()`.
    pub fn start(config: Config, database: Database) -> Result<Self, Error> {
        Builder::new(config, database).start()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The lease name.
    pub fn lease(&self) -> &LeaseName {
        &self.config.lease
    }

    /// This contender's holder id.
    pub fn holder(&self) -> &HolderId {
        &self.config.holder
    }

    /// A watch receiver of the leadership state (usable with or without a
    /// tokio runtime).
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.shared.leadership.subscribe()
    }

    /// The current leadership state.
    pub fn leadership(&self) -> Leadership {
        self.shared.leadership.borrow().clone()
    }

    /// Every leadership change from now on, in order.
    pub fn subscribe(&self) -> mpsc::Receiver<Transition> {
        let (tx, rx) = mpsc::channel();
        lock(&self.shared.subscribers).push(tx);
        rx
    }

    /// Blocks until the leadership state satisfies `done` (checked now and
    /// on every change), the driver finishes, or `timeout` passes. Returns
    /// the state that satisfied it.
    pub fn wait_for(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&Leadership) -> bool,
    ) -> Option<Leadership> {
        let deadline = std::time::Instant::now() + timeout;
        let mut progress = lock(&self.shared.progress);
        loop {
            let now = self.leadership();
            if done(&now) {
                return Some(now);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if progress.finished || left.is_zero() {
                return None;
            }
            progress = self
                .shared
                .changed
                .wait_timeout(progress, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Blocks until the leadership state changes or `timeout` passes;
    /// returns the new state if it changed.
    pub fn wait_change(&self, timeout: Duration) -> Option<Leadership> {
        let deadline = std::time::Instant::now() + timeout;
        let mut progress = lock(&self.shared.progress);
        let seen = progress.generation;
        while progress.generation == seen && !progress.finished {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            progress = self
                .shared
                .changed
                .wait_timeout(progress, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(progress);
        Some(self.leadership())
    }

    /// True once the thread has stopped (after shutdown, abandon, or a fatal
    /// error; [`SqliteLease::shutdown`] then returns the error).
    pub fn is_finished(&self) -> bool {
        lock(&self.shared.progress).finished
    }

    /// The fence of this holder at `epoch`, to AND into a write.
    pub fn fence(&self, epoch: Epoch) -> Fence {
        Fence::new(
            &self.statements,
            &self.config.lease,
            &self.config.holder,
            epoch,
        )
    }

    /// How long the most recent renewals (up to 10 000) took, from the start
    /// of the statement to the machine having handled its reply.
    pub fn renew_latencies(&self) -> Vec<Duration> {
        lock(&self.shared.renew_latencies).clone()
    }

    /// Runs `job` on the lease thread's own connection, between two lease
    /// statements, and returns its result (`None` if the thread has
    /// stopped). The lease loop waits for it: keep it short. Meant for
    /// measurements and diagnostics (e.g. timing a bare statement on the
    /// very connection the driver renews through).
    pub fn with_connection<R: Send + 'static>(
        &self,
        job: impl FnOnce(&rusqlite::Connection) -> R + Send + 'static,
    ) -> Option<R> {
        let (tx, rx) = mpsc::channel();
        let job: ConnectionJob = Box::new(move |conn| {
            let _ = tx.send(job(conn));
        });
        self.control.send(Control::Run(job)).ok()?;
        rx.recv().ok()
    }

    /// Stops the gated work, releases the lease if held, and returns when
    /// done. Returns the fatal error that stopped the driver earlier, if any.
    pub fn shutdown(mut self) -> Result<(), Error> {
        let _ = self.control.send(Control::Shutdown);
        self.join()
    }

    /// Stops at once WITHOUT releasing, as if the process had crashed: the
    /// gated work is cancelled and joined, the row is left to lapse by its
    /// ttl. For tests and demonstrations.
    pub fn abandon(mut self) {
        let _ = self.control.send(Control::Abandon);
        let _ = self.join();
    }

    fn join(&mut self) -> Result<(), Error> {
        match self.thread.take() {
            Some(thread) => thread.join().unwrap_or_else(|_| {
                Err(Error::Panicked {
                    lease: self.config.lease.to_string(),
                })
            }),
            None => Ok(()),
        }
    }
}

impl Drop for SqliteLease {
    fn drop(&mut self) {
        if self.thread.is_none() {
            return;
        }
        let _ = self.control.send(Control::Shutdown);
        let _ = self.wait_for(self.config.ttl + self.config.request_timeout, |_| false);
        if self.is_finished() {
            let _ = self.join();
        } else {
            tracing::warn!(lease = %self.config.lease, "lease thread did not stop in time; detaching it");
        }
    }
}

/// The lease thread.
struct Worker {
    lease: LeaseName,
    holder: HolderId,
    ttl_millis: i64,
    state: LeaseState,
    table: LeaseTable,
    watchdog: Watchdog,
    gate: Gate,
    shared: Arc<Shared>,
    origin: std::time::Instant,
    inbox: mpsc::Receiver<Control>,
    fatal: Option<Error>,
}

impl Worker {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn run(mut self) -> Result<(), Error> {
        let mut handle_gone = false;
        self.state.handle_timeout(self.now());
        loop {
            self.carry_out();
            let Some(wake) = self.state.poll_timeout() else {
                break;
            };
            let wait = wake.saturating_duration_since(self.now());
            let control = if handle_gone {
                std::thread::sleep(wait);
                None
            } else {
                match self.inbox.recv_timeout(wait) {
                    Ok(control) => Some(control),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        handle_gone = true;
                        Some(Control::Shutdown)
                    }
                }
            };
            let now = self.now();
            match control {
                None => self.state.handle_timeout(now),
                Some(Control::Shutdown) => self.state.handle_shutdown(now),
                Some(Control::Run(job)) => {
                    job(self.table.connection());
                    self.state.handle_timeout(self.now());
                }
                Some(Control::Abandon) => {
                    tracing::warn!(lease = %self.lease, holder = %self.holder, "abandoning the lease without releasing it");
                    break;
                }
            }
        }
        self.gate.stop();
        self.gate.join_stopped();
        self.shared.finish();
        match self.fatal.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Drains the machine's commands and carries them out in order; a
    /// statement's reply is fed back once the commands before it are done.
    fn carry_out(&mut self) {
        loop {
            let mut reply = None;
            while let Some(command) = self.state.poll_command() {
                match command {
                    Command::Execute { request, operation } => {
                        // Work of an ended term is gone before any statement.
                        self.gate.join_stopped();
                        let started = std::time::Instant::now();
                        let outcome = self.execute(operation);
                        reply = Some((request, operation, outcome, started));
                    }
                    // A synchronous statement has already returned.
                    Command::Cancel { .. } => {}
                    Command::StartWork { epoch } => {
                        self.gate.start(&self.lease, &self.holder, epoch);
                    }
                    Command::StopWork { .. } => self.gate.stop(),
                    Command::Publish(leadership) => {
                        tracing::info!(lease = %self.lease, holder = %self.holder, ?leadership, "leadership changed");
                        self.shared.publish(leadership);
                    }
                    Command::Finished => {}
                }
            }
            let Some((request, operation, reply, started)) = reply else {
                return;
            };
            self.state.handle_reply(self.now(), request, reply);
            if let Operation::Renew { .. } = operation {
                let mut latencies = lock(&self.shared.renew_latencies);
                if latencies.len() >= RENEW_SAMPLES {
                    latencies.drain(..RENEW_SAMPLES / 10);
                }
                latencies.push(started.elapsed());
            }
        }
    }

    fn execute(&mut self, operation: Operation) -> Reply {
        let bindings = Bindings {
            lease: self.lease.as_str(),
            holder: self.holder.as_str(),
            ttl_millis: self.ttl_millis,
        };
        let (reply, error) = {
            let _armed = self.watchdog.arm();
            self.table.execute(operation, &bindings, &self.holder)
        };
        if let Some(error) = error {
            match reply {
                Reply::Failed(Failure::Fatal) => {
                    tracing::error!(lease = %self.lease, ?operation, "{error}");
                    self.fatal = Some(error);
                }
                _ => tracing::warn!(lease = %self.lease, ?operation, "retrying after: {error}"),
            }
        }
        reply
    }
}
