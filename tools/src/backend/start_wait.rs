//! A start while the database fails over (issue 44): `run` and `bench`
//! check the server once before they start the driver, so that a wrong
//! address or a refused login is reported at once (exit 1 or 2) instead
//! of retried for ever. A server that answers but is not ready for writes
//! yet (a standby not yet promoted that refuses writes on a multi-host
//! URL, a proxy that accepts and closes while it has no primary, a server
//! starting up or shutting down, a read-only server) is what a failover
//! looks like, and a running contender rides it out; so does a start,
//! for up to [`START_WAIT`], saying each time on stderr why it waits.

use std::time::{Duration, Instant};

use crate::duration::show;
use crate::failure::CliError;

/// How long a start waits for a server that is not ready for writes:
/// longer than a failover under Patroni's defaults (a 30 s leader key
/// and a 10 s loop) or a managed service's (one to two minutes).
pub const START_WAIT: Duration = Duration::from_secs(120);

/// The first retry's delay; each next one doubles, up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_millis(250);
const MAX_DELAY: Duration = Duration::from_secs(2);

/// What one check of the server found.
pub enum Check<T> {
    /// Ready: the driver may start.
    Ready(T),
    /// Not ready for writes yet, as during a failover: why, and the error
    /// to report if it never gets ready.
    NotReady(String, CliError),
    /// Retrying cannot help (unreachable, refused login, bad TLS).
    Failed(CliError),
}

/// Checks the server at `place` until it is ready, for up to
/// [`START_WAIT`]; a warning on stderr for each wait, with the time left.
pub fn until_ready<T>(place: &str, check: impl FnMut() -> Check<T>) -> Result<T, CliError> {
    until_ready_within(place, START_WAIT, check)
}

fn until_ready_within<T>(
    place: &str,
    bound: Duration,
    mut check: impl FnMut() -> Check<T>,
) -> Result<T, CliError> {
    let started = Instant::now();
    let mut delay = FIRST_DELAY;
    loop {
        match check() {
            Check::Ready(ready) => return Ok(ready),
            Check::Failed(error) => return Err(error),
            Check::NotReady(reason, error) => {
                let left = bound.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(error);
                }
                eprintln!(
                    "warning: {place} is not ready for writes ({reason}), as during a failover; \
                     retrying in {}, for up to {} more",
                    show(delay),
                    show(left)
                );
                std::thread::sleep(delay.min(left));
                delay = (delay * 2).min(MAX_DELAY);
            }
        }
    }
}

/// Whether a connection failure's text is a server not ready for writes
/// rather than one that is not there: PostgreSQL's and tokio-postgres's
/// words for a standby, a start, a shutdown, a closed or reset
/// connection and a timeout; MySQL's and MariaDB's for a read-only server
/// (error 1290, 1836) and a connection the proxy dropped. "Connection
/// refused" (nothing listens) is not among them.
pub fn not_ready(reason: &str) -> bool {
    const WORDS: [&str; 13] = [
        "does not allow writes",
        "connection closed",
        "starting up",
        "shutting down",
        "in recovery",
        "not yet accepting connections",
        "reset by peer",
        "timed out",
        "read-only",
        "read only",
        "broken pipe",
        "unexpected eof",
        "early eof",
    ];
    let reason = reason.to_ascii_lowercase();
    WORDS.iter().any(|w| reason.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_not_ready_is_waited_for_and_an_absent_one_is_not() {
        assert!(not_ready(
            "error connecting to server: database does not allow writes"
        ));
        assert!(not_ready("connection closed"));
        assert!(not_ready("error communicating with the server: early eof"));
        assert!(not_ready(
            "db error: FATAL: the database system is starting up"
        ));
        assert!(not_ready(
            "The MariaDB server is running with the --read-only option so it cannot execute this statement"
        ));
        assert!(!not_ready(
            "error connecting to server: Connection refused (os error 111)"
        ));
        assert!(!not_ready("password authentication failed for user \"x\""));
    }

    #[test]
    fn it_retries_until_ready_and_gives_up_at_the_bound() {
        let mut calls = 0;
        let ready = until_ready_within("db", Duration::from_secs(5), || {
            calls += 1;
            if calls < 3 {
                Check::NotReady("connection closed".into(), CliError::runtime("closed"))
            } else {
                Check::Ready(calls)
            }
        });
        assert_eq!(ready.unwrap(), 3);
        let started = Instant::now();
        let gave_up = until_ready_within("db", Duration::from_millis(300), || {
            Check::<()>::NotReady("connection closed".into(), CliError::runtime("closed"))
        });
        assert!(gave_up.unwrap_err().to_string().contains("closed"));
        assert!(started.elapsed() >= Duration::from_millis(300));
        let failed = until_ready_within("db", Duration::from_secs(5), || {
            Check::<()>::Failed(CliError::runtime("refused"))
        });
        assert!(failed.unwrap_err().to_string().contains("refused"));
    }
}
