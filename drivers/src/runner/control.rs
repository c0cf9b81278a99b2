//! What a handle says to its driver's loop, on every database, and what
//! the runner does with it: one message type and one dispatch for the
//! SQLite thread and the server task alike.

use picolease_core::engine::Input;
use picolease_core::{ConfigError, HolderId, LeaseName};

use super::{Runner, TermGate};

/// A message from a handle to its loop.
///
/// `W` is the driver's work (a thread body or an async task); `L` is what
/// only one kind of loop hears (SQLite's job on its connection and its
/// file change; nothing for the server task).
pub(crate) enum Control<W, L = std::convert::Infallible> {
    /// An input for the core's engine: a shutdown, a hand-over, a give-up.
    Engine(Input),
    /// Register work on every lease (started at once where held).
    AddWork(W),
    /// Stop at once without releasing: a simulated crash.
    Abort,
    /// What only this kind of loop hears.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // the SQLite loop's alone
    Loop(L),
}

impl<W, L> Control<W, L> {
    /// Stop the work, release, finish.
    pub(crate) const SHUTDOWN: Self = Control::Engine(Input::Shutdown);
    /// Hand what is held to the preferred candidates (else release).
    pub(crate) const HAND_OVER_TO_PREFERRED: Self = Control::Engine(Input::HandOverToPreferred);

    /// Hand `lease` (`None`: the lone lease) over to node `to`, or release
    /// it; an error names a node that cannot be reserved for.
    pub(crate) fn hand_over(
        lease: Option<&LeaseName>,
        to: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let to = to.map(HolderId::reserved_for).transpose()?;
        Ok(Control::Engine(Input::HandOver {
            lease: lease.cloned(),
            to,
        }))
    }

    /// Give `lease` up (a set's; a lone lease's engine ignores it).
    pub(crate) fn give_up(lease: &LeaseName) -> Self {
        Control::Engine(Input::GiveUp(lease.clone()))
    }
}

/// What a control leaves the loop to do once the runner has had it.
pub(crate) enum Obeyed<L> {
    /// Nothing more.
    Done,
    /// Stop at once without releasing.
    Abort,
    /// The loop's own message.
    Loop(L),
}

impl<G: TermGate> Runner<G> {
    /// Feeds `control` to the engine or the gates; what is left is the
    /// loop's.
    pub(crate) fn obey<L>(&mut self, control: Control<G::Work, L>) -> Obeyed<L> {
        match control {
            Control::Engine(input) => self.handle(input),
            Control::AddWork(work) => {
                for gate in self.gates() {
                    gate.add(work.clone());
                }
            }
            Control::Abort => return Obeyed::Abort,
            Control::Loop(own) => return Obeyed::Loop(own),
        }
        Obeyed::Done
    }
}
