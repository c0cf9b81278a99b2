//! HTTP helpers for the `run --listen` tests: a free port, a raw GET (fine
//! in a test, never in the CLI), polling, and reading a Prometheus sample.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::PATIENCE;

/// A free port on 127.0.0.1 (bound, then let go).
pub fn free_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// `GET path` on `addr`: the status and the body, or `None` when nothing
/// answers (yet).
pub fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(PATIENCE)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// Polls until `get` answers with something `done` accepts.
pub fn wait_get(addr: &str, path: &str, done: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let start = Instant::now();
    loop {
        if let Some((status, body)) = get(addr, path) {
            if done(status, &body) {
                return (status, body);
            }
        }
        assert!(
            start.elapsed() < PATIENCE,
            "GET {addr}{path} never answered as expected"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of the sample `name{labels}` in a Prometheus exposition.
pub fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}
