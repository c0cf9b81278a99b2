//! How a [`Runner`] is put together: over a set's member publishers,
//! made here, or over a lone lease's publisher, made by its builder.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use picolease_core::{Engine, LeaseName, LeaseSet, LeaseState};
use tokio::sync::watch;

use super::{Member, Runner, TermGate};
use crate::clock::SharedClock;
use crate::publish::{Health, Publisher, SharedHealth};
use crate::set::{SetSnapshot, SetView, SharedSnapshot};
use crate::subscription::Fanout;

impl<G: TermGate> Runner<G> {
    /// A runner for `set`, timed on `clock`, whose subscribers are
    /// `fanout`'s, each lease's work behind the gate `gate` makes for its
    /// publisher; and the view its handle reads.
    pub(crate) fn new(
        set: LeaseSet,
        clock: SharedClock,
        fanout: Arc<Fanout>,
        gate: impl FnMut(&LeaseName, &Arc<Publisher>) -> G,
    ) -> (Self, SetView) {
        let template = set.config().clone();
        let health = Health::shared();
        let wedge: Arc<AtomicBool> = Arc::default();
        let publishers = set
            .leases()
            .map(|lease| {
                let config = template.for_lease(lease.clone());
                let publisher = Publisher::member(
                    Arc::clone(&clock),
                    &config,
                    Arc::clone(&fanout),
                    Arc::clone(&health),
                    Arc::clone(&wedge),
                );
                (lease.clone(), Arc::new(publisher))
            })
            .collect();
        let engine = Engine::from(set);
        Self::with_members(engine, clock, fanout, (health, wedge), publishers, gate)
    }

    /// A runner for a lone lease's `state`, whose output side is
    /// `publisher` (made before the driver started, so it may already
    /// have subscribers), its work behind `gate`.
    pub(crate) fn lone(state: LeaseState, publisher: Arc<Publisher>, gate: G) -> Self {
        let lease = state.config().lease.clone();
        let loop_side = (publisher.shared_health(), publisher.wedge_flag());
        let clock = publisher.clock();
        let publishers = HashMap::from([(lease, publisher)]);
        let engine = Engine::from(state);
        let mut gate = Some(gate);
        let (runner, _) = Self::with_members(
            engine,
            clock,
            Arc::new(Fanout::for_leases(1)),
            loop_side,
            publishers,
            |_, _| gate.take().expect("one lease, one gate"),
        );
        runner
    }

    /// The runner of `engine` over the publishers of its leases, its loop's
    /// health and wedge seam shared with them.
    fn with_members(
        engine: Engine,
        clock: SharedClock,
        fanout: Arc<Fanout>,
        (health, wedge): (SharedHealth, Arc<AtomicBool>),
        publishers: HashMap<LeaseName, Arc<Publisher>>,
        mut gate: impl FnMut(&LeaseName, &Arc<Publisher>) -> G,
    ) -> (Self, SetView) {
        let template = engine.config();
        let snapshot = SharedSnapshot::new(Mutex::new(SetSnapshot {
            me: Some(template.holder.clone()),
            stall_after: crate::publish::stall_after(&template),
            ..SetSnapshot::default()
        }));
        let members = publishers
            .iter()
            .map(|(lease, publisher)| {
                let member = Member {
                    gate: gate(lease, publisher),
                    publisher: Arc::clone(publisher),
                    published: None,
                };
                (lease.clone(), member)
            })
            .collect();
        let (held, held_view) = watch::channel(BTreeMap::new());
        let view = SetView {
            template: template.clone(),
            snapshot: Arc::clone(&snapshot),
            health: Arc::clone(&health),
            wedge: Arc::clone(&wedge),
            publishers: Arc::new(publishers),
            fanout: Arc::clone(&fanout),
            held: held_view,
        };
        let runner = Runner {
            holder: template.holder,
            engine,
            origin: clock.now(),
            clock,
            members,
            stopping: Vec::new(),
            snapshot,
            health,
            held,
            fanout,
            wedge,
            handed_out: None,
            watching: false,
        };
        (runner, view)
    }
}
