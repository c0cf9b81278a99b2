//! Writing to stdout without panicking: a closed pipe must not turn into a
//! panic (as `println!` would), and every line is flushed at once so a
//! reader sees each event as it happens.

use std::io::Write;

/// Writes one line to stdout and flushes it; errors (a closed pipe) are
/// ignored.
pub fn line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// Milliseconds since the Unix epoch of a wall-clock time.
pub fn unix_ms(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
