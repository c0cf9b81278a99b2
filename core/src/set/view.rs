//! What the model checker reads of a lease set to tell states apart
//! (feature `sim`): every field that can change what the set does next,
//! borrowed, so fingerprinting allocates nothing. The caches derived from
//! other fields (`assigned_here`, `index`) and the preferences and members'
//! ranks (fixed by the holder id) are left out.

use super::{BatchKind, LeaseSet, Member, Seen};
use crate::names::Epoch;
use crate::protocol::{Operation, RequestId};
use crate::state::LeaseState;
use crate::time::Instant;

/// The set as a whole.
pub(crate) struct SetView<'a> {
    pub(crate) next_request: u64,
    /// The batch in flight: id, kind, the slots it carries, sent at, give up at.
    pub(crate) in_flight: Option<(RequestId, BatchKind, &'a [usize], Instant, Instant)>,
    pub(crate) next_survey: Instant,
    pub(crate) surveys: u32,
    pub(crate) resurvey: bool,
    pub(crate) members: &'a [Member],
    pub(crate) probe: Option<bool>,
    pub(crate) marked_at: Option<Instant>,
    pub(crate) wakeups: &'a [Instant],
    pub(crate) shutting_down: bool,
    pub(crate) finished: bool,
}

/// What the set last learned of a lease it does not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SeenView {
    Unknown,
    Free,
    Held(Option<Instant>),
}

/// One slot: a lease (or, after them, the membership row and the
/// unhealthy row) and its machine.
pub(crate) struct SlotView<'a> {
    pub(crate) machine: &'a LeaseState,
    pub(crate) queued: Option<(RequestId, Operation)>,
    pub(crate) sent: Option<RequestId>,
    pub(crate) seen: SeenView,
    pub(crate) stopping: bool,
    pub(crate) yielding: bool,
    pub(crate) rest_until: Option<Instant>,
    pub(crate) offered_until: Option<Instant>,
    pub(crate) handed_at: Option<Instant>,
    pub(crate) handed_past_better: bool,
    pub(crate) untaken: Option<(Epoch, Instant)>,
}

impl LeaseSet {
    /// The set's own state, for the model checker.
    pub(crate) fn view(&self) -> SetView<'_> {
        SetView {
            next_request: self.next_request,
            in_flight: self
                .in_flight
                .as_ref()
                .map(|b| (b.id, b.kind, &b.items[..], b.sent_at, b.give_up)),
            next_survey: self.next_survey,
            surveys: self.surveys,
            resurvey: self.resurvey,
            members: &self.members,
            probe: self.probe,
            marked_at: self.marked_at,
            wakeups: &self.wakeups,
            shutting_down: self.shutting_down,
            finished: self.finished,
        }
    }

    /// Slots: the leases in set order, then the membership row (and the
    /// unhealthy row, once the probe failed).
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Slot `i`'s state, for the model checker.
    pub(crate) fn slot_view(&self, i: usize) -> SlotView<'_> {
        let s = &self.slots[i];
        SlotView {
            machine: &s.machine,
            queued: s.queued,
            sent: s.sent,
            seen: match s.seen {
                Seen::Unknown => SeenView::Unknown,
                Seen::Free => SeenView::Free,
                Seen::Held { until } => SeenView::Held(until),
            },
            stopping: s.stopping,
            yielding: s.yielding,
            rest_until: s.rest_until,
            offered_until: s.offered_until,
            handed_at: s.handed_at,
            handed_past_better: s.handed_past_better,
            untaken: s.untaken,
        }
    }
}
