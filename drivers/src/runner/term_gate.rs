//! What the runner asks of one lease's gate: the gate of the driver
//! (SQLite: threads; PostgreSQL and MySQL: tasks), the same for a lone
//! lease and for each lease of a set.

use picolease_core::Epoch;

/// One lease's gated work, as the runner starts and stops it.
pub(crate) trait TermGate: Send + 'static {
    /// The work a handle registers (a thread body, an async task).
    type Work: Clone;

    /// Registers `work` for every term, starting it at once in the
    /// current one if held.
    fn add(&mut self, work: Self::Work);
    /// `StartWork`: starts every registered work for the term `epoch`.
    fn start(&mut self, epoch: Epoch);
    /// `StopWork`: signals the term `epoch`'s work to stop (no wait).
    fn stop(&mut self, epoch: Epoch);
    /// Signals whatever runs to stop (the driver is ending).
    fn stop_all(&mut self);
    /// True once every work told to stop has returned (never waits).
    fn has_stopped(&mut self) -> bool;
}

/// A gate with no work, for the runner's tests.
#[cfg(test)]
pub(crate) struct NoWork;

#[cfg(test)]
impl TermGate for NoWork {
    type Work = ();
    fn add(&mut self, (): ()) {}
    fn start(&mut self, _: Epoch) {}
    fn stop(&mut self, _: Epoch) {}
    fn stop_all(&mut self) {}
    fn has_stopped(&mut self) -> bool {
        true
    }
}
