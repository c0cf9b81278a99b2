//! What the picture of a run shows, once read out of its lines
//! (`terms::analyse`): each lease's terms and how they ended, the
//! leaderless gaps between them with their bounds, the overlaps and late
//! reports, the marks and the pauses.

/// The ttl assumed for a term whose `leader` line does not say its own
/// (`run`'s default).
pub const DEFAULT_TTL_MS: i64 = 10_000;

/// How a term ended.
#[derive(Clone, Debug, PartialEq)]
pub enum TermEnd {
    /// The process said it left (`follower`, with its reason).
    Left(String),
    /// The process handed the lease over (`handover`).
    HandedOver,
    /// The process was crashed at this moment (a `crash` line of `demo` or
    /// `simulate`).
    Crashed,
    /// The process's stream ended while it led, at `end_ms` (its last
    /// line), and another process led the lease later: a crash or a kill,
    /// whose real end lies between its last line and the next term.
    StreamEnded,
    /// Still leading when the capture ended.
    Open,
}

/// One term: a process leading a lease.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// The lease.
    pub lease: String,
    /// The process, as drawn: its node name, with its holder id when
    /// another process shares the name.
    pub node: String,
    /// The process's key (`Event::process`).
    pub process: String,
    /// The epoch its `leader` line named.
    pub epoch: Option<u64>,
    /// Its `leader` line's time.
    pub start_ms: i64,
    /// Its end (for [`TermEnd::StreamEnded`], the process's last line).
    pub end_ms: i64,
    /// How it ended.
    pub end: TermEnd,
    /// The ttl and interval its leader line named, or the defaults.
    pub ttl_ms: i64,
    /// The interval (a quarter of the ttl unless the line says).
    pub interval_ms: i64,
    /// The `leader` line.
    pub start_json: String,
    /// The line that ended it, if any.
    pub end_json: Option<String>,
    /// The latest start of another term found overlapping it: a term
    /// closed where its stream ended is not closed before it.
    pub overlapped_until: i64,
}

/// A stretch with no leader of a lease between two terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Gap {
    /// The lease.
    pub lease: String,
    /// The end of the term before.
    pub from_ms: i64,
    /// The start of the term after.
    pub to_ms: i64,
    /// What DESIGN §4 bounds this kind of gap by: an interval after a
    /// release or handover (a follower's poll; notifications make it
    /// milliseconds), ttl + interval after a crash or a lost term.
    pub bound_ms: i64,
    /// Why the term before ended, in words (`released`, `crash`, …).
    pub after: String,
    /// The term before ended where its process's stream did (a crash or a
    /// kill): its real end lies between its last line and the next term,
    /// so the gap is at most its length, and not held to the bound.
    pub unknown_start: bool,
}

impl Gap {
    /// The gap's length.
    pub fn len_ms(&self) -> i64 {
        self.to_ms - self.from_ms
    }
}

/// Two processes leading one lease at once.
#[derive(Clone, Debug, PartialEq)]
pub struct Overlap {
    /// The lease.
    pub lease: String,
    /// The term that was already running, and the one that began inside it.
    pub first: Term,
    /// The second term.
    pub second: Term,
    /// The stretch both claimed.
    pub from_ms: i64,
    /// Its end.
    pub to_ms: i64,
}

/// An event drawn as a mark: a CMD's start or exit, a failure, a health
/// verdict, a handover, a crash, a pause.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    /// The event's name.
    pub event: String,
    /// The process.
    pub node: String,
    /// The lease.
    pub lease: String,
    /// When.
    pub at_ms: i64,
    /// The line.
    pub json: String,
}

/// Everything the picture shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Analysis {
    /// Every term, by lease, then start.
    pub terms: Vec<Term>,
    /// Every leaderless gap between two terms.
    pub gaps: Vec<Gap>,
    /// Every double leadership.
    pub overlaps: Vec<Overlap>,
    /// Terms that another process led into while their holder had not
    /// said it left, but which it then reported ended by their deadline
    /// (`follower` `expired` or `clock`): a process paused or starved past
    /// its deadline says so when it runs again (DESIGN §4b), and the row
    /// lapses only after that deadline, so the lease was not led twice.
    /// Drawn, not counted as overlaps.
    pub late_reports: Vec<Overlap>,
    /// Marks.
    pub marks: Vec<Mark>,
    /// Stretches a process was paused (`pause` to `resume` lines of
    /// `simulate`): (process, from, to).
    pub pauses: Vec<(String, i64, i64)>,
    /// The processes, in order of first appearance.
    pub nodes: Vec<String>,
    /// The leases, sorted.
    pub leases: Vec<String>,
    /// The first and last event's time.
    pub start_ms: i64,
    /// The end of the capture.
    pub end_ms: i64,
}
