//! Lease sets on a real SQLite file (DESIGN §9): three nodes share 30
//! leases ten each, a crashed node's leases are taken at their expiry, a
//! clean shutdown hands its leases over at once, and the work of each
//! lease runs on exactly one node, starting with its term's deadline.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use picolease::sqlite::{Database, SqliteLeaseSet};
use picolease::{HolderId, LeaseName, SetConfig};

fn leases(n: usize) -> Vec<LeaseName> {
    (0..n)
        .map(|i| LeaseName::new(&format!("s{i}")).unwrap())
        .collect()
}

fn template(holder: &str) -> SetConfig {
    SetConfig::with_ttl(HolderId::new(holder).unwrap(), Duration::from_millis(1_000))
        .interval(Duration::from_millis(200))
}

/// Which node runs each lease's work, as the work itself records it.
type Running = Arc<Mutex<BTreeMap<String, Vec<String>>>>;

fn start(path: &std::path::Path, holder: &str, running: &Running) -> SqliteLeaseSet {
    let running = Arc::clone(running);
    SqliteLeaseSet::builder(template(holder), leases(30), Database::file(path))
        .while_leader(move |ctx| {
            let key = ctx.lease().to_string();
            // The work starts with its term's deadline in hand.
            let who = match ctx.deadline() {
                Some(_) => ctx.holder().to_string(),
                None => format!("{} without a deadline", ctx.holder()),
            };
            running
                .lock()
                .unwrap()
                .entry(key.clone())
                .or_default()
                .push(who.clone());
            let twice = running.lock().unwrap()[&key].len() > 1;
            assert!(!twice, "lease {key} worked twice");
            ctx.cancellation().wait();
            running
                .lock()
                .unwrap()
                .get_mut(&key)
                .unwrap()
                // The entry it pushed, whatever its label (a work whose
                // term ended before it read its deadline is labelled so).
                .retain(|h| *h != who);
        })
        .start()
        .expect("start")
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

#[test]
fn three_sqlite_nodes_share_thirty_leases_and_take_over_a_crashed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("set.db");
    let running: Running = Arc::default();
    let a = start(&path, "node-a", &running);
    let b = start(&path, "node-b", &running);
    let c = start(&path, "node-c", &running);
    let counts = |sets: &[&SqliteLeaseSet]| -> Vec<usize> {
        sets.iter().map(|s| s.snapshot().held.len()).collect()
    };
    let took = wait_until("balanced 10/10/10", Duration::from_secs(10), || {
        counts(&[&a, &b, &c]) == vec![10, 10, 10]
    });
    eprintln!(
        "balanced after {took:?}; statements {:?}",
        [&a, &b, &c].map(|s| s.snapshot().statements)
    );
    assert_eq!(a.snapshot().members.len(), 3);
    // Per lease, `leadership(lease)` says what the set published: leader
    // at the held epoch on exactly the node whose status holds it.
    for lease in leases(30) {
        let leading: Vec<_> = [&a, &b, &c]
            .iter()
            .filter_map(|set| {
                let leadership = set.leadership(&lease).expect("published");
                let held = set.snapshot().held.get(&lease).copied();
                assert_eq!(leadership.leader_epoch(), held, "{lease}");
                held
            })
            .collect();
        assert_eq!(leading.len(), 1, "{lease} led by {leading:?}");
    }
    assert_eq!(a.leadership(&LeaseName::new("elsewhere").unwrap()), None);
    // Work runs exactly once per held lease.
    let workers = |running: &Running| {
        running
            .lock()
            .unwrap()
            .values()
            .filter(|v| v.len() == 1)
            .count()
    };
    wait_until("30 works", Duration::from_secs(2), || {
        workers(&running) == 30
    });
    let started_blind: Vec<String> = running
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, who)| who.iter().any(|w| w.ends_with("without a deadline")))
        .map(|(lease, _)| lease.clone())
        .collect();
    assert!(
        started_blind.is_empty(),
        "work started without a deadline: {started_blind:?}"
    );

    // A crash: c's leases lapse and a and b take 15 each.
    let crashed_at = Instant::now();
    c.abort();
    let took = wait_until("15/15 after the crash", Duration::from_secs(10), || {
        counts(&[&a, &b]) == vec![15, 15]
    });
    eprintln!("crash taken over and rebalanced after {took:?} (ttl 1 s)");
    assert!(
        crashed_at.elapsed() >= Duration::from_millis(700),
        "taken before the ttl ran out"
    );

    // A clean shutdown: b releases, a takes all 30 well before a ttl.
    let stopped_at = Instant::now();
    b.shutdown().unwrap();
    let took = wait_until("30 on a after b's shutdown", Duration::from_secs(5), || {
        counts(&[&a]) == vec![30]
    });
    eprintln!(
        "clean shutdown handed over after {:?}",
        stopped_at.elapsed()
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    a.shutdown().unwrap();
    assert_eq!(workers(&running), 0, "work stopped on shutdown");
}

/// A set's handle waits on one lease as a lone lease's handle waits on its
/// own: `wait_for` returns the state that met the condition, `wait_change`
/// the next state, and both answer `None` for a lease outside the set and
/// once their timeout passes with nothing to report.
#[test]
fn a_sqlite_set_waits_on_one_lease_as_a_lone_lease_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("set.db");
    let set = SqliteLeaseSet::builder(template("alone"), leases(2), Database::file(&path))
        .start()
        .expect("start");
    let s0 = LeaseName::new("s0").unwrap();
    let led = set
        .wait_for(&s0, Duration::from_secs(5), |l| l.is_leader())
        .expect("the only node leads s0 within 5 s");
    assert!(led.is_leader());
    assert_eq!(set.leadership(&s0), Some(led.clone()));
    // The same through the lease's own view.
    let view = set.lease_view(&s0).expect("s0 is in the set");
    assert_eq!(
        view.wait_for(Duration::from_secs(1), |l| l.is_leader()),
        Some(led.clone())
    );
    // Nothing changes while it renews: the wait times out.
    assert_eq!(set.wait_change(&s0, Duration::from_millis(300)), None);
    let stranger = LeaseName::new("not-in-the-set").unwrap();
    assert_eq!(
        set.wait_for(&stranger, Duration::from_millis(50), |_| true),
        None
    );
    assert_eq!(set.wait_change(&stranger, Duration::from_millis(50)), None);
    // Giving s0 up is seen by a thread waiting on its view; the next
    // change is this node taking it back once its rest (a ttl) is over.
    let waiter = {
        let view = set.lease_view(&s0).unwrap();
        std::thread::spawn(move || view.wait_for(Duration::from_secs(5), |l| !l.is_leader()))
    };
    set.give_up(&s0);
    let gave_up = waiter.join().unwrap().expect("s0 given up within 5 s");
    assert!(!gave_up.is_leader(), "{gave_up:?}");
    let back = set
        .wait_change(&s0, Duration::from_secs(5))
        .expect("s0 led again within 5 s");
    assert!(back.is_leader(), "{back:?}");
    assert!(back.epoch > led.epoch, "{back:?} after {led:?}");
    set.shutdown().expect("shutdown");
}

/// `when_term_ends`: a set with no work holds no thread while its terms
/// last; when a term ends (here by shutdown) the closure runs with that
/// term, on a thread started then, and the lease stays held (the row
/// names this node at the term's epoch) until it returns: the release
/// comes after it. `picolease run` with several names and no CMD prints a
/// term's `follower` line there.
#[test]
fn a_term_end_closure_runs_before_the_release_with_no_thread_during_the_term() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("set.db");
    let table = picolease::sqlite::LeaseTable::open(&Database::file(&path)).unwrap();
    let table = Arc::new(Mutex::new(table));
    // What the closure saw: (lease, epoch, the row's holder and epoch at
    // its start, and again 150 ms later, just before it returned).
    type Seen = Vec<(String, u64, Option<(String, u64)>, Option<(String, u64)>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let set = {
        let (seen, table) = (Arc::clone(&seen), Arc::clone(&table));
        SqliteLeaseSet::builder(template("ender"), leases(2), Database::file(&path))
            .when_term_ends(move |term| {
                let row = || {
                    let row = table.lock().unwrap().lease_row(term.lease()).unwrap();
                    row.and_then(|r| Some((r.holder?, r.epoch.get())))
                };
                let first = row();
                std::thread::sleep(Duration::from_millis(150));
                let last = row();
                let lease = term.lease().to_string();
                seen.lock()
                    .unwrap()
                    .push((lease, term.epoch().get(), first, last));
            })
            .start()
            .expect("start")
    };
    wait_until("both leases held", Duration::from_secs(5), || {
        set.snapshot().held.len() == 2
    });
    let term_end_threads = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).ok())
            .filter(|name| name.starts_with("picolease-term"))
            .count()
    };
    assert_eq!(term_end_threads(), 0, "no thread while the terms last");
    let epochs: BTreeMap<String, u64> = set
        .snapshot()
        .held
        .iter()
        .map(|(lease, epoch)| (lease.to_string(), epoch.get()))
        .collect();
    set.shutdown().expect("shutdown");

    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen.len(), 2, "one call per ended term: {seen:?}");
    for (lease, epoch, first, last) in &seen {
        assert_eq!(
            epochs.get(lease),
            Some(epoch),
            "{lease}: the term that ended"
        );
        let held = Some(("ender".to_string(), *epoch));
        assert_eq!(first, &held, "{lease}: held when the closure starts");
        assert_eq!(last, &held, "{lease}: still held as it returns");
    }
    // After shutdown both rows are free.
    for lease in leases(2) {
        let row = table.lock().unwrap().lease_row(&lease).unwrap().unwrap();
        assert_eq!(row.holder, None, "{lease} released after the closure");
    }
}
