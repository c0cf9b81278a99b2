//! What `run` (and `bench`) contend for and get back, whatever the
//! database and whatever the number of names: [`Leases`], the one place
//! where one name becomes the driver's lone-lease handle and several its
//! set handle; [`Contender`], the running handle of either; [`View`], what
//! `/leader` and `/healthz` read of it; [`Started`], the three together
//! with every transition from the start.
//!
//! Each backend maps `Leases` onto its driver's one handle over the scope
//! the names call for (`picolease::scope::Scope`: a `LeaseView` or a
//! `SetView`), whose [`View`] [`ScopeView`] reads, and hands back the same
//! [`Started`], so from here up a lone lease is the one-name case of one
//! path.

use picolease::scope::Scope;
use picolease::set::{SetSnapshots, SetView};
use picolease::{Config, LeaseName, LeaseView, SetConfig, Snapshots, Subscription};

use crate::failure::CliError;

/// The lease names a contender contends for, with their timings.
pub enum Leases {
    /// One name: the driver's lone-lease handle, whose statements are the
    /// single-row ones (the floor of DESIGN §4), as `run` has always used
    /// for one name.
    One(Config),
    /// Several names: the driver's set handle, batched statements and a
    /// fair share between the live members (DESIGN §9).
    Many {
        /// The holder and timings of every lease.
        template: SetConfig,
        /// Every lease of the set.
        names: Vec<LeaseName>,
    },
}

impl Leases {
    /// `names` (at least one) with the holder and timings of `config`
    /// (whose lease is `names[0]`). With several names the set's template
    /// is validated on its own: its membership row's name carries the
    /// rank, refused here if it would not fit (DESIGN §9 "Preferred
    /// members").
    pub fn new(config: Config, names: Vec<LeaseName>) -> Result<Self, CliError> {
        if names.len() <= 1 {
            return Ok(Leases::One(config));
        }
        let template = config.without_lease();
        template.validate().map_err(CliError::usage)?;
        Ok(Leases::Many { template, names })
    }

    /// A set renewing every held row each interval when `every_row`, by
    /// liveness otherwise (the default, DESIGN §9 "Renewal by liveness");
    /// one name renews its one row either way.
    pub fn renewing_every_row(mut self, every_row: bool) -> Self {
        if let Leases::Many { template, .. } = &mut self {
            template.by_liveness = !every_row;
        }
        self
    }

    /// Every lease name, in the order given.
    pub fn names(&self) -> Vec<LeaseName> {
        match self {
            Leases::One(config) => vec![config.lease.clone()],
            Leases::Many { names, .. } => names.clone(),
        }
    }
}

/// A running contender of any backend, for one lease or many, as `run`
/// sees it.
pub trait Contender {
    /// Gives `lease` up (its CMD ended by itself) and goes on contending:
    /// a set's answer. A lone lease's CMD ending by itself ends `run`
    /// instead (README's contract), so a lone lease ignores it.
    fn give_up(&self, lease: &LeaseName);

    /// The health probe's verdict changed (`--health-cmd`, DESIGN §5
    /// "Work that fails").
    fn report_health(&self, healthy: bool);

    /// `lease`'s CMD failed past `--restart-limit`: hand it over and stand
    /// aside for `cool_down`.
    fn escalate(&self, lease: &LeaseName, epoch: picolease::Epoch, cool_down: std::time::Duration);

    /// Stops the gated work (CMD), releases what is held (a set's
    /// membership row too), and returns the fatal error that had stopped
    /// the driver, if any. Every change is published before this returns.
    fn shutdown(self: Box<Self>) -> Result<(), CliError>;

    /// "Hand over, then exit" (`run`'s SIGUSR1): each held lease goes to
    /// its preferred candidate, or for a set to the member that ranks
    /// first for it, else it is released (DESIGN §3 "Preferred holders");
    /// then as [`Contender::shutdown`].
    fn hand_over_then_shutdown(self: Box<Self>) -> Result<(), CliError>;

    /// Stops at once WITHOUT releasing, as a crash would: the rows are left
    /// to lapse (for `bench`'s crash takeover).
    fn abort(self: Box<Self>);
}

/// What a running contender publishes, readable from another thread: the
/// source of `run --listen`'s `/leader` and `/healthz`.
#[derive(Clone)]
pub enum View {
    /// A lone lease's snapshots.
    Lease(Snapshots),
    /// A set's.
    Set(SetSnapshots),
}

impl View {
    /// Test seam: blocks the driver's loop at its next step.
    pub fn wedge_loop_for_tests(&self) {
        match self {
            View::Lease(snapshots) => snapshots.wedge_loop_for_tests(),
            View::Set(snapshots) => snapshots.wedge_loop_for_tests(),
        }
    }
}

/// What `run` reads of a driver handle's scope: its snapshots, as a
/// [`View`].
pub trait ScopeView: Scope {
    /// The scope's snapshots, readable from another thread.
    fn view(&self) -> View;
}

impl ScopeView for LeaseView {
    fn view(&self) -> View {
        View::Lease(self.snapshots())
    }
}

impl ScopeView for SetView {
    fn view(&self) -> View {
        View::Set(self.snapshots())
    }
}

/// A started contender: its handle, every transition it publishes from
/// its start (each naming its lease), and its view.
pub struct Started {
    /// The running handle.
    pub contender: Box<dyn Contender>,
    /// Every transition from the start.
    pub transitions: Subscription,
    /// What it publishes.
    pub view: View,
}
