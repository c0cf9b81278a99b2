//! The model database ([`picolease_core::sim::ModelDb`]) against a real
//! SQLite file (bundled SQLite, in a temporary directory), on the same
//! operation sequences, running the real `Statements` with bound
//! parameters and decoding both sides with the same decoders (DESIGN §6:
//! "the simulation cannot drift from the real SQL").
//!
//! `cargo test -p picolease-tests --test integration model_vs_sqlite::`
//! (`PROPTEST_CASES=n` for more random sequences).

use crate::model_vs;

use std::cell::RefCell;
use std::path::Path;
use std::sync::Barrier;

use model_vs::batch::{
    assert_linked_rows_met, batch_ops, check_awkward_names,
    check_runbook_keeps_a_linked_rows_grace, renew_many, BatchMutant, BatchOp, BatchSql,
    BATCH_MUTANTS, LIVENESS_MUTANTS,
};
use model_vs::{
    check_concurrent_acquires, check_hand_over_script, check_real_expiry, ops, Bound, Comparison,
    EpochPick, Op, Outcome, RealDb, Sql, LEASES, SQL_MUTANTS,
};
use picolease_core::sim::ModelDb;
use picolease_core::sql::{Cell, Dialect, Statements};
use picolease_core::{Epoch, HolderId, Operation, Reply, TableName};
use proptest::test_runner::{
    Config, FileFailurePersistence, RngAlgorithm, TestError, TestRng, TestRunner,
};
use rusqlite::types::ValueRef;
use rusqlite::{params_from_iter, Connection};

struct Sqlite {
    conn: Connection,
}

impl Sqlite {
    fn open(path: &Path) -> Self {
        let conn = Connection::open(path).expect("open the SQLite file");
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .expect("busy timeout");
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
            .expect("pragmas");
        Sqlite { conn }
    }
}

fn params(values: &[Bound]) -> impl rusqlite::Params + '_ {
    params_from_iter(values.iter().map(|v| match v {
        Bound::Text(s) => rusqlite::types::Value::Text(s.clone()),
        Bound::Int(n) => rusqlite::types::Value::Integer(*n),
    }))
}

impl RealDb for Sqlite {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn batch(&mut self, sql: &str) {
        self.conn
            .execute_batch(sql)
            .unwrap_or_else(|e| panic!("{e}: {sql}"));
    }

    fn query(&mut self, sql: &str, values: &[Bound]) -> Vec<Vec<Cell>> {
        let mut statement = self
            .conn
            .prepare_cached(sql)
            .unwrap_or_else(|e| panic!("{e}: {sql}"));
        let columns = statement.column_count();
        let mut rows = statement
            .query(params(values))
            .unwrap_or_else(|e| panic!("{e}: {sql}"));
        let mut out = Vec::new();
        while let Some(row) = rows.next().unwrap_or_else(|e| panic!("{e}: {sql}")) {
            let cells = (0..columns)
                .map(|i| match row.get_ref(i).expect("column") {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(n) => Cell::Int(n),
                    ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Real(_) => Cell::Other("real".into()),
                    ValueRef::Blob(_) => Cell::Other("blob".into()),
                })
                .collect();
            out.push(cells);
        }
        out
    }

    fn execute(&mut self, sql: &str, values: &[Bound]) -> u64 {
        let mut statement = self
            .conn
            .prepare_cached(sql)
            .unwrap_or_else(|e| panic!("{e}: {sql}"));
        statement
            .execute(params(values))
            .unwrap_or_else(|e| panic!("{e}: {sql}")) as u64
    }
}

fn statements(table: &str) -> Statements {
    Statements::new(Dialect::Sqlite, &TableName::new(table).unwrap())
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs random sequences with `sql_for(table)` on one SQLite file, a fresh
/// table per case; returns proptest's verdict.
fn random_sequences(
    runner: &mut TestRunner,
    sql_for: impl Fn(&str) -> Sql,
) -> Result<(), TestError<Vec<Op>>> {
    let dir = tempfile::tempdir().unwrap();
    let db = RefCell::new(Sqlite::open(&dir.path().join("model_vs.db")));
    let case = RefCell::new(0u32);
    runner.run(&ops(40), |ops| {
        let n = {
            let mut case = case.borrow_mut();
            *case += 1;
            *case
        };
        let mut db = db.borrow_mut();
        let mut c = Comparison::new(
            &mut *db,
            sql_for(&format!("mvs_case_{n}")),
            &format!("mvs_app_{n}"),
        );
        let verdict = c.run(&ops);
        c.drop_tables();
        verdict.map_err(proptest::test_runner::TestCaseError::fail)
    })
}

/// The model and SQLite agree on every outcome (who holds, the epoch,
/// accepted or rejected, the fence) of random sequences of acquires,
/// renews, releases and force-releases by three holders with current,
/// stale and future epochs, and time steps.
#[test]
fn model_and_sqlite_agree_on_random_operation_sequences() {
    let config = Config {
        cases: cases(256),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    if let Err(e) = random_sequences(&mut runner, |table| Sql::new(&statements(table))) {
        panic!("{e}");
    }
}

/// The comparison is sharp enough to catch a broken statement: each
/// mutant of the SQL (renew without its epoch condition, acquire that
/// never takes over a lapsed lease, fence without its expiry check,
/// release without its holder condition, force release that keeps the
/// epoch) makes the random sequences find a disagreement.
#[test]
fn the_comparison_catches_mutated_sql() {
    for (name, mutant) in SQL_MUTANTS {
        let config = Config {
            cases: 512,
            max_shrink_iters: 256,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
        match random_sequences(&mut runner, |table| mutant(Sql::new(&statements(table)))) {
            Err(TestError::Fail(why, ops)) => {
                eprintln!("{name}: caught by {} operations: {why}", ops.len())
            }
            other => panic!("{name}: not caught ({other:?})"),
        }
    }
}

/// Sixteen connections acquire a free row at once: exactly one wins, at
/// epoch 1, and every other sees that winner and epoch, as in the model.
#[test]
fn sixteen_concurrent_acquires_on_sqlite_elect_one_like_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("concurrent.db");
    let s = statements("mvs_concurrent");
    Sqlite::open(&path).batch(s.create_table());
    let ttl_ms = 60_000;
    let barrier = Barrier::new(16);
    let replies: Vec<(String, Reply)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (path, s, barrier) = (&path, &s, &barrier);
                scope.spawn(move || {
                    let holder = format!("node-{i:02}");
                    let mut db = Sqlite::open(path);
                    let values = model_vs::bind(s.acquire(), LEASES[0], &holder, ttl_ms, None);
                    // Prepare before the barrier so the statements race.
                    db.conn.prepare_cached(s.acquire().sql()).unwrap();
                    barrier.wait();
                    let rows = db.query(s.acquire().sql(), &values);
                    let me = HolderId::new(&holder).unwrap();
                    (
                        holder,
                        s.decode_reply(Operation::Acquire, &me, &rows).unwrap(),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    check_concurrent_acquires(&s, ttl_ms, &replies);
}

/// With a real ttl of 50 ms the lease lapses on SQLite's own clock: the
/// second holder is refused before, takes it at epoch 2 after, and the
/// first holder's renew, release and fenced write are then refused — the
/// model agreeing at every step.
#[test]
fn a_short_real_ttl_lapses_on_sqlite_like_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Sqlite::open(&dir.path().join("expiry.db"));
    for attempt in 0..5 {
        let s = statements(&format!("mvs_expiry_{attempt}"));
        let mut c = Comparison::new(&mut db, Sql::new(&s), &format!("mvs_expiry_app_{attempt}"));
        if check_real_expiry(&mut c, 0, 50) {
            return;
        }
        eprintln!("attempt {attempt}: too slow to see the lease before it lapsed; again");
    }
    panic!("five attempts too slow to observe a 50 ms lease");
}

/// The fence ANDed into a real `UPDATE app SET … WHERE id = ? AND <fence>`
/// changes the row exactly when the model's fence holds: for the holder at
/// its epoch while unexpired, never for a stale epoch, another holder, a
/// lapsed lease, a released or force-released one.
#[test]
fn the_fence_in_a_real_update_agrees_with_the_model_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Sqlite::open(&dir.path().join("fence.db"));
    let s = statements("mvs_fence");
    let mut c = Comparison::new(&mut db, Sql::new(&s), "mvs_fence_app");
    let lease = 0;
    let fence = |who, epoch| Op::Fence { who, lease, epoch };
    let script = [
        (fence(0, EpochPick::Raw(0)), Outcome::Fenced(false)),
        (
            Op::Acquire { who: 0, lease },
            Outcome::Reply(Ok(Reply::Acquired {
                epoch: Epoch::new(1),
            })),
        ),
        (fence(0, EpochPick::Current), Outcome::Fenced(true)),
        (fence(0, EpochPick::Offset(-1)), Outcome::Fenced(false)),
        (fence(0, EpochPick::Offset(1)), Outcome::Fenced(false)),
        (fence(1, EpochPick::Current), Outcome::Fenced(false)),
        (
            Op::Acquire { who: 1, lease: 1 },
            Outcome::Reply(Ok(Reply::Acquired {
                epoch: Epoch::new(1),
            })),
        ),
        (fence(1, EpochPick::Current), Outcome::Fenced(false)),
        (Op::Advance { steps: 9 }, Outcome::Advanced),
        (fence(0, EpochPick::Current), Outcome::Fenced(true)),
        (Op::Advance { steps: 1 }, Outcome::Advanced),
        (fence(0, EpochPick::Current), Outcome::Fenced(false)),
        (
            Op::Acquire { who: 0, lease },
            Outcome::Reply(Ok(Reply::Acquired {
                epoch: Epoch::new(2),
            })),
        ),
        (fence(0, EpochPick::Current), Outcome::Fenced(true)),
        (
            Op::Release {
                who: 0,
                lease,
                epoch: EpochPick::Current,
            },
            Outcome::Reply(Ok(Reply::Accepted)),
        ),
        (fence(0, EpochPick::Current), Outcome::Fenced(false)),
        (
            Op::Acquire { who: 2, lease },
            Outcome::Reply(Ok(Reply::Acquired {
                epoch: Epoch::new(3),
            })),
        ),
        (fence(2, EpochPick::Current), Outcome::Fenced(true)),
        (
            Op::ForceRelease { lease },
            Outcome::ForceReleased(Ok(Some(Epoch::new(4)))),
        ),
        (fence(2, EpochPick::Offset(-1)), Outcome::Fenced(false)),
        (fence(2, EpochPick::Current), Outcome::Fenced(false)),
    ];
    for (op, expected) in script {
        let (model, real) = c.step(op, model_vs::TTL_MS);
        assert_eq!(model, expected, "model, {op:?}");
        assert_eq!(real, expected, "SQLite, {op:?}");
    }
    let writes = c
        .real()
        .query("SELECT writes FROM mvs_fence_app WHERE id = 1", &[]);
    assert_eq!(
        writes,
        vec![vec![Cell::Int(4)]],
        "four fenced writes went through"
    );
}

/// Runs random batch sequences on one SQLite file, a fresh table per case,
/// the real side running the batch SQL `mutant` makes of the real one;
/// returns proptest's verdict.
fn random_batch_sequences(
    runner: &mut TestRunner,
    mutant: Option<BatchMutant>,
) -> Result<(), TestError<Vec<BatchOp>>> {
    random_batch_sequences_of(runner, mutant, false)
}

/// [`random_batch_sequences`], by liveness when `by_liveness`: the
/// statements of `Statements::renewing_by_liveness` against
/// `ModelDb::by_liveness_without_kill` (SQLite's one writer needs no
/// kill).
fn random_batch_sequences_of(
    runner: &mut TestRunner,
    mutant: Option<BatchMutant>,
    by_liveness: bool,
) -> Result<(), TestError<Vec<BatchOp>>> {
    random_batch_sequences_counting(runner, mutant, by_liveness, &RefCell::new((0, 0)))
}

/// [`random_batch_sequences_of`], adding to `linked` how many linked rows
/// the model's batch acquires took and its renewals confirmed.
fn random_batch_sequences_counting(
    runner: &mut TestRunner,
    mutant: Option<BatchMutant>,
    by_liveness: bool,
    linked: &RefCell<(u64, u64)>,
) -> Result<(), TestError<Vec<BatchOp>>> {
    let dir = tempfile::tempdir().unwrap();
    let db = RefCell::new(Sqlite::open(&dir.path().join("model_vs_batch.db")));
    let case = RefCell::new(0u32);
    runner.run(&batch_ops(30), |ops| {
        let n = {
            let mut case = case.borrow_mut();
            *case += 1;
            *case
        };
        let mut db = db.borrow_mut();
        let table = format!("mvs_batch_{n}");
        let mut s = statements(&table);
        let mut model = ModelDb::new();
        if by_liveness {
            s = s.renewing_by_liveness();
            model = ModelDb::by_liveness_without_kill();
        }
        let mut sql = BatchSql::new(&s);
        if let Some(mutant) = mutant {
            mutant(&mut sql, &table);
        }
        let mut c = Comparison::new(&mut *db, Sql::new(&s), &format!("mvs_batch_app_{n}"))
            .with_model(model);
        let verdict = c.run_batch_with(&ops, &sql);
        {
            let mut linked = linked.borrow_mut();
            linked.0 += c.linked_taken;
            linked.1 += c.linked_confirmed;
        }
        c.drop_tables();
        verdict.map_err(proptest::test_runner::TestCaseError::fail)
    })
}

/// The model's batch methods (the single-lease rules applied per item)
/// and SQLite's batch statements agree on every outcome, sorted by name,
/// and on the whole table after every step, over random sequences of
/// batch acquires, renews and releases (current, stale and future epochs),
/// surveys and time steps by three holders over four leases, one of them
/// a membership row.
#[test]
fn model_and_sqlite_agree_on_random_batch_sequences() {
    let config = Config {
        cases: cases(256),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    if let Err(e) = random_batch_sequences(&mut runner, None) {
        panic!("{e}");
    }
}

/// Renewing by liveness (DESIGN §9 "Renewal by liveness"), the model's set statements
/// (`ModelDb::by_liveness_without_kill`) and SQLite's
/// (`Statements::renewing_by_liveness`) agree on every outcome and on the
/// whole table after every step, over the same random sequences: two of
/// the holders have a membership row among the leases, so what they take
/// while it lives is linked to it, confirmed by their renewals, and taken
/// by others once it lapses.
#[test]
fn model_and_sqlite_agree_on_random_batch_sequences_by_liveness() {
    let config = Config {
        cases: cases(512),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let linked = RefCell::new((0, 0));
    if let Err(e) = random_batch_sequences_counting(&mut runner, None, true, &linked) {
        panic!("{e}");
    }
    assert_linked_rows_met(linked.into_inner());
}

/// The by-liveness comparison is sharp: a linked row taken while its
/// holder's liveness lives, and a renewal confirming rows linked to a
/// lapsed liveness, each make the random sequences find a disagreement.
#[test]
fn the_batch_comparison_by_liveness_catches_mutated_sql() {
    for (name, mutant) in LIVENESS_MUTANTS {
        let config = Config {
            cases: 2048,
            max_shrink_iters: 256,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
        match random_batch_sequences_of(&mut runner, Some(mutant), true) {
            Err(TestError::Fail(why, ops)) => {
                eprintln!("{name}: caught by {} operations: {why}", ops.len())
            }
            other => panic!("{name}: not caught ({other:?})"),
        }
    }
}

/// The batch comparison is sharp: each mutant of the batch SQL (renew or
/// release without the holder condition, renew without the epoch
/// condition, acquire that never takes over a lapsed lease, survey that
/// reports lapsed members) makes the random sequences find a disagreement.
#[test]
fn the_batch_comparison_catches_mutated_sql() {
    for (name, mutant) in BATCH_MUTANTS {
        let config = Config {
            cases: 512,
            max_shrink_iters: 256,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
        match random_batch_sequences(&mut runner, Some(mutant)) {
            Err(TestError::Fail(why, ops)) => {
                eprintln!("{name}: caught by {} operations: {why}", ops.len())
            }
            other => panic!("{name}: not caught ({other:?})"),
        }
    }
}

/// One batch renews 1,000 leases (and a membership row) on an in-memory
/// SQLite; the survey, another holder's renew and the batch release then
/// see exactly what they should. Names JSON must escape arrive intact.
#[test]
fn a_batch_of_a_thousand_leases_renews_in_one_statement_on_sqlite() {
    let mut db = Sqlite {
        conn: Connection::open_in_memory().unwrap(),
    };
    let mut c = Comparison::new(&mut db, Sql::new(&statements("mvs_many")), "mvs_many_app");
    let took = renew_many(&mut c, 1_000);
    eprintln!("SQLite: renewed 1,001 rows in one statement in {took:?}");
    c.drop_tables();
    let mut c = Comparison::new(&mut db, Sql::new(&statements("mvs_awk")), "mvs_awk_app");
    check_awkward_names(&mut c);
    c.drop_tables();
}

/// A planned handover's statements agree with the model step by step
/// (`check_hand_over_script`).
#[test]
fn a_planned_handover_agrees_with_the_model_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Sqlite::open(&dir.path().join("handover.db"));
    let s = statements("mvs_handover");
    let mut c = Comparison::new(&mut db, Sql::new(&s), "mvs_handover_app");
    check_hand_over_script(&mut c);
    c.drop_tables();
}

/// Renewing by liveness, the runbook after a restore keeps a linked row's
/// grace on SQLite (`check_runbook_keeps_a_linked_rows_grace`).
#[test]
fn the_runbook_keeps_a_linked_rows_grace_on_sqlite() {
    let mut db = Sqlite {
        conn: Connection::open_in_memory().unwrap(),
    };
    let s = statements("mvs_runbook").renewing_by_liveness();
    let mut c = Comparison::new(&mut db, Sql::new(&s), "mvs_runbook_app");
    check_runbook_keeps_a_linked_rows_grace(&mut c);
    c.drop_tables();
}
