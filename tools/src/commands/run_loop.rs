//! What both forms of `picolease run` share around their event loops (a
//! lone lease in `run.rs`, several names in `run_set.rs`): the signals
//! that stop them, the printing of a shutdown's events as they are
//! published, and the wedge test seam. Neither loop imports the other.

use std::sync::mpsc;
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};

use crate::failure::CliError;

/// Test seam (hidden): `PICOLEASE_TEST_WEDGE_AFTER_MS=N` calls `wedge`
/// (which blocks the driver's loop) N ms after the start, so a test sees
/// /healthz fail. Shared by the single-lease and the set `run`.
pub(super) fn wedge_for_tests(wedge: impl FnOnce() + Send + 'static) {
    let Some(after) = std::env::var("PICOLEASE_TEST_WEDGE_AFTER_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    else {
        return;
    };
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(after));
        wedge();
    });
}

/// Runs `shutdown` while another thread hands every event it publishes to
/// `print` as it arrives, up to the driver's end (`DriverEnded`), when
/// `printing`. A shutdown returns only after the driver has finished,
/// which on PostgreSQL is a linger after the release
/// (`picolease::postgres::DEFAULT_LINGER`): printing the release's
/// `follower` only then would put it after the successor's `leader` line.
pub(super) fn print_during<E: Send + IsDriverEnd, T>(
    printing: bool,
    events: mpsc::Receiver<E>,
    print: impl FnMut(E) + Send,
    shutdown: impl FnOnce() -> T,
) -> T {
    if !printing {
        return shutdown();
    }
    let mut print = print;
    std::thread::scope(|scope| {
        let printer = scope.spawn(move || {
            while let Ok(event) = events.recv() {
                if event.is_driver_end() {
                    break;
                }
                print(event);
            }
        });
        let outcome = shutdown();
        let _ = printer.join();
        outcome
    })
}

/// The loop's "the driver has published everything" event.
pub(super) trait IsDriverEnd {
    /// True for the event that follows the driver's last transition.
    fn is_driver_end(&self) -> bool;
}

/// SIGTERM, SIGINT and SIGHUP (a closed terminal) stop `run` cleanly: CMD
/// first, then the release; they become `signal()`. SIGUSR1 ("hand over,
/// then exit", DESIGN §3 "Preferred holders") becomes `hand_over()`.
pub(super) fn install_signals_with<E: Send + 'static>(
    events: mpsc::Sender<E>,
    signal: fn() -> E,
    hand_over: fn() -> E,
) -> Result<(), CliError> {
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1])
        .map_err(|e| CliError::runtime(format!("cannot install signal handlers: {e}")))?;
    std::thread::Builder::new()
        .name("picolease-signals".into())
        .spawn(move || {
            for received in signals.forever() {
                let event = if received == SIGUSR1 {
                    hand_over()
                } else {
                    signal()
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| CliError::runtime(format!("cannot start the signal thread: {e}")))?;
    Ok(())
}
