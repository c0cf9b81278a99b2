//! What the failover tests share, whatever the database: the contenders'
//! leadership log, the terms read from it, and what a round measured
//! (overlap, epochs given twice, the time to a leader again).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use picolease::server::{Connects, Contender, Database};
use picolease::{Config, HolderId, Leadership, LeaseName, LeaseView, TableName};

/// Every leadership change of the contenders, with when it was seen:
/// keyed by holder for the lone lease `reaper`, by `lease/holder` for a
/// set's leases.
pub type Seen = Arc<Mutex<Vec<(String, Instant, Leadership)>>>;

/// A contender for the lone lease `reaper` as `holder`, on either
/// database, its leadership logged into `seen`.
pub fn contender<D: Database>(
    runtime: &tokio::runtime::Runtime,
    connector: impl Connects<D>,
    table: &TableName,
    (holder, ttl): (&str, Duration),
    seen: &Seen,
) -> Contender<D, LeaseView> {
    let config = Config::with_ttl(
        LeaseName::new("reaper").unwrap(),
        HolderId::new(holder).unwrap(),
        ttl,
    );
    let _entered = runtime.enter();
    let lease = Contender::<D, LeaseView>::builder(config, connector)
        .table(table.clone())
        .start()
        .unwrap();
    record(runtime, lease.watch(), holder, seen);
    lease
}

/// Logs every leadership `watch` publishes, as `holder`'s, into `seen`.
pub fn record(
    runtime: &tokio::runtime::Runtime,
    mut watch: tokio::sync::watch::Receiver<Leadership>,
    holder: &str,
    seen: &Seen,
) {
    let (seen, holder) = (Arc::clone(seen), holder.to_string());
    runtime.spawn(async move {
        loop {
            let now = watch.borrow_and_update().clone();
            seen.lock()
                .unwrap()
                .push((holder.clone(), Instant::now(), now));
            if watch.changed().await.is_err() {
                return;
            }
        }
    });
}

/// The contenders' runtime.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Seconds from `origin` to `at`, negative before it.
pub fn signed(at: Instant, origin: Instant) -> f64 {
    match at.checked_duration_since(origin) {
        Some(d) => d.as_secs_f64(),
        None => -(origin - at).as_secs_f64(),
    }
}

pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what}: not within 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The leadership terms seen: (holder, epoch, from, to).
pub fn terms(seen: &Seen, until: Instant) -> Vec<(String, u64, Instant, Instant)> {
    let log = seen.lock().unwrap().clone();
    let mut terms = Vec::new();
    let mut open: std::collections::HashMap<String, (u64, Instant)> = Default::default();
    for (holder, at, leadership) in log {
        match leadership.leader_epoch() {
            Some(epoch) if leadership.is_leader() => {
                open.entry(holder).or_insert((epoch.get(), at));
            }
            _ => {
                if let Some((epoch, from)) = open.remove(&holder) {
                    terms.push((holder, epoch, from, at));
                }
            }
        }
    }
    for (holder, (epoch, from)) in open {
        terms.push((holder, epoch, from, until));
    }
    terms
}

/// What a failover round measured.
pub struct Outcome {
    /// How long two holders led at once.
    pub overlap: Duration,
    /// (holder, holder, epoch) of distinct terms given one epoch.
    pub reused: Vec<(String, String, u64)>,
    /// From the promotion to the first term that started after it.
    pub led_again: Option<Duration>,
}

impl Outcome {
    /// No overlap, no epoch given twice, and a leader again within
    /// `bound` of the promotion.
    pub fn assert_safe(&self, bound: Duration) {
        assert_eq!(self.overlap, Duration::ZERO, "two leaders at once");
        assert!(
            self.reused.is_empty(),
            "an epoch issued twice: {:?}",
            self.reused
        );
        let led_again = self.led_again.expect("someone leads after the promotion");
        assert!(
            led_again < bound + Duration::from_millis(500),
            "leadership returned {led_again:?} after the promotion"
        );
    }
}

/// Lets the contenders run for three ttls (the grace, a takeover, and
/// time to see an overlap), reads the round's [`outcome`] since
/// `promoted`, then shuts `leases` down.
pub fn watch_then_stop<D: Database>(
    runtime: &tokio::runtime::Runtime,
    seen: &Seen,
    promoted: Instant,
    ttl: Duration,
    leases: impl IntoIterator<Item = Contender<D, LeaseView>>,
) -> Outcome {
    std::thread::sleep(ttl * 3);
    let outcome = outcome(seen, promoted);
    for lease in leases {
        let _ = runtime.block_on(lease.shutdown());
    }
    outcome
}

/// What the contenders' leadership log shows, from `since` (the moment
/// the new server accepts writes) on: overlap, epochs given twice, and
/// when someone led again.
pub fn outcome(seen: &Seen, promoted: Instant) -> Outcome {
    let end = Instant::now();
    for (holder, at, leadership) in seen.lock().unwrap().iter() {
        eprintln!("{holder} {:+.3}s {leadership:?}", signed(*at, promoted));
    }
    let terms = terms(seen, end);
    for (holder, epoch, from, to) in &terms {
        eprintln!(
            "{holder} led epoch {epoch} from {:+.3}s to {:+.3}s of the promotion",
            signed(*from, promoted),
            signed(*to, promoted),
        );
    }
    let mut overlap = Duration::ZERO;
    let mut reused = Vec::new();
    // `lease/holder` (a set's) or `holder` (the lone lease's).
    let lease_of = |key: &str| {
        key.split_once('/')
            .map_or("reaper", |(lease, _)| lease)
            .to_string()
    };
    for (i, x) in terms.iter().enumerate() {
        for y in &terms[i + 1..] {
            if lease_of(&x.0) != lease_of(&y.0) {
                continue;
            }
            if x.0 != y.0 {
                let (from, to) = (x.2.max(y.2), x.3.min(y.3));
                overlap += to.saturating_duration_since(from);
            }
            // Distinct terms, one epoch: even for one holder, a fence of
            // the lost term would match the new one.
            if x.1 == y.1 {
                reused.push((x.0.clone(), y.0.clone(), x.1));
            }
        }
    }
    eprintln!("two leaders at once for {overlap:?}; epochs issued twice: {reused:?}");
    let led_again = terms
        .iter()
        .filter(|t| t.2 >= promoted)
        .map(|t| t.2 - promoted)
        .min();
    Outcome {
        overlap,
        reused,
        led_again,
    }
}

/// `picolease_server_changes_total` of the table `picolease_failover` as
/// the recorder renders it.
pub fn server_changes(metrics: &metrics_exporter_prometheus::PrometheusHandle) -> f64 {
    metrics
        .render()
        .lines()
        .find_map(|line| {
            line.strip_prefix("picolease_server_changes_total{table=\"picolease_failover\"} ")
        })
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no server change counter:\n{}", metrics.render()))
}
