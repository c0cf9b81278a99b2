//! The shared cases over a lease set: one lease of a set must behave as a
//! lone lease does (issue "One engine": "the conformance suite runs every
//! case over a single lease and over a set, 1 lease and 3 leases").
//!
//! [`AsSet<B, N>`] is a [`Backend`] whose contenders are sets of `N`
//! leases, [`LEASE`] among them (the others are `job-1`, `job-2`, …):
//! every case then runs unchanged against [`LEASE`] as the set's handle
//! shows it, through the very types a lone lease's handle returns
//! ([`SetView::lease`] gives its `LeaseView`: leadership, watch,
//! subscription, renew latencies), `fence(&lease)` and the builder's
//! `subscribe_to(&lease)`. Gated work runs for every lease of the set; the
//! cases' hooks see [`LEASE`]'s terms only.
//!
//! One thing differs, and the cases ask for it through
//! [`Contender::has_seen`]: a set's node reads the row of a lease only
//! while it competes for it (its share), so a node whose share is full has
//! seen another node's term once it has planned its share with every
//! running node among the live members (its snapshot lists them) and holds
//! its whole share, not by reading the holder off the row.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use picolease::set::SetView;
use picolease::sql::LeaseRow;
use picolease::{
    Config, Epoch, HolderId, Leadership, LeaseName, LeaseView, RecvError, SetConfig, Subscription,
};
use tokio::sync::watch;

use super::{lease_name, Backend, Contender, Fault, Options, StatusReader, Work, WorkTerm, LEASE};

/// A database whose driver also runs lease sets.
pub trait SetBackend: Backend {
    /// A running set on this database.
    type Set: RunningSet<Fence = <Self::Lease as Contender>::Fence>;
    /// Starts a set of `leases` with the timings and holder of `template`
    /// and `options`, with its builder's subscription to [`LEASE`].
    fn start_set(
        &self,
        template: SetConfig,
        leases: Vec<LeaseName>,
        options: Options,
    ) -> Result<(Self::Set, Subscription), Fault>;
}

/// A running set, whatever its driver.
pub trait RunningSet: Sized {
    /// The driver's fence.
    type Fence: Clone;
    /// What the set's handle dereferences to.
    fn view(&self) -> &SetView;
    /// `fence(&lease)`.
    fn fence(&self, lease: &LeaseName) -> Option<Self::Fence>;
    /// The epoch a fence holds for.
    fn fence_epoch(fence: &Self::Fence) -> Epoch;
    /// `while_leader(..)` on the running handle.
    fn add_work(&self, work: Work);
    /// `is_finished()`.
    fn is_finished(&self) -> bool;
    /// `shutdown()`, waited for.
    fn shutdown(self) -> Result<(), Fault>;
    /// `abort()`.
    fn abort(self);
    /// `hand_over(&lease, Some(to))`: hands `lease` to node `to`.
    fn hand_over(&self, lease: &LeaseName, to: &str);
    /// The error a set that stopped by itself stopped with, reported once.
    fn into_fatal(self) -> Fault;
}

/// The holders of the sets running on one database now.
type LiveHolders = Arc<Mutex<Vec<HolderId>>>;

/// [`LEASE`] of a running set, as a contender of the shared cases.
pub struct SetMember<S> {
    set: S,
    lease: LeaseView,
    from_start: Option<Subscription>,
    running: LiveHolders,
}

impl<S: RunningSet> SetMember<S> {
    /// This node no longer runs (its membership row goes or lapses).
    fn leave(&self) {
        let me = self.set.view().holder();
        self.running.lock().unwrap().retain(|h| h != me);
    }
}

impl<S: RunningSet> Contender for SetMember<S> {
    type Fence = S::Fence;

    fn holder(&self) -> &HolderId {
        self.set.view().holder()
    }

    fn leadership(&self) -> Leadership {
        self.lease.leadership()
    }

    fn watch(&self) -> watch::Receiver<Leadership> {
        self.lease.watch()
    }

    fn subscribe(&self) -> Subscription {
        self.lease.subscribe()
    }

    fn take_start_subscription(&mut self) -> Subscription {
        self.from_start.take().expect("taken once")
    }

    fn wait_for(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&Leadership) -> bool,
    ) -> Option<Leadership> {
        let deadline = Instant::now() + timeout;
        let mut changes = self.lease.subscribe();
        loop {
            let now = self.lease.leadership();
            if done(&now) {
                return Some(now);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match changes.recv_timeout(left) {
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(_) => return None,
            }
        }
    }

    fn has_seen(&self, term: &Leadership) -> bool {
        // Planned with every running node among the live members (the
        // leader too), and holding its whole share: once every node is so
        // settled, the leases stop moving.
        let planned = self.set.view().snapshot();
        let running = self.running.lock().unwrap().clone();
        planned.target == Some(planned.held.len())
            && running.iter().all(|h| planned.members.contains(h))
            && term
                .holder
                .as_ref()
                .is_some_and(|h| planned.members.contains(h))
    }

    fn fence(&self) -> Option<S::Fence> {
        self.set.fence(&lease_name())
    }

    fn fence_epoch(fence: &S::Fence) -> Epoch {
        S::fence_epoch(fence)
    }

    fn renew_latencies(&self) -> Vec<Duration> {
        self.lease.renew_latencies()
    }

    fn add_work(&self, work: Work) {
        self.set.add_work(only_lease(work));
    }

    fn is_finished(&self) -> bool {
        self.set.is_finished()
    }

    fn shutdown(self) -> Result<(), Fault> {
        self.leave();
        self.set.shutdown()
    }

    fn abort(self) {
        self.leave();
        self.set.abort();
    }

    fn into_fatal(self) -> Fault {
        self.leave();
        self.set.into_fatal()
    }
}

/// The names of a set of `n` leases: [`LEASE`], then `job-1`, `job-2`, …
pub fn set_leases(n: usize) -> Vec<LeaseName> {
    std::iter::once(lease_name())
        .chain((1..n).map(|i| LeaseName::new(&format!("{LEASE}-{i}")).expect("valid")))
        .collect()
}

/// Gated work that sees [`LEASE`]'s terms only: the set starts it for
/// every lease it leads.
fn only_lease(work: Work) -> Work {
    let of_lease = |hook: super::Hook| -> super::Hook {
        Arc::new(move |term: &WorkTerm| {
            if term.lease.as_str() == LEASE {
                hook(term)
            }
        })
    };
    Work {
        started: of_lease(work.started),
        stopping: of_lease(work.stopping),
    }
}

/// `B`'s database, its contenders sets of `N` leases.
pub struct AsSet<B, const N: usize> {
    db: B,
    running: LiveHolders,
}

impl<B: SetBackend, const N: usize> Backend for AsSet<B, N> {
    type Lease = SetMember<B::Set>;
    const TTL: Duration = B::TTL;
    const CRASH_EARLY: Duration = B::CRASH_EARLY;
    const CRASH_LATE: Duration = B::CRASH_LATE;
    const HANDOVER_LATE: Duration = B::HANDOVER_LATE;
    const CHECKS_TABLE_AT_START: bool = B::CHECKS_TABLE_AT_START;
    const MISSING_TABLE_STATUS_IS_ERROR: bool = B::MISSING_TABLE_STATUS_IS_ERROR;

    fn fresh(test: &str) -> Self {
        AsSet {
            db: B::fresh(&format!("{test}_set{N}")),
            running: LiveHolders::default(),
        }
    }

    fn table_name(&self) -> String {
        self.db.table_name()
    }

    fn config(&self, holder: &str) -> Config {
        self.db.config(holder)
    }

    fn start_with(&self, config: Config, options: Options) -> Result<Self::Lease, Fault> {
        let options = Options {
            work: options.work.into_iter().map(only_lease).collect(),
            ..options
        };
        let holder = config.holder.clone();
        let (set, from_start) =
            self.db
                .start_set(config.without_lease(), set_leases(N), options)?;
        self.running.lock().unwrap().push(holder);
        let lease = set
            .view()
            .lease_view(&lease_name())
            .expect("the set has the shared cases' lease");
        Ok(SetMember {
            set,
            lease,
            from_start: Some(from_start),
            running: Arc::clone(&self.running),
        })
    }

    /// [`LEASE`]'s row: the set's other leases and its nodes' membership
    /// rows are the set's business, not the cases'.
    fn status(&self) -> Result<Vec<LeaseRow>, Fault> {
        Ok(self
            .db
            .status()?
            .into_iter()
            .filter(|row| row.name == LEASE)
            .collect())
    }

    fn status_reader(&self) -> StatusReader {
        self.db.status_reader()
    }

    fn force_release(&self, lease: &str) -> Result<Option<Epoch>, Fault> {
        self.db.force_release(lease)
    }

    fn init(&self) -> Result<(), Fault> {
        self.db.init()
    }

    fn table_exists(&self) -> bool {
        self.db.table_exists()
    }

    fn untouched(&self) -> bool {
        self.db.untouched()
    }

    fn create_malformed(&self, epoch_sql: &str) {
        self.db.create_malformed(epoch_sql)
    }

    fn raw_row(&self) -> (Option<String>, Option<i64>, Option<i64>) {
        self.db.raw_row()
    }

    fn create_other_table(&self) {
        self.db.create_other_table()
    }

    fn snapshot(&self) -> Vec<String> {
        self.db.snapshot()
    }

    fn create_jobs(&self) {
        self.db.create_jobs()
    }

    fn fenced_write(&self, fence: &FenceOf<B>, id: i64, by: &str, epoch: Epoch) -> u64 {
        self.db.fenced_write(fence, id, by, epoch)
    }

    fn jobs(&self) -> Vec<(i64, Option<String>, Option<i64>)> {
        self.db.jobs()
    }
}

/// The fence of `B`'s contenders.
type FenceOf<B> = <<B as Backend>::Lease as Contender>::Fence;

/// The leases `set` leads now.
fn held<S: RunningSet>(set: &S, leases: &[LeaseName]) -> Vec<LeaseName> {
    leases
        .iter()
        .filter(|l| set.view().leadership(l).is_some_and(|l| l.is_leader()))
        .cloned()
        .collect()
}

/// Waits until `a` and `b` lead two of the four `leases` each again, and
/// checks that no lease is led by both.
fn two_each_again<S: RunningSet>(
    database: &str,
    a: &S,
    b: &S,
    leases: &[LeaseName],
    patience: Duration,
) {
    wait("two leases each again", patience, || {
        held(a, leases).len() == 2 && held(b, leases).len() == 2
    });
    for l in leases {
        assert!(
            !(held(a, leases).contains(l) && held(b, leases).contains(l)),
            "{database}: {l} led by both"
        );
    }
}

/// Polls `done` every 10 ms for up to `limit`; how long it took.
fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    started.elapsed()
}

/// A set handle's planned handover (DESIGN §3 "Planned handover", §9):
/// two sets share 4 leases two and two; `hand_over(&lease, Some(node))` on
/// the holder of a lease moves it to the other set's node at the next
/// epoch, although that node holds its whole share; the holder publishes
/// the follower with reason `handover`, then the reservation; the share is
/// two and two again after, the named node keeping the lease; never a
/// lease led by both. Prints how long the move took.
pub fn a_set_lease_handed_over_goes_to_the_named_node<B: SetBackend>(database: &str) {
    let db = B::fresh("set_hand_over");
    let leases = set_leases(4);
    let start = |holder: &str| {
        let template = db.config(holder).without_lease();
        db.start_set(template, leases.clone(), Options::default())
            .unwrap_or_else(|e| panic!("{database}: the set starts: {e:?}"))
            .0
    };
    let a = start("hand-a");
    let b = start("hand-b");
    let patience = B::TTL * 10;
    wait("two leases each", patience, || {
        held(&a, &leases).len() == 2 && held(&b, &leases).len() == 2
    });
    let lease = held(&a, &leases)[0].clone();
    let epoch = a.view().leadership(&lease).unwrap().leader_epoch().unwrap();
    let mut a_changes = a.view().subscribe();
    let to = b.view().holder().node().to_string();
    let asked = Instant::now();
    a.hand_over(&lease, &to);
    let took = wait("the named node leads the lease", patience, || {
        b.view().leadership(&lease).is_some_and(|l| l.is_leader())
    });
    let taken = b.view().leadership(&lease).unwrap();
    assert!(
        taken.leader_epoch().unwrap() > epoch,
        "{database}: the successor's term is a later one: {taken:?}"
    );
    println!(
        "{database}: {lease} handed from {} to {to} in {took:?} (hand_over call to the successor's leadership)",
        a.view().holder()
    );
    // The holder's publications: the follower (reason handover), then the
    // same naming the reservation.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let left = patience.saturating_sub(asked.elapsed());
        let t = a_changes
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("{database}: the holder publishes its handover: {e:?}"));
        if t.lease == lease {
            seen.push(t.leadership);
        }
    }
    assert_eq!(
        seen[0].reason,
        Some(picolease::Demotion::HandedOver),
        "{seen:?}"
    );
    assert!(!seen[0].is_leader());
    assert_eq!(
        seen[1].holder.as_ref().map(HolderId::as_str),
        Some(format!("{to}#").as_str()),
        "{database}: {seen:?}"
    );
    two_each_again(database, &a, &b, &leases, patience);
    assert!(
        held(&b, &leases).contains(&lease),
        "{database}: b keeps {lease}"
    );
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

/// Preferred members (DESIGN §9 "Preferred members"), through the
/// library: two sets share four leases; a third set whose template has a
/// higher rank joins; the two hand every lease they lead to it (each
/// publishing the follower with reason `handover`), it leads all four at
/// later epochs, and never a lease is led by two. When it shuts down the
/// two share the four again. Prints how long the joiner took.
pub fn a_preferred_member_is_handed_every_lease<B: SetBackend>(database: &str) {
    let db = B::fresh("set_prefer");
    let leases = set_leases(4);
    let start = |holder: &str, priority: u32| {
        let mut template = db.config(holder).without_lease();
        template.rank = picolease::Rank::new(priority, None).unwrap();
        db.start_set(template, leases.clone(), Options::default())
            .unwrap_or_else(|e| panic!("{database}: the set starts: {e:?}"))
            .0
    };
    let a = start("prefer-a", 0);
    let b = start("prefer-b", 0);
    let patience = B::TTL * 10;
    wait("two leases each", patience, || {
        held(&a, &leases).len() == 2 && held(&b, &leases).len() == 2
    });
    let mut a_changes = a.view().subscribe();
    let joined = Instant::now();
    let c = start("prefer-c", 3);
    let took = wait("the preferred member leads all four", patience, || {
        held(&c, &leases).len() == 4
    });
    println!("{database}: the preferred member led all four leases {took:?} after it started");
    assert!(held(&a, &leases).is_empty() && held(&b, &leases).is_empty());
    // a's two leases went by handover, not by release or lapse.
    let mut handed = 0;
    while handed < 2 {
        let left = patience.saturating_sub(joined.elapsed());
        let t = a_changes
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("{database}: a publishes its handovers: {e:?}"));
        if !t.leadership.is_leader() && t.leadership.reason.is_some() {
            assert_eq!(
                t.leadership.reason,
                Some(picolease::Demotion::HandedOver),
                "{database}: {t:?}"
            );
            handed += 1;
        }
    }
    c.shutdown().unwrap();
    two_each_again(database, &a, &b, &leases, patience);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}
