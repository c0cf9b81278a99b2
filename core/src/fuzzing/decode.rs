//! Fuzz body: everything that reads outside data — result rows, names,
//! durations — must refuse bad values with a typed error, never panic, and
//! accept only values that mean what their type promises.
//!
//! Each input is a sequence of probes:
//!
//! - **rows** of arbitrary [`Cell`]s into [`Statements::decode_reply`] (for
//!   every operation), [`Statements::decode_status`] and
//!   [`Statements::decode_force_release`]; a decoded value must be what the
//!   row said (an `Acquired` epoch is the row's epoch and the row names us,
//!   a `Held` holder is someone else, `Rejected` means no row, …);
//! - **names**: arbitrary strings into [`LeaseName::new`] and
//!   [`HolderId::new`] (accepted exactly when 1–255 bytes without control
//!   characters) and [`TableName::new`] (accepted names round-trip through
//!   `Display` and render statements, in both dialects, whose SQL contains
//!   the quoted name and one placeholder per parameter);
//! - **durations** into [`Config::validate`]: accepted timings satisfy the
//!   rules of DESIGN §4 and start a [`LeaseState`].

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};

use crate::sql::{bindings, Cell, Dialect, Statement, Statements, Value};
use crate::{
    Config, ConfigError, Epoch, HolderId, Instant, LeaseName, LeaseState, Operation, Reply,
    TableName, MAX_NAME_LEN, MAX_TABLE_LEN,
};

/// Probes per input.
const MAX_PROBES: usize = 32;

/// Runs one fuzz input. Panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    for _ in 0..MAX_PROBES {
        if u.is_empty() {
            break;
        }
        let Ok(probe) = u.arbitrary::<Probe>() else {
            break;
        };
        match probe {
            Probe::Rows(op, rows) => rows_probe(op, &rows),
            Probe::Name(text) => name_probe(&text.0),
            Probe::Table(text, first) => table_probe(&text.0, first),
            Probe::Timings(t) => timings_probe(&t),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Probe {
    Rows(OpPick, Vec<Vec<CellPick>>),
    Name(Text),
    /// A table name, and where `fence_from` starts numbering (bounded by
    /// PostgreSQL's own limit on placeholders, so the numbers can be
    /// checked exactly; `fence_from` saturates beyond).
    Table(Text, u16),
    Timings(Timings),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum OpPick {
    Acquire,
    Renew(i64),
    Release(u64),
    Announce,
}

impl OpPick {
    fn operation(self) -> Operation {
        match self {
            OpPick::Acquire => Operation::Acquire,
            OpPick::Renew(e) => Operation::Renew {
                epoch: Epoch::new(e.unsigned_abs()),
            },
            OpPick::Release(e) => Operation::Release {
                epoch: Epoch::new(e),
            },
            OpPick::Announce => Operation::Announce,
        }
    }
}

/// A cell, biased towards the values the decoders branch on.
#[derive(Arbitrary, Debug)]
enum CellPick {
    Null,
    Int(i64),
    SmallInt(i8),
    Me,
    OtherHolder,
    Text(Text),
    Other(Text),
    /// A candidate's announcement (DESIGN §3 "Preferred holders").
    Candidate(u32),
}

/// This node's id in the row probes.
const ME: &str = "node-me";

impl CellPick {
    fn cell(&self) -> Cell {
        match self {
            CellPick::Null => Cell::Null,
            CellPick::Int(n) => Cell::Int(*n),
            CellPick::SmallInt(n) => Cell::Int(i64::from(*n)),
            CellPick::Me => Cell::Text(ME.into()),
            CellPick::OtherHolder => Cell::Text("node-other".into()),
            CellPick::Text(t) => Cell::Text(t.0.clone()),
            CellPick::Other(t) => Cell::Other(t.0.clone()),
            CellPick::Candidate(priority) => {
                let candidate = crate::Candidate {
                    holder: HolderId::new("node-other").expect("valid"),
                    rank: crate::Rank::new(*priority, Some("1.2.3")).expect("valid"),
                };
                Cell::Text(candidate.announcement().expect("fits"))
            }
        }
    }
}

/// A string, biased towards the characters the validators branch on.
#[derive(Debug)]
struct Text(String);

impl<'a> Arbitrary<'a> for Text {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        const PIECES: &[&str] = &[
            "a",
            "Z",
            "_",
            "9",
            ".",
            "\"",
            "'",
            " ",
            ";",
            "-",
            "\n",
            "\0",
            "é",
            "€",
            "😀",
            "?",
            "$1",
            "\u{7f}",
            "\u{85}",
            "picolease_leases",
            "public.",
        ];
        let mut s = String::new();
        let n = u.arbitrary_len::<u8>()?;
        for _ in 0..n {
            if u.ratio(1, 3)? {
                s.push(u.arbitrary::<char>()?);
            } else {
                s.push_str(u.choose(PIECES)?);
            }
            if s.len() > 2 * MAX_NAME_LEN + 8 {
                break;
            }
        }
        // Sometimes a long run, to hit the length limits exactly.
        if u.ratio(1, 8)? {
            let len = u.int_in_range(0..=MAX_NAME_LEN + 2)?;
            s.extend(std::iter::repeat_n('x', len));
        }
        Ok(Text(s))
    }
}

#[derive(Arbitrary, Debug)]
struct Timings {
    ttl: Span,
    interval: Span,
    timeout: Span,
    drift: Span,
    jitter: Span,
    seed: u64,
}

/// A duration: any, or a fraction of another timing, or a round number.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Span {
    Nanos(u64),
    Full(u64, u32),
    Millis(u32),
}

impl Span {
    fn duration(self) -> Duration {
        match self {
            Span::Nanos(n) => Duration::from_nanos(n),
            Span::Full(s, n) => Duration::new(s, n % 1_000_000_000),
            Span::Millis(ms) => Duration::from_millis(u64::from(ms)),
        }
    }
}

fn statements(dialect: Dialect) -> &'static Statements {
    use std::sync::OnceLock;
    static SQLITE: OnceLock<Statements> = OnceLock::new();
    static POSTGRES: OnceLock<Statements> = OnceLock::new();
    let cell = match dialect {
        Dialect::Postgres => &POSTGRES,
        _ => &SQLITE,
    };
    cell.get_or_init(|| Statements::new(dialect, &TableName::default()))
}

fn rows_probe(op: OpPick, picks: &[Vec<CellPick>]) {
    let rows: Vec<Vec<Cell>> = picks
        .iter()
        .map(|row| row.iter().map(CellPick::cell).collect())
        .collect();
    let me = HolderId::new(ME).expect("valid");
    let s = statements(Dialect::Sqlite);
    let operation = op.operation();
    let reply = s.decode_reply(operation, &me, &rows);
    // The decoders do not depend on the dialect.
    assert_eq!(
        reply,
        statements(Dialect::Postgres).decode_reply(operation, &me, &rows)
    );
    match (&reply, operation) {
        (Err(e), _) => assert!(!e.to_string().is_empty()),
        (Ok(Reply::Acquired { epoch }), Operation::Acquire) => {
            let [row] = rows.as_slice() else {
                panic!("acquired from {} rows", rows.len())
            };
            assert_eq!(row.len(), 3);
            assert_eq!(row[0], Cell::Text(ME.into()), "acquired, but not by me");
            assert_eq!(
                row[1],
                Cell::Int(epoch.to_i64()),
                "acquired epoch differs from the row"
            );
            assert!(matches!(row[2], Cell::Int(_)));
        }
        (
            Ok(Reply::Held {
                holder,
                epoch,
                expires_in,
            }),
            Operation::Acquire,
        ) => {
            let [row] = rows.as_slice() else {
                panic!("held from {} rows", rows.len())
            };
            assert_eq!(row.len(), 3);
            let Cell::Int(ms) = row[2] else {
                panic!("expires_in from a non-integer")
            };
            match holder {
                Some(holder) => {
                    assert_ne!(holder.as_str(), ME, "held by me is acquired");
                    assert_eq!(row[0], Cell::Text(holder.as_str().into()));
                }
                // A grace period: no holder, time left.
                None => {
                    assert_eq!(row[0], Cell::Null);
                    assert!(ms > 0, "a free row with no time left is taken, not held");
                }
            }
            assert_eq!(row[1], Cell::Int(epoch.to_i64()));
            assert_eq!(*expires_in, Duration::from_millis(ms.max(0).unsigned_abs()));
        }
        (Ok(Reply::Rejected), Operation::Renew { .. } | Operation::Release { .. }) => {
            assert!(rows.is_empty(), "rejected although a row matched")
        }
        (Ok(Reply::Accepted), Operation::Release { .. }) => {
            let [row] = rows.as_slice() else {
                panic!("accepted from {} rows", rows.len())
            };
            assert!(matches!(row.as_slice(), [Cell::Int(e)] if *e >= 0));
        }
        // A renewal: its epoch, no request, and no candidate that parses.
        (Ok(Reply::Accepted), Operation::Renew { .. }) => {
            let [row] = rows.as_slice() else {
                panic!("accepted from {} rows", rows.len())
            };
            assert!(matches!(row.as_slice(), [Cell::Int(e), Cell::Null, _] if *e >= 0));
            if let Cell::Text(text) = &row[2] {
                assert_eq!(crate::Candidate::parse(text), None);
            }
        }
        // An operator's request comes before any candidate.
        (Ok(Reply::HandOverAsked { to }), Operation::Renew { .. }) => {
            let [row] = rows.as_slice() else {
                panic!("asked from {} rows", rows.len())
            };
            let Cell::Text(node) = &row[1] else {
                panic!("asked without a request: {row:?}")
            };
            match to {
                None => assert!(node.is_empty()),
                Some(to) => assert_eq!(to.reserved_node(), Some(node.as_str())),
            }
        }
        (Ok(Reply::CandidateSeen { candidate }), Operation::Renew { .. }) => {
            let [row] = rows.as_slice() else {
                panic!("a candidate from {} rows", rows.len())
            };
            assert_eq!(row[1], Cell::Null, "a request comes first");
            assert_eq!(row[2], Cell::Text(candidate.announcement().expect("fits")));
        }
        // The announcement's rows are never read.
        (Ok(Reply::Accepted), Operation::Announce) => {}
        (Ok(other), _) => panic!("{operation:?} decoded as {other:?}"),
    }

    match s.decode_status(&rows) {
        Err(e) => assert!(!e.to_string().is_empty()),
        Ok(status) => {
            assert_eq!(status.len(), rows.len());
            for (lease, row) in status.iter().zip(&rows) {
                assert_eq!(row.len(), 4);
                assert_eq!(row[0], Cell::Text(lease.name.clone()));
                assert_eq!(row[2], Cell::Int(lease.epoch.to_i64()));
                assert_eq!(lease.holder.is_some(), lease.expires_in_ms.is_some());
            }
        }
    }

    match s.decode_force_release(&rows) {
        Err(e) => assert!(!e.to_string().is_empty()),
        Ok(None) => assert!(rows.is_empty()),
        Ok(Some(epoch)) => assert_eq!(rows, vec![vec![Cell::Int(epoch.to_i64())]]),
    }
}

fn name_probe(text: &str) {
    let valid =
        !text.is_empty() && text.len() <= MAX_NAME_LEN && !text.chars().any(char::is_control);
    match LeaseName::new(text) {
        Ok(name) => {
            assert!(valid, "lease name {text:?} accepted");
            assert_eq!(name.as_str(), text);
            assert_eq!(name.to_string(), text);
        }
        Err(e) => {
            assert!(!valid, "lease name {text:?} refused: {e}");
            assert!(matches!(e, ConfigError::BadName { .. }));
            assert!(!e.to_string().is_empty());
        }
    }
    // The conventional unique id is always a valid holder id, whatever the
    // host name (a non-ASCII host once made it too long).
    let unique = HolderId::unique(text, u32::MAX, u64::MAX);
    assert!(
        HolderId::new(unique.as_str()).is_ok(),
        "HolderId::unique({text:?}) = {unique:?} is not a valid holder id"
    );
    match HolderId::new(text) {
        Ok(id) => {
            assert!(valid, "holder id {text:?} accepted");
            assert_eq!(id.as_str(), text);
        }
        Err(e) => {
            assert!(!valid, "holder id {text:?} refused: {e}");
            assert!(matches!(e, ConfigError::BadName { .. }));
        }
    }
}

fn is_identifier(part: &str) -> bool {
    let mut chars = part.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn table_probe(text: &str, first: u16) {
    let parts: Vec<&str> = text.split('.').collect();
    let valid = text.len() <= MAX_TABLE_LEN
        && parts.len() <= 2
        && parts.iter().all(|part| is_identifier(part));
    let table = match TableName::new(text) {
        Err(e) => {
            assert!(!valid, "table name {text:?} refused: {e}");
            assert!(matches!(e, ConfigError::BadTableName { .. }));
            assert!(!e.to_string().is_empty());
            return;
        }
        Ok(table) => table,
    };
    assert!(valid, "table name {text:?} accepted");
    assert_eq!(table.to_string(), text);
    assert_eq!(TableName::new(&table.to_string()).as_ref(), Ok(&table));

    let quoted = format!("\"{}\"", table.table());
    let lease = LeaseName::new("lease").expect("valid");
    let holder = HolderId::new("holder").expect("valid");
    let values = bindings(&lease, &holder, 1000);
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let s = Statements::new(dialect, &table);
        assert_eq!(s.table(), &table);
        assert!(
            s.create_table().contains(&quoted),
            "{dialect:?} create table lacks {quoted}"
        );
        if let Some(schema) = table.schema() {
            assert!(
                s.create_table().contains(&format!("\"{schema}\".{quoted}")),
                "{dialect:?} create table lacks the schema"
            );
        }
        let fence_from = s.fence_from(usize::from(first));
        for statement in [
            s.acquire(),
            s.renew(),
            s.release(),
            s.force_release(),
            s.status(),
            s.fence(),
            &fence_from,
        ] {
            assert!(
                statement.sql().contains(&quoted),
                "{dialect:?} statement lacks {quoted}: {}",
                statement.sql()
            );
            let placeholders = placeholders(statement, dialect);
            assert_eq!(
                placeholders.len(),
                statement.params().len(),
                "{}",
                statement.sql()
            );
            assert_eq!(
                statement.bind(&values, Some(Epoch::new(3))).count(),
                statement.params().len()
            );
            for value in statement.bind(&values, None) {
                if let Value::Int(n) = value {
                    assert!(n == -1 || n == 1000, "bound {n}");
                }
            }
            if dialect == Dialect::Postgres {
                let start = if std::ptr::eq(statement, &fence_from) {
                    usize::from(first).max(1)
                } else {
                    1
                };
                let expected: Vec<usize> = (start..start + placeholders.len()).collect();
                assert_eq!(placeholders, expected, "{}", statement.sql());
            }
        }
    }
}

/// The placeholders of a statement in order: their numbers on PostgreSQL,
/// zeros for SQLite's `?`.
fn placeholders(statement: &Statement, dialect: Dialect) -> Vec<usize> {
    let sql = statement.sql();
    match dialect {
        Dialect::Postgres => {
            let mut out = Vec::new();
            let bytes = sql.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                if bytes[i] == b'$' {
                    let digits: String = sql[i + 1..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    if !digits.is_empty() {
                        out.push(digits.parse().expect("digits"));
                    }
                    i += 1 + digits.len();
                } else {
                    i += 1;
                }
            }
            out
        }
        _ => sql.matches('?').map(|_| 0).collect(),
    }
}

fn timings_probe(t: &Timings) {
    let mut config = Config::new(
        LeaseName::new("lease").expect("valid"),
        HolderId::new("holder").expect("valid"),
    );
    config.ttl = t.ttl.duration();
    config.interval = t.interval.duration();
    config.request_timeout = t.timeout.duration();
    config.drift = t.drift.duration();
    config.jitter = t.jitter.duration();
    config.seed = t.seed;
    let verdict = config.validate();
    let ms = Duration::from_millis;
    let Config {
        ttl,
        interval,
        request_timeout: timeout,
        drift,
        jitter,
        ..
    } = config;
    let sound = ttl >= ms(10)
        && ttl <= Duration::from_secs(24 * 3600)
        && !interval.is_zero()
        && interval < ttl / 2
        && !timeout.is_zero()
        && timeout < ttl
        && drift < ttl / 2
        && jitter <= interval / 2;
    assert_eq!(verdict.is_ok(), sound, "{config:?} gave {verdict:?}");
    match verdict {
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert_eq!(LeaseState::new(config, Instant::ZERO).err(), Some(e));
        }
        Ok(()) => {
            assert!(config.local_validity() > Duration::ZERO);
            assert!(config.local_validity() < ttl);
            assert!(config.ttl_millis() >= 10);
            let mut lease = LeaseState::new(config, Instant::ZERO).expect("validated");
            lease.handle_timeout(Instant::ZERO);
            assert!(lease.poll_command().is_some(), "no acquire at start");
        }
    }
}
