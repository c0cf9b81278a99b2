//! What a handle contends for: one lease, or a set of leases. This is the
//! one place where the drivers choose between a lone lease and a set.
//!
//! Every driver has one builder and one handle, generic over a [`Scope`]:
//! the view the handle dereferences to. [`LeaseView`] is a lone lease
//! (one row, single-row statements, the measured floor of DESIGN §4; a
//! user with one lease never names it); [`SetView`] is a lease set
//! (batched statements, a fair share between nodes, DESIGN §9; its calls
//! name a lease). Each builder keeps its scope's plan ([`LonePlan`], [`SetPlan`])
//! until `start()`, which asks the scope for the loop's runner and the
//! view; everything else a handle does is the same code for both.

use std::sync::Arc;
use std::time::Duration;

use picolease_core::{Config, ConfigError, HolderId, LeaseName, LeaseSet, LeaseState, SetConfig};

use crate::clock::SharedClock;
use crate::publish::Publisher;
use crate::runner::{Runner, TermGate};
use crate::set::SetView;
use crate::snapshots::{LoneReader, SetReader};
use crate::subscription::{Fanout, Subscription};
use crate::view::LeaseView;

/// What a handle contends for: [`LeaseView`] (one lease) or [`SetView`]
/// (a set). Sealed: the two are all there is.
pub trait Scope: sealed::Scoped {}

impl Scope for LeaseView {}
impl Scope for SetView {}

// The sealed trait's methods name crate-private types (the runner, the
// gates); outside the crate they cannot be named or called with
// anything, so nothing leaks but the bound.
#[allow(private_interfaces, private_bounds)]
pub(crate) mod sealed {
    use super::*;

    /// How a scope is planned, started and read; unnameable outside the
    /// crate, so [`Scope`] cannot be implemented elsewhere.
    pub trait Scoped: Send + Sync + Sized + std::fmt::Debug + 'static {
        /// What the builder holds until `start()`: the lease's (or the
        /// set's) configuration and its subscribers.
        type Plan: Send + std::fmt::Debug;

        /// Every leadership change of the plan's leases from the start on.
        fn subscribe(plan: &Self::Plan) -> Subscription;

        /// The holder id the plan contends with.
        fn planned_holder(plan: &Self::Plan) -> &HolderId;

        /// The loop's runner for the plan, timed on `clock`, each lease's
        /// work behind the gate `gate` makes for it; and the view the
        /// handle reads. A bad configuration is refused here, before any
        /// connection is opened.
        fn assemble<G: TermGate>(
            plan: Self::Plan,
            clock: SharedClock,
            gate: impl FnMut(&LeaseName, &Arc<Publisher>) -> G,
        ) -> Result<(Runner<G>, Self), ConfigError>;

        /// A health probe will report: a lone lease counts as unhealthy
        /// until its first verdict (`LeaseState::await_health`); a set's
        /// member starts with its membership row, as without a probe.
        fn await_health(_plan: &mut Self::Plan) {}

        /// The name a lone lease's loop listens for release notices of;
        /// `None` for a set, which hears every row's.
        fn notice_lease(plan: &Self::Plan) -> Option<LeaseName>;

        /// What the loop runs, for a thread's name and its error messages.
        fn describe(plan: &Self::Plan) -> String;
        /// Whether the plan's set renews by liveness (DESIGN §9 "Renewal by liveness"): its
        /// driver then runs `Statements::renewing_by_liveness`.
        fn renews_by_liveness(_plan: &Self::Plan) -> bool {
            false
        }

        /// The timings and holder id every lease is contended with.
        fn timings(&self) -> SetConfig;

        /// True once the loop has published its end (before its thread or
        /// task has returned).
        fn loop_finished(&self) -> bool;

        /// What a [`crate::Snapshots`] reads: [`crate::Snapshot`] or
        /// [`crate::set::SetSnapshot`].
        type Snapshot: Clone + std::fmt::Debug;

        /// What a [`crate::Snapshots`] keeps to read it.
        type Reader: Clone + Send + Sync + 'static;

        /// The snapshot as of now.
        fn read(reader: &Self::Reader) -> Self::Snapshot;

        /// Calls `f` with each lease's publisher (a metrics refresh).
        fn each_publisher(reader: &Self::Reader, f: &mut dyn FnMut(&Publisher));

        /// Test seam: the loop blocks at its next step.
        fn wedge(reader: &Self::Reader);
    }
}

/// A lone lease's plan: its configuration and its publisher, made by the
/// builder so that `subscribe()` works before the start.
#[derive(Debug)]
pub struct LonePlan {
    config: Config,
    publisher: Arc<Publisher>,
    /// A health probe will report: unhealthy until its first verdict.
    awaits_health: bool,
}

impl LonePlan {
    pub(crate) fn new(config: Config) -> Self {
        let publisher = Arc::new(Publisher::new(crate::clock::system(), config.lease.clone()));
        LonePlan {
            config,
            publisher,
            awaits_health: false,
        }
    }
}

#[allow(private_interfaces, private_bounds)]
impl sealed::Scoped for LeaseView {
    type Plan = LonePlan;

    fn subscribe(plan: &LonePlan) -> Subscription {
        plan.publisher.subscribe()
    }

    fn planned_holder(plan: &LonePlan) -> &HolderId {
        &plan.config.holder
    }

    fn assemble<G: TermGate>(
        plan: LonePlan,
        clock: SharedClock,
        mut gate: impl FnMut(&LeaseName, &Arc<Publisher>) -> G,
    ) -> Result<(Runner<G>, Self), ConfigError> {
        let LonePlan {
            config,
            publisher,
            awaits_health,
        } = plan;
        publisher.set_clock(clock);
        let mut state = LeaseState::new(config.clone(), picolease_core::Instant::ZERO)?;
        if awaits_health {
            state.await_health(picolease_core::Instant::ZERO);
        }
        let gate = gate(&config.lease, &publisher);
        let runner = Runner::lone(state, Arc::clone(&publisher), gate);
        Ok((runner, LeaseView::new(config, publisher)))
    }

    fn await_health(plan: &mut LonePlan) {
        plan.awaits_health = true;
    }

    fn notice_lease(plan: &LonePlan) -> Option<LeaseName> {
        Some(plan.config.lease.clone())
    }

    fn describe(plan: &LonePlan) -> String {
        plan.config.lease.to_string()
    }

    fn timings(&self) -> SetConfig {
        self.config().without_lease()
    }

    fn loop_finished(&self) -> bool {
        self.publisher().is_finished()
    }

    type Snapshot = crate::Snapshot;
    type Reader = LoneReader;

    fn read(reader: &LoneReader) -> crate::Snapshot {
        LeaseView::read(&reader.0)
    }

    fn each_publisher(reader: &LoneReader, f: &mut dyn FnMut(&Publisher)) {
        f(&reader.0)
    }

    fn wedge(reader: &LoneReader) {
        reader.0.wedge();
    }
}

/// A set's plan: the template every lease is contended with, the leases,
/// and the fan-out its subscribers were taken from.
pub struct SetPlan {
    template: SetConfig,
    leases: Vec<LeaseName>,
    fanout: Arc<Fanout>,
}

impl std::fmt::Debug for SetPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetPlan")
            .field("template", &self.template)
            .field("leases", &self.leases.len())
            .finish_non_exhaustive()
    }
}

impl SetPlan {
    pub(crate) fn new(template: SetConfig, leases: Vec<LeaseName>) -> Self {
        SetPlan {
            fanout: Arc::new(Fanout::for_leases(leases.len())),
            template,
            leases,
        }
    }

    /// `lease`'s leadership changes from the start on, in order; `None`
    /// for a lease outside the set.
    pub(crate) fn subscribe_to(&self, lease: &LeaseName) -> Option<Subscription> {
        self.leases
            .contains(lease)
            .then(|| self.fanout.subscribe_to(Some(lease.clone())))
    }
}

#[allow(private_interfaces, private_bounds)]
impl sealed::Scoped for SetView {
    type Plan = SetPlan;

    fn subscribe(plan: &SetPlan) -> Subscription {
        plan.fanout.subscribe()
    }

    fn planned_holder(plan: &SetPlan) -> &HolderId {
        &plan.template.holder
    }

    fn assemble<G: TermGate>(
        plan: SetPlan,
        clock: SharedClock,
        gate: impl FnMut(&LeaseName, &Arc<Publisher>) -> G,
    ) -> Result<(Runner<G>, Self), ConfigError> {
        let SetPlan {
            template,
            leases,
            fanout,
        } = plan;
        let set = LeaseSet::new(template, leases, picolease_core::Instant::ZERO)?;
        Ok(Runner::new(set, clock, fanout, gate))
    }

    fn notice_lease(_: &SetPlan) -> Option<LeaseName> {
        None
    }

    fn describe(_: &SetPlan) -> String {
        "lease set".into()
    }

    fn renews_by_liveness(plan: &SetPlan) -> bool {
        plan.template.by_liveness
    }

    fn timings(&self) -> SetConfig {
        self.config().clone()
    }

    fn loop_finished(&self) -> bool {
        self.is_loop_finished()
    }

    type Snapshot = crate::set::SetSnapshot;
    type Reader = SetReader;

    fn read(reader: &SetReader) -> crate::set::SetSnapshot {
        reader.read()
    }

    fn each_publisher(reader: &SetReader, f: &mut dyn FnMut(&Publisher)) {
        reader.publishers().for_each(f)
    }

    fn wedge(reader: &SetReader) {
        reader.wedge();
    }
}

/// How long a dropped handle waits for its driver's shutdown: a ttl and a
/// request timeout, so a drop never hangs.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // the SQLite loop's alone
pub(crate) fn drop_limit(timings: &SetConfig) -> Duration {
    timings.ttl + timings.request_timeout
}
