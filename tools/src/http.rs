//! `run --listen ADDR`: a small HTTP server (tiny_http, one thread) beside
//! the election loop.
//!
//! | path | answer |
//! | --- | --- |
//! | `GET /metrics` | 200, the Prometheus text exposition of the library's metrics (`lease` = `--name`) |
//! | `GET /leader` | 200 while this process leads, else 503; `{"name", "holder", "epoch"}`: the holder as last seen (its stored id in full; null when free) |
//! | `GET /healthz` | 200 while the loop makes progress; 503 once it has not advanced for interval + 2 × request timeout + the backoff cap (wedged). A follower, or a database out of reach, is healthy. With several names, the same for the set's loop. The body also says `healthy` and `health_reason` (`--health-cmd`'s last verdict; true and null without one) and `work_failures` (CMD's failures under `--restart on-failure`): a failing probe moves the lease, it does not make the status 503 |
//!
//! Anything else is 404 (405 for a method other than GET or HEAD).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use std::collections::BTreeSet;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use picolease::set::{SetSnapshot, SetSnapshots};
use picolease::{HolderId, LeaseName, Snapshot, Snapshots};
use serde_json::json;
use tiny_http::{Header, Method, Request, Response, Server};

use crate::backend::View;
use crate::failure::CliError;
use crate::term::probe::WorkHealth;

/// Bucket bounds of `picolease_statement_duration_seconds`, in seconds.
const STATEMENT_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Parses `--listen`: `IP:PORT` (IPv6 in brackets) or `localhost:PORT`.
pub fn parse_listen(value: &str) -> Result<SocketAddr, CliError> {
    let malformed = || {
        CliError::usage(format!(
            "--listen {value:?} is not an address: use IP:PORT or localhost:PORT (e.g. 127.0.0.1:9464)"
        ))
    };
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let port = value.strip_prefix("localhost:").ok_or_else(malformed)?;
    let port: u16 = port.parse().map_err(|_| malformed())?;
    ("localhost", port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.find(SocketAddr::is_ipv4).or_else(|| addrs.next()))
        .ok_or_else(malformed)
}

/// A bound, not yet serving, listener with its metrics recorder.
pub struct Listener {
    server: Arc<Server>,
    metrics: PrometheusHandle,
    addr: SocketAddr,
}

impl Listener {
    /// Binds `addr` (exit 1 when taken) and installs the Prometheus
    /// recorder: call before the lease starts, so its series register.
    pub fn bind(addr: SocketAddr) -> Result<Self, CliError> {
        let server = Server::http(addr)
            .map_err(|e| CliError::runtime(format!("--listen {addr}: cannot listen there: {e}")))?;
        let metrics = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("picolease_statement_duration_seconds".into()),
                &STATEMENT_BUCKETS,
            )
            .and_then(PrometheusBuilder::install_recorder)
            .map_err(|e| CliError::runtime(format!("cannot install the metrics recorder: {e}")))?;
        Ok(Listener {
            server: Arc::new(server),
            metrics,
            addr,
        })
    }

    /// The address bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `source` on a thread of its own until the process exits.
    pub fn serve(self, source: impl Into<Source>) -> Result<(), CliError> {
        let source = source.into();
        std::thread::Builder::new()
            .name("picolease-http".into())
            .spawn(move || {
                for request in self.server.incoming_requests() {
                    respond(request, &source, &self.metrics);
                }
            })
            .map_err(|e| CliError::runtime(format!("cannot start the HTTP thread: {e}")))?;
        Ok(())
    }
}

/// What `/leader` and `/healthz` read: the contender's view and, for a
/// set, its lease names (`/leader?name=N` for a name outside them is 404).
pub struct Source {
    view: View,
    names: BTreeSet<String>,
    /// The probe's verdict and CMD's failures (DESIGN §5 "Work that
    /// fails"), for `/healthz`.
    work: Arc<WorkHealth>,
}

impl Source {
    /// `view` of a contender for `names`.
    pub fn new(view: View, names: &[LeaseName]) -> Self {
        let names = names.iter().map(|n| n.as_str().to_string()).collect();
        Source {
            view,
            names,
            work: Arc::default(),
        }
    }

    /// What `/healthz` reports of the work: `run`'s.
    pub fn with_work(mut self, work: Arc<WorkHealth>) -> Self {
        self.work = work;
        self
    }
}

impl From<Snapshots> for Source {
    /// A lone lease's snapshots (its `/leader` reads no name).
    fn from(snapshots: Snapshots) -> Self {
        Source {
            view: View::Lease(snapshots),
            names: BTreeSet::new(),
            work: Arc::default(),
        }
    }
}

/// One request's answer. A lone lease's `/leader` answers for it (200
/// while it leads) whatever the query; a set's answers 200 while this
/// process holds at least one lease, with `{"held": [{"name", "holder",
/// "epoch"}]}`, and `/leader?name=N` for one lease as a lone lease's does.
/// `/healthz` is 503 only while the loop is wedged, for either (a finished
/// one is stopped, not wedged: 200).
fn respond(request: Request, source: &Source, metrics: &PrometheusHandle) {
    if !matches!(request.method(), Method::Get | Method::Head) {
        let _ = request.respond(text(405, "only GET\n".into()));
        return;
    }
    let mut parts = request.url().splitn(2, '?');
    let path = parts.next().unwrap_or_default();
    let name = parts.next().and_then(|query| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("name="))
            .map(percent_decode)
    });
    let response = match path {
        "/metrics" => {
            // The gauges as of now, not as of the loop's last step.
            match &source.view {
                View::Lease(snapshots) => snapshots.refresh_metrics(),
                View::Set(snapshots) => snapshots.refresh_metrics(),
            }
            with(
                text(200, metrics.render()),
                "Content-Type",
                "text/plain; version=0.0.4; charset=utf-8",
            )
        }
        "/leader" => {
            let (code, value) = match &source.view {
                View::Lease(snapshots) => lease_leader(&snapshots.snapshot()),
                View::Set(snapshots) => set_leader(snapshots, &source.names, name),
            };
            body(code, value)
        }
        "/healthz" => {
            let (code, mut value) = match &source.view {
                View::Lease(snapshots) => lease_healthz(&snapshots.snapshot()),
                View::Set(snapshots) => set_healthz(&snapshots.snapshot()),
            };
            // The work's health rides along; the status code stays the
            // loop's (a probe that fails moves the lease, it does not ask
            // for a restart of the process).
            let (probe, failures) = source.work.read();
            if let Some(object) = value.as_object_mut() {
                object.insert(
                    "healthy".into(),
                    json!(probe.as_ref().is_none_or(|(healthy, _)| *healthy)),
                );
                object.insert(
                    "health_reason".into(),
                    json!(probe.map(|(_, reason)| reason)),
                );
                object.insert("work_failures".into(), json!(failures));
            }
            body(code, value)
        }
        _ => text(404, "not found: try /metrics, /leader or /healthz\n".into()),
    };
    let _ = request.respond(response);
}

/// A lone lease's `/leader`: 200 while it leads.
fn lease_leader(snapshot: &Snapshot) -> (u16, serde_json::Value) {
    let code = if snapshot.is_leader() { 200 } else { 503 };
    (code, leader_json(snapshot))
}

/// A set's `/leader`: every held lease, or with `name` that one lease.
fn set_leader(
    snapshots: &SetSnapshots,
    names: &BTreeSet<String>,
    name: Option<String>,
) -> (u16, serde_json::Value) {
    let status = snapshots.snapshot();
    let Some(name) = name else {
        let held: Vec<serde_json::Value> = status
            .held
            .iter()
            .map(|(lease, epoch)| {
                json!({ "name": lease.as_str(), "holder": status_holder(&status), "epoch": epoch.get() })
            })
            .collect();
        let code = if held.is_empty() { 503 } else { 200 };
        return (code, json!({ "held": held }));
    };
    if !names.contains(&name) {
        return (
            404,
            json!({ "error": format!("lease {name:?} is not one of this process's leases") }),
        );
    }
    if let Some((_, epoch)) = status.held.iter().find(|(lease, _)| lease.as_str() == name) {
        return (
            200,
            json!({ "name": name, "holder": status_holder(&status), "epoch": epoch.get() }),
        );
    }
    let seen = LeaseName::new(&name)
        .ok()
        .and_then(|lease| snapshots.leadership(&lease));
    let holder = seen
        .as_ref()
        .and_then(|l| l.holder.as_ref().map(|h| h.as_str().to_string()));
    let epoch = seen.and_then(|l| l.epoch.map(|e| e.get()));
    (
        503,
        json!({ "name": name, "holder": holder, "epoch": epoch }),
    )
}

/// A lone lease's `/healthz`: 503 once its loop is wedged.
fn lease_healthz(snapshot: &Snapshot) -> (u16, serde_json::Value) {
    let wedged = snapshot.is_wedged();
    (
        if wedged { 503 } else { 200 },
        json!({
            "status": if wedged { "wedged" } else { "ok" },
            "since_progress_ms": u64::try_from(snapshot.since_progress.as_millis()).unwrap_or(u64::MAX),
            "stall_after_ms": u64::try_from(snapshot.stall_after.as_millis()).unwrap_or(u64::MAX),
        }),
    )
}

/// A set's `/healthz`: 503 once its loop is wedged (no step for
/// interval + 2 × request timeout + the backoff cap), else 200 — a
/// finished set too, which is stopped, not wedged — exactly as a single
/// lease's; the same `status`,
/// `since_progress_ms` and `stall_after_ms` as the single-lease answer,
/// and the set's share.
fn set_healthz(status: &SetSnapshot) -> (u16, serde_json::Value) {
    let since_progress = status.since_progress();
    let (code, word) = if status.is_wedged() {
        (503, "wedged")
    } else {
        (200, "ok")
    };
    (
        code,
        json!({
            "status": word,
            "since_progress_ms": u64::try_from(since_progress.as_millis()).unwrap_or(u64::MAX),
            "stall_after_ms": u64::try_from(status.stall_after.as_millis()).unwrap_or(u64::MAX),
            "held": status.held.len(),
            "target": status.target,
            "members": status.members.len(),
        }),
    )
}

/// This process's holder id as the set's status knows it (every held
/// lease is held by it).
fn status_holder(status: &SetSnapshot) -> Option<&str> {
    status.me.as_ref().map(HolderId::as_str)
}

/// `%XX` escapes and `+` in a query value (a malformed escape is kept as
/// it is).
fn percent_decode(value: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex(*hi).zip(hex(*lo)).map(|(h, l)| (h * 16 + l) as u8),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some(byte), _) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, byte) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `/leader`'s body.
pub fn leader_json(snapshot: &Snapshot) -> serde_json::Value {
    let holder = match (&snapshot.holder, snapshot.is_leader()) {
        (Some(holder), _) => Some(holder.as_str()),
        (None, true) => Some(snapshot.me.as_str()),
        (None, false) => None,
    };
    json!({
        "name": snapshot.lease.as_str(),
        "holder": holder,
        "epoch": snapshot.epoch.map(|e| e.get()),
    })
}

fn body(status: u16, value: serde_json::Value) -> Response<std::io::Cursor<Vec<u8>>> {
    with(
        text(status, format!("{value}\n")),
        "Content-Type",
        "application/json",
    )
}

fn text(status: u16, body: String) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(body).with_status_code(status)
}

/// Adds a header (ours are constants, always valid).
fn with(
    response: Response<std::io::Cursor<Vec<u8>>>,
    name: &str,
    value: &str,
) -> Response<std::io::Cursor<Vec<u8>>> {
    match Header::from_bytes(name.as_bytes(), value.as_bytes()) {
        Ok(header) => response.with_header(header),
        Err(()) => response,
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
