//! Release notifications on SQLite: noticing another connection's commit
//! without polling.
//!
//! SQLite has no NOTIFY. A commit in WAL mode appends to `<file>-wal` (and
//! a checkpoint writes `<file>`), so an inotify watch of the database's
//! directory reports every commit to the file within microseconds, at no
//! cost while nothing is written. The loop's own thread waits on the watch
//! beside its control messages (`inbox.rs`), so a commit wakes it once;
//! it then checks `PRAGMA data_version` and reads the row, and the core
//! decides (DESIGN §4). A node that is not watching (a leader) is not
//! woken at all. (A thread of the watch's own used to forward each event:
//! a second wake-up on the way to a handover, and two wake-ups for each
//! of a leader's own commits; `bench`'s SQLite renew took 0.17–0.19 ms
//! with it, 0.07–0.08 ms without, and its clean handover 0.41–0.55 ms,
//! 0.34–0.44 ms without, 2026-12-04.)
//!
//! Where inotify is missing (another OS, a filesystem that does not report
//! other hosts' writes), the lease thread polls `PRAGMA data_version`
//! instead, every [`crate::sqlite::DEFAULT_CHANGE_CHECK`]. On this
//! machine a timed wake-up alone costs about 50 µs of CPU, so that poll
//! costs about 0.3 % of a core where the watch costs nothing measurable
//! (`cargo run --release -p picolease --example sqlite_handover`).
//!
//! The watch is built only under `all(target_os = "linux",
//! not(picolease_portable))`, the crate's one predicate for Linux-only
//! pieces (`clock.rs` picks `CLOCK_BOOTTIME` by it too). On macOS and the
//! BSDs, and on Linux built with `--cfg picolease_portable` (how CI tests
//! their code), [`FileWatch`] is a type without values: every driver polls
//! as above, so a clean handover takes up to
//! [`crate::sqlite::DEFAULT_CHANGE_CHECK`] more. A kqueue watch
//! (`EVFILT_VNODE`) could do there what inotify does here, but it watches
//! open files, not a directory's names (the WAL is created and deleted
//! under the watch), and nothing here could test it; it is not written.

use std::path::Path;
use std::time::Duration;

#[cfg(all(target_os = "linux", not(picolease_portable)))]
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
#[cfg(all(target_os = "linux", not(picolease_portable)))]
use rustix::fs::inotify;

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
/// the file watch, which it waits on beside its control messages, or else
/// a poll of the change counter at `poll`. The driver looks only while
/// the core's last `WatchChanges` command said to (a running follower, or
/// a set short of its share with nothing left to try).
pub(crate) struct ChangeSource {
    /// The watch, if any.
    pub(crate) watch: Option<FileWatch>,
    /// How often to poll when there is no watch (`None`: never).
    pub(crate) poll: Option<Duration>,
}

impl ChangeSource {
    /// Starts the watch `notices` asks for on `location` (a file only);
    /// falls back to polling.
    pub(crate) fn start(notices: Notices, location: &super::open::Location) -> Self {
        let watch = match (notices, location) {
            (Notices::Watch, super::open::Location::File(path)) => FileWatch::start(path),
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
}

/// An inotify watch of one database file (its directory, for the file and
/// its WAL). Its events queue in the kernel until [`FileWatch::drain`]
/// reads them; the loop waits on [`FileWatch::fd`] while it watches and
/// drains unread events before each wait while it does not, so the queue
/// stays short.
#[cfg(all(target_os = "linux", not(picolease_portable)))]
pub(crate) struct FileWatch {
    fd: OwnedFd,
    /// The database file's name and its WAL's, in the watched directory.
    names: [std::ffi::OsString; 2],
}

#[cfg(all(target_os = "linux", not(picolease_portable)))]
impl FileWatch {
    /// Watches the directory of `file` for writes to `file` or its WAL.
    /// `None` when inotify is unavailable: the caller polls instead.
    pub(crate) fn start(file: &Path) -> Option<Self> {
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
        Some(FileWatch {
            fd,
            names: [name, wal],
        })
    }

    /// The descriptor that becomes readable when an event is queued.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Reads every queued event; true when one was a write to the file or
    /// its WAL (not another file of the directory), or when the kernel's
    /// queue overflowed and such a write may have been dropped.
    pub(crate) fn drain(&self) -> bool {
        let mut buffer = [std::mem::MaybeUninit::uninit(); 4096];
        let mut events = inotify::Reader::new(&self.fd, &mut buffer);
        let mut ours = false;
        loop {
            match events.next() {
                Ok(event) => {
                    ours |= event.events().contains(inotify::ReadFlags::QUEUE_OVERFLOW);
                    ours |= event.file_name().is_some_and(|n| {
                        let n = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
                            n.to_bytes(),
                        );
                        self.names.iter().any(|name| n == name.as_os_str())
                    })
                }
                Err(rustix::io::Errno::INTR) => continue,
                // Nothing more queued (`AGAIN`), or the watch failed: the
                // engine's own timeouts are the fallback.
                Err(_) => return ours,
            }
        }
    }
}

/// No file watch on this platform (see the module docs): a type without
/// values, so [`ChangeSource::start`] always falls back to polling.
#[cfg(not(all(target_os = "linux", not(picolease_portable))))]
pub(crate) enum FileWatch {}

#[cfg(not(all(target_os = "linux", not(picolease_portable))))]
impl FileWatch {
    /// There is no watch here: the caller polls `PRAGMA data_version`.
    pub(crate) fn start(_file: &Path) -> Option<Self> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::open::Location;

    fn source(notices: Notices, file: &Path) -> ChangeSource {
        ChangeSource::start(notices, &Location::File(file.to_path_buf()))
    }

    /// Where the Linux-only pieces are built, a file is watched (inotify)
    /// and not polled.
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    #[test]
    fn on_linux_a_file_is_watched_not_polled() {
        let dir = tempfile::tempdir().unwrap();
        let changes = source(Notices::Watch, &dir.path().join("a.db"));
        assert!(changes.watch.is_some());
        assert_eq!(changes.poll, None);
    }

    /// Elsewhere (macOS, the BSDs, `--cfg picolease_portable`) there is no
    /// watch: release notices come from polling `PRAGMA data_version`
    /// every `DEFAULT_CHANGE_CHECK`.
    #[cfg(not(all(target_os = "linux", not(picolease_portable))))]
    #[test]
    fn without_inotify_a_file_is_polled_every_default_change_check() {
        let dir = tempfile::tempdir().unwrap();
        let changes = source(Notices::Watch, &dir.path().join("a.db"));
        assert!(changes.watch.is_none());
        assert_eq!(changes.poll, Some(crate::sqlite::DEFAULT_CHANGE_CHECK));
        assert!(changes.is_on());
    }

    /// Everywhere: notices off means neither, and an explicit period is
    /// kept.
    #[test]
    fn off_is_neither_and_a_chosen_period_is_polled() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.db");
        assert!(!source(Notices::Off, &file).is_on());
        let every = Duration::from_millis(7);
        let polled = source(Notices::Poll(every), &file);
        assert!(polled.watch.is_none());
        assert_eq!(polled.poll, Some(every));
    }
}
