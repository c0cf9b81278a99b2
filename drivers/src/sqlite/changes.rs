//! Release notifications on SQLite: noticing another connection's commit
//! without polling.
//!
//! SQLite has no NOTIFY. A commit in WAL mode appends to `<file>-wal` (and
//! a checkpoint writes `<file>`), so a thread blocked on an inotify watch of
//! the database's directory learns of every commit to the file within
//! microseconds, at no cost while nothing is written. It only wakes the
//! lease thread; the lease thread then checks `PRAGMA data_version` and
//! reads the row, and the core decides (DESIGN §4).
//!
//! Where inotify is missing (another OS, a filesystem that does not report
//! other hosts' writes), the lease thread polls `PRAGMA data_version`
//! instead, every [`crate::sqlite::DEFAULT_CHANGE_CHECK`]. On this
//! machine a timed wake-up alone costs about 50 µs of CPU, so that poll
//! costs about 0.3 % of a core where the watch costs nothing measurable
//! (`cargo run --release -p picolease --example sqlite_handover`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::inotify;

/// How often the watching thread looks up from its wait to see whether it
/// should stop (its only cost while nothing is written).
const STOP_CHECK: Duration = Duration::from_secs(1);

/// How a driver (a lone lease's or a set's) learns that another
/// connection wrote to the file.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Notices {
    /// Only by its poll at the interval (a set: its survey).
    Off,
    /// A file watch (inotify), or a poll at
    /// [`crate::sqlite::DEFAULT_CHANGE_CHECK`] where there is none.
    Watch,
    /// `PRAGMA data_version` this often.
    Poll(Duration),
}

/// What a driver's thread learns of other connections' commits from:
/// the file watch, which sends it a message, or else a poll of the change
/// counter at `poll`. The driver looks only while the core's last
/// `WatchChanges` command said to (a running follower, or a set short of
/// its share with nothing left to try).
pub(crate) struct ChangeSource {
    /// The running watch, if any.
    pub(crate) watch: Option<FileWatch>,
    /// How often to poll when there is no watch (`None`: never).
    pub(crate) poll: Option<Duration>,
}

impl ChangeSource {
    /// Starts the watch `notices` asks for on `location` (a file only),
    /// calling `wake` on a change; falls back to polling.
    pub(crate) fn start(
        notices: Notices,
        location: &super::open::Location,
        wake: impl Fn() -> bool + Send + 'static,
    ) -> Self {
        let watch = match (notices, location) {
            (Notices::Watch, super::open::Location::File(path)) => FileWatch::start(path, wake),
            _ => None,
        };
        let poll = match notices {
            Notices::Off => None,
            _ if watch.is_some() => None,
            Notices::Watch => Some(super::DEFAULT_CHANGE_CHECK),
            Notices::Poll(every) => Some(every),
        };
        ChangeSource { watch, poll }
    }

    /// True when the driver hears of changes at all (watch or poll).
    pub(crate) fn is_on(&self) -> bool {
        self.watch.is_some() || self.poll.is_some()
    }

    /// The watch's wake-up was taken: the next write wakes the driver again.
    pub(crate) fn taken(&self) {
        if let Some(watch) = &self.watch {
            watch.taken();
        }
    }
}

/// A running watch of one database file; stops its thread when dropped.
pub(crate) struct FileWatch {
    stop: Arc<AtomicBool>,
    /// Set by the watching thread when it wakes the lease thread, cleared
    /// by the lease thread when it handles the wake-up: at most one wake-up
    /// is ever queued.
    pending: Arc<AtomicBool>,
}

impl FileWatch {
    /// Watches the directory of `file` for writes to `file` or its WAL and
    /// calls `wake` (at most one pending at a time); `wake` returns false
    /// once nobody listens, which ends the thread. `None` when inotify is
    /// unavailable: the caller polls instead.
    pub(crate) fn start(file: &Path, wake: impl Fn() -> bool + Send + 'static) -> Option<Self> {
        let dir = match file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        let name = file.file_name()?.to_os_string();
        let mut wal = name.clone();
        wal.push("-wal");
        let fd =
            inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
        inotify::add_watch(
            &fd,
            &dir,
            inotify::WatchFlags::MODIFY
                | inotify::WatchFlags::CLOSE_WRITE
                | inotify::WatchFlags::CREATE
                | inotify::WatchFlags::MOVED_TO,
        )
        .ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let pending = Arc::new(AtomicBool::new(false));
        let watch = FileWatch {
            stop: Arc::clone(&stop),
            pending: Arc::clone(&pending),
        };
        let ours = move |event: &inotify::Event<'_>| {
            event.file_name().is_some_and(|n| {
                let n = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(n.to_bytes());
                n == name.as_os_str() || n == wal.as_os_str()
            })
        };
        std::thread::Builder::new()
            .name("picolease-files".into())
            .spawn(move || {
                let timeout = Timespec::try_from(STOP_CHECK).unwrap_or(Timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                });
                let mut buffer = [std::mem::MaybeUninit::uninit(); 4096];
                while !stop.load(Ordering::Acquire) {
                    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                    if poll(&mut fds, Some(&timeout)).is_err() {
                        continue;
                    }
                    let mut changed = false;
                    let mut events = inotify::Reader::new(&fd, &mut buffer);
                    loop {
                        match events.next() {
                            Ok(event) => changed |= ours(&event),
                            Err(rustix::io::Errno::INTR) => continue,
                            Err(_) => break,
                        }
                    }
                    if changed && !pending.swap(true, Ordering::AcqRel) && !wake() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(watch)
    }

    /// The lease thread took the wake-up: the next write wakes it again.
    pub(crate) fn taken(&self) {
        self.pending.store(false, Ordering::Release);
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}
