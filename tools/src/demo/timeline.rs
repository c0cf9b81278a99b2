//! The demo's timeline: receives every node's leadership changes, prints
//! them as they happen with progress lines, and keeps the leadership
//! intervals to check that no two overlapped.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use picolease::sqlite::Database;
use picolease::{Epoch, Role, Transition};

use crate::output::line;

/// A closed leadership interval: node, epoch, start, end (wall clock).
type Term = (usize, u64, SystemTime, SystemTime);

/// The live view of the demo.
pub struct Timeline {
    events: mpsc::Receiver<(usize, Transition)>,
    conn: Option<rusqlite::Connection>,
    start: Instant,
    start_wall: SystemTime,
    names: Vec<String>,
    open: BTreeMap<usize, (u64, SystemTime)>,
    closed: Vec<Term>,
    next_progress: Instant,
    /// The run as `run --json` lines, for `demo --timeline`: (lease,
    /// ttl ms, interval ms) and the lines so far.
    recording: (String, u64, u64),
    recorded: Vec<String>,
}

impl Timeline {
    /// A timeline starting now.
    pub fn new(
        events: mpsc::Receiver<(usize, Transition)>,
        database: Database,
        start: Instant,
    ) -> Self {
        Timeline {
            events,
            conn: picolease::sqlite::open_connection(&database).ok(),
            start,
            start_wall: SystemTime::now(),
            names: Vec::new(),
            open: BTreeMap::new(),
            closed: Vec::new(),
            next_progress: start + Duration::from_secs(1),
            recording: (String::new(), 0, 0),
            recorded: Vec::new(),
        }
    }

    /// Names the lease and its timings on the recorded lines.
    pub fn record_as(&mut self, lease: &str, ttl: Duration, interval: Duration) {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.recording = (lease.to_string(), ms(ttl), ms(interval));
    }

    /// `demo --timeline FILE`: the run drawn as `picolease timeline` draws
    /// one; an error if it shows two leaders.
    pub fn draw(
        &self,
        path: &std::path::Path,
        ttl: Duration,
        interval: Duration,
    ) -> Result<(), crate::failure::CliError> {
        let title = format!(
            "picolease demo: lease \"{}\", ttl {}, interval {}",
            self.recording.0,
            crate::duration::show(ttl),
            crate::duration::show(interval)
        );
        match crate::timeline::write_lines(&self.recorded, &title, path, false)? {
            code if code == std::process::ExitCode::SUCCESS => Ok(()),
            _ => Err(crate::failure::CliError::runtime(
                "the timeline shows two leaders of the lease (see above)",
            )),
        }
    }

    fn record(&mut self, event: &str, node: usize, at: SystemTime, keys: serde_json::Value) {
        let mut object = serde_json::json!({
            "event": event,
            "name": self.recording.0,
            "node": self.name(node),
            "unix_ms": crate::output::unix_ms(at),
        });
        if let (Some(object), serde_json::Value::Object(keys)) = (object.as_object_mut(), keys) {
            object.extend(keys);
        }
        self.recorded.push(object.to_string());
    }

    /// The nodes' names, by index.
    pub fn set_names(&mut self, names: Vec<String>) {
        self.names = names;
    }

    /// Time since the demo started.
    pub fn since_start(&self) -> Duration {
        self.start.elapsed()
    }

    fn stamp(&self, at: Instant) -> String {
        format!(
            "[{:>6.2}s]",
            at.saturating_duration_since(self.start).as_secs_f64()
        )
    }

    /// Prints a line of the demo's own actions.
    pub fn note(&self, text: &str) {
        line(&format!("{} {text}", self.stamp(Instant::now())));
    }

    fn name(&self, node: usize) -> &str {
        self.names.get(node).map_or("node-?", String::as_str)
    }

    fn instant(&self, at: SystemTime) -> Instant {
        match at.duration_since(self.start_wall) {
            Ok(d) => self.start + d,
            Err(_) => self.start,
        }
    }

    fn close(&mut self, node: usize, end: SystemTime) {
        if let Some((epoch, start)) = self.open.remove(&node) {
            self.closed.push((node, epoch, start, end));
        }
    }

    /// A crashed node's term ends now (it will never say so itself).
    pub fn crashed(&mut self, node: usize) {
        let now = SystemTime::now();
        self.record("crash", node, now, serde_json::json!({}));
        self.close(node, now);
    }

    fn handle(&mut self, node: usize, transition: &Transition) -> Option<(usize, Epoch, Instant)> {
        let l = &transition.leadership;
        let at = self.instant(transition.at);
        let epoch = l.epoch.map_or(0, |e| e.get());
        match (l.role, l.reason) {
            (Role::Leader, _) => {
                line(&format!(
                    "{} {:<18} LEADER   epoch {epoch}",
                    self.stamp(at),
                    self.name(node)
                ));
                let (_, ttl_ms, interval_ms) = self.recording;
                self.record(
                    "leader",
                    node,
                    transition.at,
                    serde_json::json!({ "epoch": epoch, "ttl_ms": ttl_ms, "interval_ms": interval_ms }),
                );
                self.open.insert(node, (epoch, transition.at));
                l.epoch.map(|e| (node, e, at))
            }
            (Role::Follower, Some(reason)) => {
                line(&format!(
                    "{} {:<18} follower (left epoch {epoch}: {})",
                    self.stamp(at),
                    self.name(node),
                    reason.as_str()
                ));
                self.record(
                    "follower",
                    node,
                    transition.at,
                    serde_json::json!({ "epoch": epoch, "reason": reason.as_str() }),
                );
                self.close(node, transition.at);
                None
            }
            (Role::Follower, None) => None,
        }
    }

    fn progress(&mut self) {
        if Instant::now() < self.next_progress {
            return;
        }
        self.next_progress = Instant::now() + Duration::from_secs(1);
        let Some(conn) = &self.conn else { return };
        let counts = conn.query_row(
            "SELECT (SELECT count(*) FROM upload_reservations WHERE committed = 0 AND reclaimed_epoch IS NOT NULL),
                    (SELECT count(*) FROM upload_reservations WHERE committed = 0),
                    (SELECT count(*) FROM objects WHERE destroyed = 1 AND deleted_epoch IS NOT NULL),
                    (SELECT count(*) FROM objects WHERE destroyed = 1)",
            [],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?, row.get::<_, i64>(3)?)),
        );
        if let Ok((reclaimed, stale, deleted, destroyed)) = counts {
            let leader = self
                .open
                .iter()
                .next()
                .map(|(node, (epoch, _))| format!("{} at epoch {epoch}", self.name(*node)))
                .unwrap_or_else(|| "none".into());
            line(&format!(
                "{}   progress: {reclaimed}/{stale} reservations reclaimed, {deleted}/{destroyed} objects deleted; leader: {leader}",
                self.stamp(Instant::now())
            ));
        }
    }

    fn queues_empty(&self) -> bool {
        let Some(conn) = &self.conn else { return false };
        conn.query_row(
            "SELECT (SELECT count(*) FROM upload_reservations WHERE committed = 0 AND reclaimed_epoch IS NULL)
                  + (SELECT count(*) FROM objects WHERE destroyed = 1 AND deleted_epoch IS NULL)",
            [],
            |row| row.get::<_, i64>(0),
        )
        .map(|left| left == 0)
        .unwrap_or(false)
    }

    /// Processes events for `duration`.
    pub fn pump(&mut self, duration: Duration) {
        let until = Instant::now() + duration;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if left.is_zero() {
                break;
            }
            if let Ok((node, transition)) = self
                .events
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                self.handle(node, &transition);
            }
            self.progress();
        }
    }

    /// Processes events until the queues are empty; false on timeout.
    pub fn pump_until_drained(&mut self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.queues_empty() {
                self.next_progress = Instant::now();
                self.progress();
                return true;
            }
            self.pump(Duration::from_millis(100));
        }
        false
    }

    /// Waits for a node not in `exclude` to lead; returns it, its epoch and
    /// when it became leader.
    pub fn wait_leader(
        &mut self,
        exclude: &[usize],
        timeout: Duration,
    ) -> Option<(usize, Epoch, Instant)> {
        if let Some((&node, &(epoch, at))) = self.open.iter().find(|(n, _)| !exclude.contains(n)) {
            return Some((node, Epoch::new(epoch), self.instant(at)));
        }
        let until = Instant::now() + timeout;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if let Ok((node, transition)) = self
                .events
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                if let Some(found) = self.handle(node, &transition) {
                    if !exclude.contains(&found.0) {
                        return Some(found);
                    }
                }
            }
            self.progress();
        }
        None
    }

    /// Processes every remaining event (after the senders are gone).
    pub fn drain(&mut self) {
        while let Ok((node, transition)) = self.events.recv_timeout(Duration::from_millis(500)) {
            self.handle(node, &transition);
        }
    }

    /// How many pairs of leadership intervals overlapped in time.
    pub fn overlaps(&self) -> usize {
        let mut terms = self.closed.clone();
        let now = SystemTime::now();
        terms.extend(self.open.iter().map(|(&n, &(e, s))| (n, e, s, now)));
        let mut count = 0;
        for (i, a) in terms.iter().enumerate() {
            for b in &terms[i + 1..] {
                if a.0 != b.0 && a.2 < b.3 && b.2 < a.3 {
                    line(&format!(
                        "  OVERLAP: {} (epoch {}) and {} (epoch {})",
                        self.name(a.0),
                        a.1,
                        self.name(b.0),
                        b.1
                    ));
                    count += 1;
                }
            }
        }
        count
    }
}
