//! The handle of a running SQLite contender, and its builder.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{Config, Instant, Leadership, LeaseState};

use super::changes::{ChangeSource, Notices};
use super::error::Error;
use super::fence::Fence;
use super::gate::{Gate, LeaderContext};
use super::open::Database;
use super::thread::DriverThread;
use super::worker::{ConnectionJob, Control, Worker};
use crate::clock::Clock;
use crate::publish::Publisher;
use crate::subscription::Subscription;
use crate::view::LeaseView;

/// Configures a [`SqliteLease`] before it starts. Made by
/// [`SqliteLease::builder`].
pub struct SqliteLeaseBuilder {
    config: Config,
    database: Database,
    gate: Gate,
    publisher: Arc<Publisher>,
    notices: Notices,
}

/// How often a follower checks `PRAGMA data_version` for another
/// connection's commit when it cannot watch the file: a release is
/// noticed within about this long. Each check is a timed wake-up (about
/// 50 µs of CPU on a small VM, so about 0.2 % of a core).
pub const DEFAULT_CHANGE_CHECK: Duration = Duration::from_millis(25);

impl std::fmt::Debug for SqliteLeaseBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteLeaseBuilder")
            .field("config", &self.config)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl SqliteLeaseBuilder {
    /// Registers work to run while this node leads: `work` is started on its
    /// own thread at the start of every term with the term's
    /// [`LeaderContext`], and must return soon after the term ends
    /// ([`LeaderContext::sleep`] wakes at once then). Several may be
    /// registered.
    pub fn while_leader(mut self, work: impl Fn(LeaderContext) + Send + Sync + 'static) -> Self {
        self.gate.add(Arc::new(work));
        self
    }

    /// Times deadlines on `clock` instead of the system's suspend-aware
    /// clock: a test seam (a clock that jumps, as a suspend would).
    pub fn clock(self, clock: impl Clock) -> Self {
        self.publisher.set_clock(Arc::new(clock));
        self
    }

    /// Release notifications (on by default): a follower watches the
    /// database file (inotify on its directory) and, when another
    /// connection commits, checks `PRAGMA data_version`, reads the lease's
    /// row, and tries at once if the row shows the lease free or lapsed. A
    /// clean handover then takes milliseconds instead of up to one
    /// interval. Without inotify it polls `PRAGMA data_version` every
    /// [`DEFAULT_CHANGE_CHECK`] instead. The trade: on a busy file the
    /// follower also wakes for unrelated writes, each costing one row read
    /// (never an acquire unless the lease is free). Off: a follower finds a
    /// release at its next poll.
    pub fn notifications(mut self, on: bool) -> Self {
        self.notices = if on { Notices::Watch } else { Notices::Off };
        self
    }

    /// Release notifications by polling `PRAGMA data_version` every
    /// `every` (at least 1 ms) instead of watching the file: for
    /// filesystems whose change notifications miss other writers.
    pub fn change_check(mut self, every: Duration) -> Self {
        self.notices = Notices::Poll(every.max(Duration::from_millis(1)));
        self
    }

    /// Every leadership change from the start on, in order.
    pub fn subscribe(&self) -> Subscription {
        self.publisher.subscribe()
    }

    /// Validates the configuration, opens the database (creating the file
    /// and table if allowed), checks the table, and starts the lease
    /// thread. A bad configuration is reported before the file is touched.
    pub fn start(self) -> Result<SqliteLease, Error> {
        let SqliteLeaseBuilder {
            config,
            mut database,
            gate,
            publisher,
            notices,
        } = self;
        let state = LeaseState::new(config.clone(), Instant::ZERO)?;
        let (table, watchdog) =
            super::watchdog::open_watched(&mut database, config.request_timeout)?;
        let (control, inbox) = mpsc::channel();
        let waker = control.clone();
        let changes = ChangeSource::start(notices, &database.location, move || {
            waker.send(Control::FileChanged).is_ok()
        });
        let worker = Worker {
            lease: config.lease.clone(),
            holder: config.holder.clone(),
            ttl_millis: config.ttl_millis(),
            state,
            table,
            watchdog,
            gate,
            publisher: Arc::clone(&publisher),
            origin: publisher.now(),
            inbox,
            fatal: None,
            changes,
            data_version: None,
        };
        let thread = DriverThread::spawn(
            format!("picolease-{}", config.lease),
            config.lease.to_string(),
            move || worker.run(),
        )?;
        Ok(SqliteLease {
            statements: Statements::new(Dialect::Sqlite, &database.table),
            view: LeaseView::new(config, publisher),
            control,
            thread,
        })
    }
}

/// One contender for one lease on SQLite: the handle of its lease thread.
/// Made with [`SqliteLease::builder`].
///
/// Call [`SqliteLease::shutdown`] to stop the work and release the lease.
/// Dropping the handle asks for the same shutdown and waits for it at most
/// a ttl, so a drop never hangs.
///
/// It dereferences to a [`LeaseView`] (the same for both drivers):
/// `config()`, `lease()`, `holder()`, `leadership()`, `watch()`,
/// `subscribe()`, `renew_latencies()`.
pub struct SqliteLease {
    view: LeaseView,
    statements: Statements,
    control: mpsc::Sender<Control>,
    thread: DriverThread,
}

impl std::ops::Deref for SqliteLease {
    type Target = LeaseView;
    fn deref(&self) -> &LeaseView {
        &self.view
    }
}

impl std::fmt::Debug for SqliteLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SqliteLease").field(&self.view).finish()
    }
}

impl SqliteLease {
    /// A contender for `config` (lease, holder id, timings) on `database`.
    pub fn builder(config: Config, database: Database) -> SqliteLeaseBuilder {
        let publisher = Arc::new(Publisher::new(crate::clock::system(), config.lease.clone()));
        let statements = Arc::new(Statements::new(Dialect::Sqlite, &database.table));
        SqliteLeaseBuilder {
            gate: Gate::new(
                Arc::clone(&publisher),
                statements,
                config.lease.clone(),
                config.holder.clone(),
            ),
            config,
            database,
            publisher,
            notices: Notices::Watch,
        }
    }

    /// Registers more work to run while this node leads, like
    /// [`SqliteLeaseBuilder::while_leader`]; if this node leads now, it
    /// starts at once in the current term.
    pub fn while_leader(&self, work: impl Fn(LeaderContext) + Send + Sync + 'static) {
        let _ = self.control.send(Control::AddWork(Arc::new(work)));
    }

    /// The fence of the current term, if this node leads.
    pub fn fence(&self) -> Option<Fence> {
        let epoch = self.leadership().leader_epoch()?;
        Some(Fence::new(
            &self.statements,
            self.lease(),
            self.holder(),
            epoch,
        ))
    }

    /// Blocks until the leadership state satisfies `done` (checked now and
    /// on every change), the driver finishes, or `timeout` passes. Returns
    /// the state that satisfied it.
    pub fn wait_for(
        &self,
        timeout: Duration,
        done: impl FnMut(&Leadership) -> bool,
    ) -> Option<Leadership> {
        self.view.publisher().wait_for(timeout, done)
    }

    /// Blocks until the leadership state changes or `timeout` passes;
    /// returns the new state if it changed.
    pub fn wait_change(&self, timeout: Duration) -> Option<Leadership> {
        self.view.publisher().wait_change(timeout)
    }

    /// True once the thread has stopped (after shutdown, abort, or a fatal
    /// error; [`SqliteLease::shutdown`] then returns the error).
    pub fn is_finished(&self) -> bool {
        self.view.publisher().is_finished()
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
        self.thread.stop(&self.control, Control::Shutdown)
    }

    /// Stops at once WITHOUT releasing, as if the process had crashed: the
    /// gated work is cancelled and joined, the row is left to lapse by its
    /// ttl. For tests and demonstrations.
    pub fn abort(mut self) {
        let _ = self.thread.stop(&self.control, Control::Abort);
    }
}

impl Drop for SqliteLease {
    fn drop(&mut self) {
        if !self.thread.is_joinable() {
            return;
        }
        let _ = self.control.send(Control::Shutdown);
        let _ = self.wait_for(self.config().ttl + self.config().request_timeout, |_| false);
        if self.is_finished() {
            let _ = self.thread.join();
        } else {
            tracing::warn!(lease = %self.lease(), "lease thread did not stop in time; detaching it");
        }
    }
}
