//! What crosses the boundary between a [`LeaseSet`](super::LeaseSet) and
//! its driver: batches going out, their results coming back.

use crate::names::{Epoch, HolderId, LeaseName};
use crate::protocol::{Demotion, Failure, Leadership, Reply, RequestId};
use crate::sql::LeaseRow;
use crate::time::Instant;

/// Which batched statement a batch runs (see `sql::Statements`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BatchKind {
    /// Acquire every named lease that is free, lapsed or ours
    /// (`acquire_batch`); answered with [`BatchReply::Acquired`].
    Acquire,
    /// Renew every `(name, epoch)` held by this node (`renew_batch`);
    /// answered with [`BatchReply::Matched`], or with
    /// [`BatchReply::Renewed`] when the statement also read an operator's
    /// handover request for some of them.
    Renew,
    /// Release every `(name, epoch)` held by this node (`release_batch`);
    /// answered with [`BatchReply::Matched`].
    Release,
    /// Read the live members and the free or stale rows (`survey`, bound
    /// with [`LeaseSet::stale_millis`](super::LeaseSet::stale_millis));
    /// answered with [`BatchReply::Survey`]. Carries no items.
    Survey,
    /// Hand one held lease over (DESIGN §3 "Planned handover"): its
    /// single item is `(name, epoch)`, and the reservation it writes is
    /// [`LeaseSet::hand_over_in_flight`](super::LeaseSet::hand_over_in_flight).
    /// Not a batched statement: it runs the lone lease's single-row
    /// hand-over (`Statements::hand_over`, bound with that lease and that
    /// reservation), since a set hands its leases over one at a time, as
    /// an operator or a deploy asks; answered with
    /// [`LeaseSet::handle_row_reply`](super::LeaseSet::handle_row_reply).
    HandOver,
}

/// One batched statement to run: its kind and the leases it names (with
/// the epoch for renew and release). Names are distinct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The statement.
    pub kind: BatchKind,
    /// The leases, with the epoch the statement is conditioned on (`None`
    /// for acquire).
    pub items: Vec<(LeaseName, Option<Epoch>)>,
}

impl Batch {
    /// The JSON array bound as the statement's batch parameter: names for
    /// acquire, `[name, epoch]` pairs for renew and release, `[]` for a
    /// survey.
    pub fn json(&self) -> String {
        match self.kind {
            BatchKind::Acquire => {
                crate::sql::batch_names(self.items.iter().map(|(n, _)| n.as_str()))
            }
            BatchKind::Renew | BatchKind::Release | BatchKind::HandOver => crate::sql::batch_pairs(
                self.items
                    .iter()
                    .map(|(n, e)| (n.as_str(), e.unwrap_or(Epoch::new(0)))),
            ),
            BatchKind::Survey => "[]".to_string(),
        }
    }
}

/// The result of a batch, decoded by the driver with the `sql` decoders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchReply {
    /// Acquire: each named lease's outcome (`Acquired` or `Held`), as
    /// `Statements::decode_acquire_batch` gives them. A lease missing from
    /// the list counts as a transient failure for that lease alone.
    Acquired(Vec<(String, Reply)>),
    /// Renew or release: the names the statement matched. A lease missing
    /// from the list was not ours at its epoch any more: rejected, and
    /// only that lease demotes.
    Matched(Vec<String>),
    /// Renew, when the statement read an operator's handover request
    /// (`picolease handover`) for some of the renewed leases: `renewed`
    /// as [`BatchReply::Matched`] says it, and for each such lease the
    /// node it is to go to (`None`: whoever comes next). Each one's
    /// renewal counts; then the set hands it over.
    Renewed {
        /// The names the renewal matched.
        renewed: Vec<String>,
        /// The renewed leases an operator asked to hand over, and to whom.
        asked: Vec<(String, Option<HolderId>)>,
    },
    /// Survey: the rows read.
    Survey(Vec<LeaseRow>),
    /// The statement produced no answer: every lease of the batch fails
    /// alike.
    Failed(Failure),
}

/// What a lease set asks of its driver, drained with
/// [`LeaseSet::poll_command`](super::LeaseSet::poll_command) and carried
/// out in order. Per-lease commands name their lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetCommand {
    /// Run a batched statement; feed its outcome back with the same id.
    Execute {
        /// The id to answer with.
        request: RequestId,
        /// What to run.
        batch: Batch,
        /// The instant the statement must have ended by: the batch's
        /// give-up (a request timeout after its send), or sooner the
        /// earliest deadline of a lease this node leads (the deadline wins
        /// over I/O, DESIGN §4b). A blocking driver cuts its waits to it
        /// (SQLite: the busy timeout and the watchdog), so the set's
        /// thread is back to end that term on time; an async driver runs
        /// the batch beside its waits and may ignore it.
        end_by: Instant,
    },
    /// The batch timed out: cancel it on the server if possible and forget
    /// it.
    Cancel {
        /// The abandoned batch.
        request: RequestId,
    },
    /// Start the gated work of `lease` for this term.
    StartWork {
        /// The lease.
        lease: LeaseName,
        /// Its term's epoch: the fencing token.
        epoch: Epoch,
    },
    /// Stop the gated work of `lease`. Call
    /// [`LeaseSet::handle_work_stopped`](super::LeaseSet::handle_work_stopped)
    /// once it has stopped: the lease's release (on shutdown, or when the
    /// share moves it) waits for that.
    StopWork {
        /// The lease.
        lease: LeaseName,
        /// The term that ended.
        epoch: Epoch,
        /// Why.
        reason: Demotion,
    },
    /// Publish `lease`'s new leadership state.
    Publish {
        /// The lease.
        lease: LeaseName,
        /// Its state.
        leadership: Leadership,
    },
    /// Look for other connections' commits from now on (`true`: SQLite
    /// watches the file or polls its change counter and then calls
    /// [`LeaseSet::handle_survey_request`](super::LeaseSet::handle_survey_request)),
    /// or stop (`false`): only while this node is under its share can a
    /// release give it anything. Comes after an input's other commands,
    /// only when the answer changes; a driver told of releases unasked
    /// (PostgreSQL's LISTEN) may ignore it.
    WatchChanges(bool),
    /// The set is done: no more commands will come.
    Finished,
}
