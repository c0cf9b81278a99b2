//! `picolease sql [--dialect sqlite|postgres|mysql] [--json]`: every statement
//! of the protocol, for contenders written in other languages. Touches no
//! database.
//!
//! Plain output is SQL with a comment before each statement naming its
//! parameters in placeholder order. `--json` prints one object:
//!
//! ```text
//! {"dialect": "postgres", "table": "picolease_leases",
//!  "statements": {"create": S, "acquire": S, "renew": S, "release": S,
//!                 "force_release": S, "status": S, "fence": S,
//!                 "acquire_batch": S, "renew_batch": S,
//!                 "release_batch": S, "survey": S}}
//! ```
//!
//! where each `S` is `{"sql": "…", "params": [...]}` and `params` names the
//! parameters in placeholder order (`lease`, `holder`, `epoch`, `ttl_ms`,
//! `batch`, `stale_ms`). The statements of a planned handover (DESIGN §3)
//! are picolease's own and not printed. Placeholders are `$1…` on PostgreSQL and `?` on
//! SQLite and MySQL. `create` holds the table and, on PostgreSQL, the fence
//! index (statements separated by `;`, no parameters: run it as one batch;
//! on MySQL the index is inside the `CREATE TABLE`).
//! `fence` is a boolean SQL expression to AND into your own statements.
//!
//! MySQL (and MariaDB) has no `RETURNING`: a statement that writes and
//! reports carries `"read_back": {"sql": "…", "params": [...], "order":
//! "after" | "before"}` there. Run the statement and its read-back in one
//! transaction (`START TRANSACTION`; the read-back after or before the
//! write, as `order` says; `COMMIT`, or `ROLLBACK` on any error) and decode
//! the read-back's rows, never the write's affected-row count (DESIGN §3).
//!
//! The lease-set statements printed by default renew every held row each
//! interval: a contender in another language can run them beside
//! picolease's own sets, which renew by liveness (never taking a row one
//! of them links). `--by-liveness` prints a lease set's
//! statements renewing by liveness (DESIGN §9 "Renewal by liveness") instead: `acquire_batch`
//! links what it takes to the caller's membership row (`expires_at` =
//! 2^62 + the membership row's epoch), `renew_batch` writes that row and
//! the plain rows and confirms linked rows by reading, and `survey`,
//! `status` and `fence` read a linked row's expiry as its liveness's. On
//! SQLite the batch acquire and renewal then carry a `read_back` too (two
//! statements in one `BEGIN IMMEDIATE` transaction, the read-back's rows
//! the result); on MySQL they are chains: each `read_back` may carry a
//! `read_back` of its own, every statement of the chain run in order in one
//! transaction and the last one's rows the result, but for an `order` of
//! `"after_commit"`: the statements before it commit first, each in a
//! transaction of its own (the acquire's end of a lapsed liveness). A contender that renews
//! every row must never take a linked row: read any `expires_at` at or
//! past 2^62 as held.
//!
//! The last four are a lease set's batch statements (DESIGN §9). Their
//! `batch` is one JSON array bound as text: the names for `acquire_batch`
//! (`["a","b"]`), `[name, epoch]` pairs for `renew_batch` and
//! `release_batch` (`[["a",3],["b",5]]`), each sorted byte-wise by name (the
//! lock order on PostgreSQL). A set's membership row is the lease named
//! `picolease.member:<holder id>` (a ranked member appends a space, its
//! 42-character rank key and, with a tag, a space and the tag: DESIGN §9
//! "Preferred members"), acquired and renewed in the same
//! batches; `survey` lists the live ones, and the other rows that are free,
//! have less than `stale_ms` left (picolease uses ttl − 2·interval, at
//! least one interval) or are reserved for a successor (holder ending in
//! `#`).

use std::process::ExitCode;

use picolease::sql::{Dialect, Param, ReadOrder, Statement, Statements};
use picolease::{redact_url, TableName};

use crate::failure::{one_line, CliError};
use crate::output::line;

/// The dialect named by `--dialect`, or else by `--db`'s scheme.
fn dialect(flag: Option<&str>, db: &str) -> Result<Dialect, CliError> {
    if let Some(name) = flag {
        return match name {
            "sqlite" => Ok(Dialect::Sqlite),
            "postgres" => Ok(Dialect::Postgres),
            "mysql" | "mariadb" => Ok(Dialect::Mysql),
            other => Err(CliError::usage(format!(
                "--dialect {:?} is not a dialect: use sqlite, postgres or mysql",
                one_line(other)
            ))),
        };
    }
    if db.starts_with("sqlite:") {
        return Ok(Dialect::Sqlite);
    }
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        return Ok(Dialect::Postgres);
    }
    if db.starts_with("mysql://") || db.starts_with("mariadb://") {
        return Ok(Dialect::Mysql);
    }
    Err(CliError::usage(format!(
        "--db {:?} names no SQL dialect: use --dialect sqlite|postgres|mysql, or a sqlite://, postgres:// or mysql:// URL",
        one_line(&redact_url(db))
    )))
}

fn dialect_name(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "postgres",
        Dialect::Mysql => "mysql",
        _ => "sqlite",
    }
}

fn param_name(param: Param) -> &'static str {
    match param {
        Param::Lease => "lease",
        Param::Holder => "holder",
        Param::Epoch => "epoch",
        Param::TtlMillis => "ttl_ms",
        Param::Batch => "batch",
        Param::StaleMillis => "stale_ms",
        // Only the handover's and the announcement's, which are not printed.
        Param::Successor => "successor",
        Param::ReservationMillis => "reservation_ms",
        Param::Candidacy => "candidacy",
    }
}

/// One statement as printed: its SQL and its parameters' names, and on
/// MySQL the read-back to run with it in one transaction.
struct Printed {
    key: &'static str,
    what: &'static str,
    sql: String,
    params: Vec<&'static str>,
    read_back: Option<PrintedRead>,
}

/// A read-back as printed, with its own read-back when it has one
/// (MySQL's batches renewing by liveness are chains of statements).
struct PrintedRead {
    sql: String,
    params: Vec<&'static str>,
    /// `after` or `before` the write.
    order: &'static str,
    read_back: Option<Box<PrintedRead>>,
}

impl PrintedRead {
    fn of(statement: &Statement) -> Option<Self> {
        statement.read_back().map(|r| PrintedRead {
            sql: r.statement().sql().to_string(),
            params: param_names(r.statement()),
            order: match r.order() {
                ReadOrder::AfterWrite => "after",
                ReadOrder::BeforeWrite => "before",
                ReadOrder::AfterCommit => "after_commit",
            },
            read_back: PrintedRead::of(r.statement()).map(Box::new),
        })
    }

    /// `{"sql", "params", "order"}` and its own `read_back`, if any.
    fn json(&self) -> serde_json::Value {
        let mut read =
            serde_json::json!({ "sql": self.sql, "params": self.params, "order": self.order });
        if let Some(next) = &self.read_back {
            read["read_back"] = next.json();
        }
        read
    }
}

fn param_names(statement: &Statement) -> Vec<&'static str> {
    statement.params().iter().copied().map(param_name).collect()
}

impl Printed {
    fn of(key: &'static str, what: &'static str, statement: &Statement) -> Self {
        Printed {
            key,
            what,
            sql: statement.sql().to_string(),
            params: param_names(statement),
            read_back: PrintedRead::of(statement),
        }
    }
}

/// The operators' runbook statement: printed as text, left out of `--json`,
/// whose keys are the protocol's statements a contender runs.
const AFTER_FAILOVER: &str = "after_failover";

/// What a statement renewing by liveness does, where it differs
/// (DESIGN §9 "Renewal by liveness"), by key.
const BY_LIVENESS: [(&str, &str); 5] = [
    ("status", "every lease: name, holder, epoch, expires_in_ms; a linked row (expires_at >= 2^62) expires with its holder's liveness, the membership row picolease.member:<holder id>[ <rank>] at epoch expires_at - 2^62 (now, once that term is over)"),
    ("fence", "a boolean SQL expression: AND it into your own WHERE so a stale leader's write changes nothing; a linked row's expiry read through its holder's liveness"),
    ("acquire_batch", "lease sets renewing by liveness: extend the caller's live membership row (its liveness), then take each name in batch that is free, lapsed, ours, reserved for our node or linked to another holder's liveness that is over (PostgreSQL and MySQL first end a lapsed one with a write), at epoch + 1, linked to the caller's liveness (expires_at = 2^62 + its epoch) or plain without one; returns name, holder, epoch, expires_in_ms for each"),
    ("renew_batch", "lease sets renewing by liveness: extend the caller's membership rows of batch at their epochs and any live one, and every plain row of batch ours at its epoch; a linked row of batch ours at its epoch is confirmed without a write when its liveness was just extended; returns name, epoch, handover request of each renewed or confirmed"),
    ("survey", "lease sets: as without liveness, each linked row's expiry read through its holder's liveness"),
];

/// Every statement, in the order they are printed; `by_liveness`, a
/// set's statements renewing by liveness described as such.
fn printed_by(statements: &Statements, by_liveness: bool) -> Vec<Printed> {
    let mut printed = printed(statements);
    if by_liveness {
        for p in &mut printed {
            if let Some((_, what)) = BY_LIVENESS.iter().find(|(key, _)| *key == p.key) {
                p.what = what;
            }
        }
    }
    printed
}

/// Every statement, in the order they are printed.
fn printed(statements: &Statements) -> Vec<Printed> {
    let create = std::iter::once(statements.create_table())
        .chain(statements.create_index())
        .collect::<Vec<_>>()
        .join(";\n");
    vec![
        Printed {
            key: "create",
            what: "create the table if missing, with the fence index (a second statement on PostgreSQL, inside CREATE TABLE on MySQL) and the table's marker row picolease.table (after CREATE TABLE; on MySQL after the migration); run once at start, as one batch",
            sql: create,
            params: Vec::new(),
            read_back: None,
        },
        Printed::of(
            "acquire",
            "take the lease if free, lapsed, ours or reserved for our node (epoch + 1; reserved: our node's name and '#', e.g. web-2# for holder web-2#a1b2c3); returns holder, epoch, expires_in_ms",
            statements.acquire(),
        ),
        Printed::of(
            "renew",
            "extend our lease at our epoch; one row (epoch, handover request, preferred candidate) if still ours, none if lost; the request is NULL, or the node an operator asked this term to be handed over to ('' for anyone); the candidate is NULL, or the live announcement in the picolease.preferred:<name> row (a contender that announces nothing may ignore it; picolease nodes with a health probe announce while healthy, and a picolease leader whose probe fails hands the lease to the candidate, DESIGN §5 \"Work that fails\")",
            statements.renew(),
        ),
        Printed::of(
            "release",
            "free our lease at our epoch (the epoch stays); one row (epoch) if it was ours",
            statements.release(),
        ),
        Printed::of(
            "force_release",
            "administrative: free the lease whoever holds it, epoch + 1 (PostgreSQL: a row another server incarnation wrote is adopted instead, nobody's for ttl_ms at least); one row (the new epoch)",
            statements.force_release(),
        ),
        Printed::of(
            AFTER_FAILOVER,
            "administrative, the runbook after a failover or restore (release --all --after-failover; text only, not in --json): every lease and membership row nobody's for ttl_ms at least, at epoch max(epoch + 2^20, now_ms * 2^20); returns name, epoch of each",
            statements.after_failover(),
        ),
        Printed::of(
            "status",
            "every lease: name, holder, epoch, expires_in_ms",
            statements.status(),
        ),
        Printed::of(
            "fence",
            "a boolean SQL expression: AND it into your own WHERE so a stale leader's write changes nothing",
            statements.fence(),
        ),
        Printed::of(
            "acquire_batch",
            "lease sets: take each name in batch that is free, lapsed or ours (epoch + 1), batch a JSON array of distinct names sorted byte-wise, e.g. [\"a\",\"b\"]; returns name, holder, epoch, expires_in_ms for each, taken or not",
            statements.acquire_batch(),
        ),
        Printed::of(
            "renew_batch",
            "lease sets: extend each lease in batch, a JSON array of [name, epoch] pairs sorted by name, e.g. [[\"a\",3],[\"b\",5]], that is ours at that epoch; returns name, epoch of each renewed (a missing pair was lost) and, as the renew's second column, the node an operator asked that term be handed over to ('' for anyone; NULL: no request)",
            statements.renew_batch(),
        ),
        Printed::of(
            "release_batch",
            "lease sets: free each lease in batch, a JSON array of [name, epoch] pairs sorted by name, that is ours at that epoch (the epoch stays; PostgreSQL notifies each name); returns name, epoch of each freed",
            statements.release_batch(),
        ),
        Printed::of(
            "survey",
            "lease sets: name, holder, epoch, expires_in_ms, by name, of live membership rows (picolease.member:<holder id>[ <rank key>[ <version tag>]]) and of other rows free, with less than stale_ms left (picolease: ttl - 2*interval, at least one interval) or reserved for a successor (holder ending in '#')",
            statements.survey(),
        ),
    ]
}

/// The parameter comment: `$1 lease, $2 holder` or `lease, holder` (`?`).
fn describe(dialect: Dialect, params: &[&str]) -> String {
    if params.is_empty() {
        return "no parameters".to_string();
    }
    match dialect {
        Dialect::Postgres => {
            let named: Vec<String> = params
                .iter()
                .enumerate()
                .map(|(i, name)| format!("${} {name}", i + 1))
                .collect();
            format!("parameters: {}", named.join(", "))
        }
        _ => format!("parameters (?, in order): {}", params.join(", ")),
    }
}

/// `picolease sql`.
pub fn run(
    db: &str,
    table: &str,
    dialect_flag: Option<&str>,
    json: bool,
    by_liveness: bool,
) -> Result<ExitCode, CliError> {
    let table = TableName::new(table).map_err(CliError::usage)?;
    let dialect = dialect(dialect_flag, db)?;
    let mut statements = Statements::new(dialect, &table);
    if by_liveness {
        statements = statements.renewing_by_liveness();
    }
    let printed = printed_by(&statements, by_liveness);
    if json {
        let mut map = serde_json::Map::new();
        for p in printed.iter().filter(|p| p.key != AFTER_FAILOVER) {
            let mut statement = serde_json::json!({ "sql": p.sql, "params": p.params });
            if let Some(r) = &p.read_back {
                statement["read_back"] = r.json();
            }
            map.insert(p.key.to_string(), statement);
        }
        let object = serde_json::json!({
            "dialect": dialect_name(dialect),
            "table": table.to_string(),
            "statements": serde_json::Value::Object(map),
        });
        line(&object.to_string());
        return Ok(ExitCode::SUCCESS);
    }
    line(&format!(
        "-- picolease statements for {}, table {table}",
        dialect_name(dialect)
    ));
    for p in &printed {
        line("");
        line(&format!("-- {}: {}", p.key, p.what));
        line(&format!("-- {}", describe(dialect, &p.params)));
        if p.key == "fence" {
            // An expression, not a statement: no semicolon.
            line(&p.sql);
        } else {
            line(&format!("{};", p.sql));
        }
        let mut read = p.read_back.as_ref();
        while let Some(r) = read {
            let result = if r.read_back.is_some() {
                ""
            } else {
                " (its rows are the result)"
            };
            line(&format!(
                "-- {}{result}:",
                match r.order {
                    "after" => "then, after the statement above, in the same transaction",
                    "after_commit" =>
                        "then, once the statement above committed, in a new transaction",
                    _ => "first, before the statement above, in the same transaction",
                }
            ));
            line(&format!("-- {}", describe(dialect, &r.params)));
            line(&format!("{};", r.sql));
            read = r.read_back.as_deref();
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptions_name_the_member_prefix_and_the_batch_formats() {
        let statements = Statements::new(Dialect::Postgres, &TableName::default());
        let printed = printed(&statements);
        let what = |key: &str| printed.iter().find(|p| p.key == key).unwrap().what;
        assert!(what("survey").contains(picolease::sql::MEMBER_PREFIX));
        assert!(what("survey").contains("stale_ms"));
        assert!(what("acquire_batch").contains(&picolease::sql::batch_names(["a", "b"])));
        let pairs = picolease::sql::batch_pairs([
            ("a", picolease::Epoch::new(3)),
            ("b", picolease::Epoch::new(5)),
        ]);
        assert!(what("renew_batch").contains(&pairs));
        assert!(printed.iter().all(|p| !p.what.contains('\n')));
    }

    #[test]
    fn the_dialect_follows_the_flag_then_the_url_scheme() {
        assert_eq!(
            dialect(Some("postgres"), "sqlite://x").unwrap(),
            Dialect::Postgres
        );
        assert_eq!(dialect(None, "sqlite://x.db").unwrap(), Dialect::Sqlite);
        assert_eq!(dialect(None, "sqlite::memory:").unwrap(), Dialect::Sqlite);
        assert_eq!(dialect(None, "postgres://h/db").unwrap(), Dialect::Postgres);
        assert_eq!(
            dialect(None, "postgresql://h/db").unwrap(),
            Dialect::Postgres
        );
        assert_eq!(
            dialect(Some("mysql"), "sqlite://x").unwrap(),
            Dialect::Mysql
        );
        assert_eq!(dialect(None, "mysql://u@h/db").unwrap(), Dialect::Mysql);
        assert_eq!(dialect(None, "mariadb://u@h/db").unwrap(), Dialect::Mysql);
        assert!(dialect(Some("oracle"), "sqlite://x")
            .unwrap_err()
            .to_string()
            .contains("\"oracle\""));
        assert!(dialect(None, "oracle://u:secret@h/db")
            .unwrap_err()
            .to_string()
            .contains("oracle://"));
        assert!(!dialect(None, "oracle://u:secret@h/db")
            .unwrap_err()
            .to_string()
            .contains("secret"));
    }

    #[test]
    fn mysql_statements_print_with_their_read_backs_and_question_marks() {
        let statements = Statements::new(Dialect::Mysql, &TableName::default());
        let all = printed(&statements);
        let get = |key: &str| all.iter().find(|p| p.key == key).unwrap();
        let fence = get("fence");
        assert_eq!(fence.params, ["lease", "holder", "epoch"]);
        assert_eq!(fence.sql.matches('?').count(), 3);
        assert!(fence.sql.contains("LOCK IN SHARE MODE"));
        assert!(fence.read_back.is_none());
        let release = get("release").read_back.as_ref().unwrap();
        assert_eq!(release.order, "before");
        assert_eq!(release.params, ["lease", "holder", "epoch"]);
        assert_eq!(get("acquire").read_back.as_ref().unwrap().order, "after");
        assert!(get("create").sql.contains("ENGINE=InnoDB"));
        assert_eq!(
            describe(Dialect::Mysql, &fence.params),
            "parameters (?, in order): lease, holder, epoch"
        );
        // PostgreSQL's statements print as before: no read-backs.
        let pg = printed(&Statements::new(Dialect::Postgres, &TableName::default()));
        assert!(pg.iter().all(|p| p.read_back.is_none()));
    }
}
