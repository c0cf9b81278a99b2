//! What wakes the SQLite loop: its handle's control messages and, while
//! the core asks it to watch, the file watch, both waited on by the loop's
//! own thread, so another connection's commit reaches the loop with no
//! second thread in between (`changes.rs` says what forwarding it from
//! one cost).
//!
//! Control messages travel on a channel. Under the crate's Linux predicate
//! (`changes.rs`) every send also rings an eventfd, the "bell", so that
//! the loop can wait in one `poll` on the bell and the inotify watch;
//! elsewhere there is no watch and the loop waits on the channel alone.
//!
//! The wait's end is a timerfd armed at an absolute time on
//! `CLOCK_BOOTTIME`, never `poll`'s own timeout. A process stopped by
//! SIGSTOP while it waits in `poll`/`ppoll` has the call restarted at
//! SIGCONT with the time that was left *when it stopped* (the kernel
//! writes the remaining timeout back before the stop; measured here: a
//! 3 s `ppoll` stopped after 0.5 s for 4 s returned 2.5 s after SIGCONT).
//! A leader paused past its deadline then slept up to an interval more
//! before it read its clock and said `follower`, while its successor led.
//! An absolute timer that expired during the stop is readable at once, so
//! the restarted `poll` returns at SIGCONT (and after a suspend, since the
//! clock counts it).

use std::sync::mpsc;
#[cfg(all(target_os = "linux", not(picolease_portable)))]
use std::sync::Arc;
use std::time::Duration;

#[cfg(all(target_os = "linux", not(picolease_portable)))]
use rustix::fd::OwnedFd;

use super::changes::ChangeSource;
use super::gate::Work;
use crate::runner::Control as AnyControl;

/// What a SQLite handle says to its loop: the drivers' one [`AnyControl`]
/// with this loop's own messages.
pub(crate) type Control = AnyControl<Work, Local>;

/// A closure run on the loop's connection, between statements.
pub(crate) type ConnectionJob = Box<dyn FnOnce(&rusqlite::Connection) + Send>;

/// What only the SQLite loop hears.
pub(crate) enum Local {
    /// Run a closure on the connection, between two statements.
    Run(ConnectionJob),
    /// Another connection wrote to the database file (the file watch,
    /// which exists only under the Linux predicate of `changes.rs`).
    #[cfg_attr(
        not(all(target_os = "linux", not(picolease_portable))),
        allow(dead_code)
    )]
    FileChanged,
}

/// A new channel to a loop: the handle's end and the loop's. Fails only
/// when the process cannot open another file descriptor (the eventfd):
/// the driver then does not start, as when its thread cannot be spawned.
pub(crate) fn channel() -> Result<(Outbox, Inbox), super::error::SqliteError> {
    let (sender, receiver) = mpsc::channel();
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    let bell = Arc::new(
        rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .map_err(|e| super::error::SqliteError::Spawn(format!("cannot create an eventfd: {e}")))?,
    );
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    let alarm = rustix::time::timerfd_create(
        rustix::time::TimerfdClockId::Boottime,
        rustix::time::TimerfdFlags::CLOEXEC | rustix::time::TimerfdFlags::NONBLOCK,
    )
    .map_err(|e| super::error::SqliteError::Spawn(format!("cannot create a timerfd: {e}")))?;
    Ok((
        Outbox {
            sender: Some(sender),
            #[cfg(all(target_os = "linux", not(picolease_portable)))]
            bell: Arc::clone(&bell),
        },
        Inbox {
            receiver,
            #[cfg(all(target_os = "linux", not(picolease_portable)))]
            bell,
            #[cfg(all(target_os = "linux", not(picolease_portable)))]
            alarm,
            handle_gone: false,
        },
    ))
}

/// The handle's end: sends control messages and wakes the loop.
pub(crate) struct Outbox {
    /// `None` only while dropping: the loop must see the channel closed
    /// when the bell rings.
    sender: Option<mpsc::Sender<Control>>,
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    bell: Arc<OwnedFd>,
}

impl Outbox {
    /// Says `control` to the loop; false once it has stopped.
    pub(crate) fn send(&self, control: Control) -> bool {
        let sent = self
            .sender
            .as_ref()
            .is_some_and(|sender| sender.send(control).is_ok());
        self.ring();
        sent
    }

    /// Wakes the loop (a no-op where it waits on the channel itself).
    fn ring(&self) {
        #[cfg(all(target_os = "linux", not(picolease_portable)))]
        {
            // Fails only when the counter would overflow: the loop is
            // then already due to wake.
            let _ = rustix::io::write(&*self.bell, &1u64.to_ne_bytes());
        }
    }
}

impl Drop for Outbox {
    /// The loop learns that its handle is gone (and shuts down) from the
    /// closed channel: close it, then wake the loop to look.
    fn drop(&mut self) {
        drop(self.sender.take());
        self.ring();
    }
}

/// The loop's end.
pub(crate) struct Inbox {
    receiver: mpsc::Receiver<Control>,
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    bell: Arc<OwnedFd>,
    /// Ends a wait at an absolute time on `CLOCK_BOOTTIME` (module docs:
    /// why not `poll`'s timeout).
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    alarm: OwnedFd,
    /// Set once the handle is gone; the loop then hears `Shutdown` once.
    handle_gone: bool,
}

impl Inbox {
    /// The next control message within `wait`, or
    /// [`Local::FileChanged`] when `changes`' watch saw a write to the
    /// database while `watching`; `None` when neither came. Once the
    /// handle is gone, a shutdown ([`Input::Shutdown`](picolease_core::engine::Input::Shutdown)) is returned once, as if the
    /// handle had asked, and later waits merely sleep.
    pub(crate) fn receive(
        &mut self,
        wait: Duration,
        changes: &ChangeSource,
        watching: bool,
    ) -> Option<Control> {
        if self.handle_gone {
            std::thread::sleep(wait);
            return None;
        }
        #[cfg(all(target_os = "linux", not(picolease_portable)))]
        {
            self.poll(wait, changes, watching)
        }
        #[cfg(not(all(target_os = "linux", not(picolease_portable))))]
        {
            // There is no watch here (`changes.rs`): the channel alone.
            let _ = (changes, watching);
            match self.receiver.recv_timeout(wait) {
                Ok(control) => Some(control),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => self.gone(),
            }
        }
    }

    /// The handle is gone: shut down, as if it had asked.
    fn gone(&mut self) -> Option<Control> {
        self.handle_gone = true;
        Some(Control::SHUTDOWN)
    }

    /// A message already queued, if any.
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    fn queued(&mut self) -> Option<Option<Control>> {
        match self.receiver.try_recv() {
            Ok(control) => Some(Some(control)),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => Some(self.gone()),
        }
    }

    /// One `poll` on the bell and, while watching, the file watch.
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    fn poll(&mut self, wait: Duration, changes: &ChangeSource, watching: bool) -> Option<Control> {
        use rustix::event::{PollFd, PollFlags, Timespec};
        // Silences the rings of messages already queued (taken below), so
        // that they do not end the next wait at once; a send after this
        // rings again.
        self.silence();
        if let Some(queued) = self.queued() {
            return queued;
        }
        let watch = changes.watch.as_ref();
        if !watching {
            // Not waited on: forget what was written meanwhile.
            watch.map(super::changes::FileWatch::drain);
        }
        // Armed at an absolute time, so a wait restarted after SIGCONT (or
        // a suspend) ends at once once that time has passed.
        let end = crate::clock::boottime().saturating_add(wait);
        let at = rustix::time::Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: i64::try_from(end.as_secs()).unwrap_or(i64::MAX),
                // A zero `it_value` would disarm the timer.
                tv_nsec: i64::from(end.subsec_nanos().max(1)),
            },
        };
        // Arming resets the expiry count: a past wait's expiry does not
        // end this one. Fails only on a bad descriptor or value (neither
        // happens); the wait then lasts until a message or a write.
        let _ = rustix::time::timerfd_settime(
            &self.alarm,
            rustix::time::TimerfdTimerFlags::ABSTIME,
            &at,
        );
        let bell = PollFd::new(&*self.bell, PollFlags::IN);
        let alarm = PollFd::new(&self.alarm, PollFlags::IN);
        let (rang, written) = match watch.filter(|_| watching) {
            Some(watch) => {
                let mut fds = [
                    bell,
                    alarm,
                    PollFd::from_borrowed_fd(watch.fd(), PollFlags::IN),
                ];
                // An interrupted wait returns early; the loop waits again.
                let _ = rustix::event::poll(&mut fds, None);
                (!fds[0].revents().is_empty(), !fds[2].revents().is_empty())
            }
            None => {
                let mut fds = [bell, alarm];
                let _ = rustix::event::poll(&mut fds, None);
                (!fds[0].revents().is_empty(), false)
            }
        };
        if rang {
            // A ring that raced with the silence left its message queued,
            // which the next line reads.
            self.silence();
            if let Some(queued) = self.queued() {
                return queued;
            }
        }
        if written && watch.is_some_and(super::changes::FileWatch::drain) {
            return Some(Control::Loop(Local::FileChanged));
        }
        None
    }

    /// Resets the bell's counter (a no-op when it is not ringing).
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    fn silence(&self) {
        let _ = rustix::io::read(&*self.bell, &mut [0u8; 8]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Input;
    use crate::sqlite::changes::Notices;
    use crate::sqlite::open::Location;

    /// A wait long enough that reaching it means the wake-up was lost.
    const LONG: Duration = Duration::from_secs(20);

    fn unwatched() -> ChangeSource {
        ChangeSource::start(Notices::Off, &Location::Memory)
    }

    #[test]
    fn a_message_sent_during_the_wait_ends_it() {
        let (outbox, mut inbox) = channel().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            assert!(outbox.send(Control::Engine(Input::GiveUp(
                picolease_core::LeaseName::new("l").unwrap()
            ))));
            outbox
        });
        let got = inbox.receive(LONG, &unwatched(), false);
        assert!(
            matches!(got, Some(Control::Engine(Input::GiveUp(lease))) if lease.as_str() == "l")
        );
        drop(sender.join().unwrap());
    }

    #[test]
    fn a_dropped_handle_is_a_shutdown_once_then_nothing() {
        let (outbox, mut inbox) = channel().unwrap();
        let dropper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(outbox);
        });
        assert!(matches!(
            inbox.receive(LONG, &unwatched(), false),
            Some(Control::Engine(Input::Shutdown))
        ));
        dropper.join().unwrap();
        assert!(inbox
            .receive(Duration::from_millis(1), &unwatched(), false)
            .is_none());
    }

    /// Messages taken while the loop was busy leave no ring behind: the
    /// next wait lasts its whole time instead of ending at once.
    #[test]
    fn messages_already_taken_do_not_end_the_next_wait() {
        let (outbox, mut inbox) = channel().unwrap();
        assert!(outbox.send(Control::Engine(Input::HandOverToPreferred)));
        assert!(outbox.send(Control::Engine(Input::HandOverToPreferred)));
        for _ in 0..2 {
            assert!(matches!(
                inbox.receive(LONG, &unwatched(), false),
                Some(Control::Engine(Input::HandOverToPreferred))
            ));
        }
        let wait = Duration::from_millis(100);
        let started = std::time::Instant::now();
        assert!(inbox.receive(wait, &unwatched(), false).is_none());
        assert!(started.elapsed() >= wait, "the wait ended early");
    }

    /// A message and a write that arrive together: the message first, the
    /// write at the next wait, at once.
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    #[test]
    fn a_message_and_a_write_together_are_both_heard() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.db");
        let changes = ChangeSource::start(Notices::Watch, &Location::File(file));
        let (outbox, mut inbox) = channel().unwrap();
        std::fs::write(dir.path().join("a.db-wal"), b"frame").unwrap();
        assert!(outbox.send(Control::Engine(Input::HandOverToPreferred)));
        assert!(matches!(
            inbox.receive(LONG, &changes, true),
            Some(Control::Engine(Input::HandOverToPreferred))
        ));
        assert!(matches!(
            inbox.receive(LONG, &changes, true),
            Some(Control::Loop(Local::FileChanged))
        ));
    }

    /// While watching, another writer's commit to the file (here: a write
    /// to its WAL) wakes the wait; while not watching it is forgotten,
    /// and so is a write to another file of the directory.
    #[cfg(all(target_os = "linux", not(picolease_portable)))]
    #[test]
    fn a_write_to_the_database_wakes_only_a_watching_loop() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.db");
        let changes = ChangeSource::start(Notices::Watch, &Location::File(file.clone()));
        let (_outbox, mut inbox) = channel().unwrap();
        let wal = dir.path().join("a.db-wal");
        std::fs::write(&wal, b"frame").unwrap();
        assert!(inbox
            .receive(Duration::from_millis(5), &changes, false)
            .is_none());
        std::fs::write(dir.path().join("other.db"), b"x").unwrap();
        assert!(inbox
            .receive(Duration::from_millis(5), &changes, true)
            .is_none());
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            std::fs::write(&wal, b"frame 2").unwrap();
        });
        assert!(matches!(
            inbox.receive(LONG, &changes, true),
            Some(Control::Loop(Local::FileChanged))
        ));
        writer.join().unwrap();
    }
}
