//! The set demo's run as `run --json` lines, for `demo --leases N
//! --timeline FILE`: each node's leadership changes, read from its
//! subscription on a thread of its own, and the demo's own marks (the
//! crash), in time order for `picolease timeline`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::failure::CliError;

/// The run as `run --json` lines, for `demo --leases N --timeline FILE`:
/// every node's leadership changes (one recorder thread per node, reading
/// its subscription) and the demo's crash, as `picolease timeline` reads
/// them.
#[derive(Clone, Default)]
pub(super) struct Recording {
    lines: Arc<Mutex<Vec<(u64, String)>>>,
    ttl_ms: u64,
    interval_ms: u64,
}

impl Recording {
    /// An empty recording of a set with these timings (its `leader` lines
    /// carry them).
    pub(super) fn new(ttl: Duration, interval: Duration) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Recording {
            ttl_ms: ms(ttl),
            interval_ms: ms(interval),
            ..Recording::default()
        }
    }

    /// The run drawn as `picolease timeline` draws one, at `path`; an
    /// error if it shows two leaders of a lease.
    pub(super) fn draw(&self, path: &std::path::Path, title: &str) -> Result<(), CliError> {
        match crate::timeline::write_lines(&self.lines(), title, path, false)? {
            code if code == std::process::ExitCode::SUCCESS => Ok(()),
            _ => Err(CliError::runtime(
                "the timeline shows two leaders of a lease (see above)",
            )),
        }
    }

    pub(super) fn push(
        &self,
        event: &str,
        lease: &str,
        node: &str,
        at: std::time::SystemTime,
        keys: serde_json::Value,
    ) {
        let unix_ms = crate::output::unix_ms(at);
        let mut object = serde_json::json!({
            "event": event,
            "name": lease,
            "node": node,
            "unix_ms": unix_ms,
        });
        if let (Some(object), serde_json::Value::Object(keys)) = (object.as_object_mut(), keys) {
            object.extend(keys);
        }
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        lines.push((unix_ms, object.to_string()));
    }

    /// Records `node`'s changes from `transitions` until its driver stops.
    pub(super) fn follow(
        &self,
        node: String,
        transitions: picolease::Subscription,
    ) -> std::thread::JoinHandle<()> {
        let recording = self.clone();
        std::thread::spawn(move || {
            for transition in transitions.filter_map(Result::ok) {
                let l = &transition.leadership;
                let epoch = l.epoch.map_or(0, |e| e.get());
                let lease = transition.lease.as_str();
                match (l.role, l.reason) {
                    (picolease::Role::Leader, _) => recording.push(
                        "leader",
                        lease,
                        &node,
                        transition.at,
                        serde_json::json!({
                            "epoch": epoch,
                            "ttl_ms": recording.ttl_ms,
                            "interval_ms": recording.interval_ms,
                        }),
                    ),
                    (picolease::Role::Follower, Some(reason)) => recording.push(
                        "follower",
                        lease,
                        &node,
                        transition.at,
                        serde_json::json!({ "epoch": epoch, "reason": reason.as_str() }),
                    ),
                    (picolease::Role::Follower, None) => {}
                }
            }
        })
    }

    /// The lines in time order (the recorders' threads interleave).
    pub(super) fn lines(&self) -> Vec<String> {
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone();
        lines.sort_by_key(|(at, _)| *at);
        lines.into_iter().map(|(_, line)| line).collect()
    }
}
