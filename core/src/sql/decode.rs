//! Decoding result rows into protocol values, validating as we go.

use std::time::Duration;

use super::Dialect;
use crate::error::RowError;
use crate::names::{Epoch, HolderId};
use crate::protocol::{Operation, Reply};
use crate::rank::Candidate;

/// One column value as a driver read it. Drivers map their native types
/// here; anything that is not NULL, an integer or text is `Other`, carrying
/// the database's name for its type so the error can say what was found.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// SQL NULL.
    Null,
    /// A 64-bit integer (or a narrower integer widened).
    Int(i64),
    /// Text.
    Text(String),
    /// Any other type, by name (`real`, `blob`, `timestamptz`, …).
    Other(String),
}

impl Cell {
    fn type_name(&self) -> String {
        match self {
            Cell::Null => "NULL".into(),
            Cell::Int(_) => "integer".into(),
            Cell::Text(_) => "text".into(),
            Cell::Other(name) => name.clone(),
        }
    }
}

/// One row of the status statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRow {
    /// The lease name.
    pub name: String,
    /// The holder, or `None` when the lease is free.
    pub holder: Option<String>,
    /// The current epoch.
    pub epoch: Epoch,
    /// Milliseconds until expiry on the database's clock (negative once
    /// lapsed); `None` when the lease is free (no holder, nothing left: a
    /// row without a holder but with time left is in its grace period
    /// after a server change, DESIGN §3 "Failover").
    pub expires_in_ms: Option<i64>,
}

impl LeaseRow {
    /// The node the row is reserved for by a planned handover (its holder
    /// is `<node>#`, DESIGN §3 "Planned handover"), if it is reserved.
    pub fn reserved_for(&self) -> Option<&str> {
        self.holder
            .as_deref()?
            .strip_suffix(crate::names::RESERVATION_MARK)
    }
}

pub(super) fn expect_columns(
    statement: &'static str,
    row: &[Cell],
    expected: usize,
) -> Result<(), RowError> {
    if row.len() == expected {
        Ok(())
    } else {
        Err(RowError::ColumnCount {
            statement,
            expected,
            found: row.len(),
        })
    }
}

pub(super) fn epoch(lease: &str, cell: &Cell) -> Result<Epoch, RowError> {
    match cell {
        Cell::Int(e) if *e >= 0 => Ok(Epoch::new(*e as u64)),
        Cell::Int(e) => Err(RowError::NegativeEpoch {
            lease: lease.into(),
            epoch: *e,
        }),
        Cell::Null => Err(RowError::Null {
            lease: lease.into(),
            column: "epoch",
        }),
        other => Err(wrong_type(lease, "epoch", "integer", other)),
    }
}

fn int(lease: &str, column: &'static str, cell: &Cell) -> Result<i64, RowError> {
    match cell {
        Cell::Int(v) => Ok(*v),
        Cell::Null => Err(RowError::Null {
            lease: lease.into(),
            column,
        }),
        other => Err(wrong_type(lease, column, "integer", other)),
    }
}

fn opt_text(lease: &str, column: &'static str, cell: &Cell) -> Result<Option<String>, RowError> {
    match cell {
        Cell::Text(s) => Ok(Some(s.clone())),
        Cell::Null => Ok(None),
        other => Err(wrong_type(lease, column, "text", other)),
    }
}

fn wrong_type(lease: &str, column: &'static str, expected: &'static str, found: &Cell) -> RowError {
    RowError::WrongType {
        lease: lease.into(),
        column,
        expected,
        found: found.type_name(),
    }
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

pub(super) fn reply(
    dialect: Dialect,
    operation: Operation,
    me: &HolderId,
    rows: &[Vec<Cell>],
) -> Result<Reply, RowError> {
    match operation {
        Operation::Acquire => {
            let [row] = rows else {
                return Err(RowError::RowCount {
                    statement: "acquire",
                    expected: "1",
                    found: rows.len(),
                });
            };
            expect_columns("acquire", row, 3)?;
            acquire_row(dialect, me, row)
        }
        Operation::Renew { .. } => match rows {
            [] => Ok(Reply::Rejected),
            [row] => {
                expect_columns("renew", row, 3)?;
                epoch("", &row[0])?;
                // The operator's request, if any (DESIGN §3 "Planned
                // handover"): a node's name, or '' for anyone. It comes
                // before any candidate.
                match hand_over_request("", &row[1])? {
                    None => Ok(preferred_candidate(&row[2])),
                    Some(to) => Ok(Reply::HandOverAsked { to }),
                }
            }
            _ => Err(RowError::RowCount {
                statement: "renew",
                expected: "0 or 1",
                found: rows.len(),
            }),
        },
        // The announcement's answer does not matter: the leader reads it.
        Operation::Announce => Ok(Reply::Accepted),
        Operation::Release { .. } | Operation::HandOver { .. } => {
            let statement = if matches!(operation, Operation::Release { .. }) {
                "release"
            } else {
                "hand over"
            };
            match rows {
                [] => Ok(Reply::Rejected),
                [row] => {
                    expect_columns(statement, row, 1)?;
                    epoch("", &row[0])?;
                    Ok(Reply::Accepted)
                }
                _ => Err(RowError::RowCount {
                    statement,
                    expected: "0 or 1",
                    found: rows.len(),
                }),
            }
        }
    }
}

/// The renewal's request column (DESIGN §3 "Planned handover"), single
/// or batched: `None` when no operator asked; else the reservation of the
/// node asked for (`Some(None)`: `''`, whoever comes next).
pub(super) fn hand_over_request(
    lease: &str,
    cell: &Cell,
) -> Result<Option<Option<HolderId>>, RowError> {
    match opt_text(lease, "handover request", cell)? {
        None => Ok(None),
        Some(node) if node.is_empty() => Ok(Some(None)),
        Some(node) => match HolderId::reserved_for(&node) {
            Ok(to) => Ok(Some(Some(to))),
            Err(_) => Err(RowError::WrongType {
                lease: lease.into(),
                column: "handover request",
                expected: "a node name (1 to 254 bytes, no control characters)",
                found: format!("{:?}", node.chars().take(40).collect::<String>()),
            }),
        },
    }
}

/// The renewal's third column (DESIGN §3 "Preferred holders"): the live
/// announcement of the lease's preferred candidate. Text no picolease
/// wrote, or no text, is no candidate: a hand-edited row must not end a
/// term.
fn preferred_candidate(cell: &Cell) -> Reply {
    match cell {
        Cell::Text(text) => match Candidate::parse(text) {
            Some(candidate) => Reply::CandidateSeen { candidate },
            None => Reply::Accepted,
        },
        _ => Reply::Accepted,
    }
}

/// The acquire's `holder, epoch, expires_in_ms` (three cells, already
/// counted): ours is `Acquired`, another's `Held`. Shared by the single and
/// the batch acquire.
pub(super) fn acquire_row(
    dialect: Dialect,
    me: &HolderId,
    row: &[Cell],
) -> Result<Reply, RowError> {
    let holder = opt_text("", "holder", &row[0])?;
    let epoch = epoch("", &row[1])?;
    let expires_in = int("", "expires_at", &row[2])?;
    match holder {
        Some(holder) if holder == me.as_str() => Ok(Reply::Acquired { epoch }),
        Some(holder) => {
            let holder = HolderId::from_row(&holder).map_err(|_| RowError::WrongType {
                lease: String::new(),
                column: "holder",
                expected: "a holder id (1 to 255 bytes, no control characters)",
                found: format!("{:?}", holder.chars().take(40).collect::<String>()),
            })?;
            Ok(Reply::Held {
                holder: Some(holder),
                epoch,
                expires_in: millis(expires_in),
            })
        }
        // No holder after an acquire: the row is in its grace period after
        // a server change (DESIGN §3 "Failover"), nobody's until it ends.
        // A free row with no time left is always taken, so only a grace
        // row (time left) or an unsound one (never taken over) gets here.
        //
        // On MySQL the read-back is a second statement with a later clock:
        // the write reads its clock when it starts, before it waits for a
        // releasing transaction's row lock. A release that commits during
        // that wait has time left to the write (so it is not taken) and
        // none to the read-back. The row is free and not ours: `Held` by
        // nobody with no time left, tried again at the next attempt.
        None if expires_in > 0 || dialect == Dialect::Mysql => Ok(Reply::Held {
            holder: None,
            epoch,
            expires_in: millis(expires_in),
        }),
        None => Err(RowError::Null {
            lease: String::new(),
            column: "holder",
        }),
    }
}

/// A `name` column: non-NULL text.
pub(super) fn name(cell: &Cell) -> Result<String, RowError> {
    match cell {
        Cell::Text(name) => Ok(name.clone()),
        Cell::Null => Err(RowError::Null {
            lease: String::new(),
            column: "name",
        }),
        other => Err(wrong_type("", "name", "text", other)),
    }
}

pub(super) fn status_row(row: &[Cell]) -> Result<LeaseRow, RowError> {
    expect_columns("status", row, 4)?;
    let name = name(&row[0])?;
    let holder = opt_text(&name, "holder", &row[1])?;
    let epoch = epoch(&name, &row[2])?;
    let expires_in = int(&name, "expires_at", &row[3])?;
    Ok(LeaseRow {
        expires_in_ms: (holder.is_some() || expires_in > 0).then_some(expires_in),
        name,
        holder,
        epoch,
    })
}

pub(super) fn force_release(rows: &[Vec<Cell>]) -> Result<Option<Epoch>, RowError> {
    match rows {
        [] => Ok(None),
        [row] => {
            expect_columns("force release", row, 1)?;
            epoch("", &row[0]).map(Some)
        }
        _ => Err(RowError::RowCount {
            statement: "force release",
            expected: "0 or 1",
            found: rows.len(),
        }),
    }
}
