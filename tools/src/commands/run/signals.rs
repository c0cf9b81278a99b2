//! What reaches `run`'s loop from outside the driver: the signals that
//! stop it, and the wedge test seam.

use std::sync::mpsc;
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};

use super::session::Event;
use crate::failure::CliError;

/// Test seam (hidden): `PICOLEASE_TEST_WEDGE_AFTER_MS=N` calls `wedge`
/// (which blocks the driver's loop) N ms after the start, so a test sees
/// /healthz fail.
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

/// SIGTERM, SIGINT and SIGHUP (a closed terminal) stop `run` cleanly: CMD
/// first, then the release ([`Event::Signal`]; with `handover_on_term`,
/// [`Event::HandOver`]). SIGUSR1 is "hand over, then exit" (DESIGN §3
/// "Preferred holders"): [`Event::HandOver`]. Installed before anything
/// starts, so a SIGTERM during start-up is not lost.
pub(super) fn install_signals(
    events: mpsc::Sender<Event>,
    handover_on_term: bool,
) -> Result<(), CliError> {
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1])
        .map_err(|e| CliError::runtime(format!("cannot install signal handlers: {e}")))?;
    std::thread::Builder::new()
        .name("picolease-signals".into())
        .spawn(move || {
            for received in signals.forever() {
                let event = if received == SIGUSR1 || handover_on_term {
                    Event::HandOver
                } else {
                    Event::Signal
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| CliError::runtime(format!("cannot start the signal thread: {e}")))?;
    Ok(())
}
