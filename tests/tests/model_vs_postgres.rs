//! The model database ([`picolease_core::sim::ModelDb`]) against the real
//! PostgreSQL server, on the same operation sequences, running the real
//! `Statements` with bound parameters and decoding both sides with the same
//! decoders (DESIGN §6).
//!
//! The server is the one at 127.0.0.1:5432 (user `postgres`, database
//! `test`; `PICOLEASE_PG_URL` overrides). These tests **fail** when it is
//! unreachable: a skipped conformance test proves nothing. Every test uses
//! tables of its own, named with the process id, and drops them.
//!
//! `cargo test -p picolease-tests --test integration model_vs_postgres::`

use crate::model_vs;

use std::sync::Barrier;

use model_vs::batch::{
    assert_linked_rows_met, batch_ops, check_awkward_names,
    check_runbook_keeps_a_linked_rows_grace, renew_many, BatchMutant, BatchOp, BatchSql,
    BATCH_MUTANTS,
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
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls};

fn url() -> String {
    std::env::var("PICOLEASE_PG_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".into())
}

/// A blocking connection: tokio-postgres on a runtime of its own.
struct Postgres {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl Postgres {
    fn connect() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let url = url();
        let (client, connection) = runtime
            .block_on(tokio_postgres::connect(&url, NoTls))
            .unwrap_or_else(|e| {
                panic!("PostgreSQL must be reachable at {url:?} for these tests (they never skip): {e}")
            });
        // A current-thread runtime drives the connection whenever a query
        // is blocked on.
        runtime.spawn(async move {
            let _ = connection.await;
        });
        Postgres { runtime, client }
    }
}

fn params(values: &[Bound]) -> Vec<Box<dyn ToSql + Sync + Send>> {
    values
        .iter()
        .map(|v| -> Box<dyn ToSql + Sync + Send> {
            match v {
                Bound::Text(s) => Box::new(s.clone()),
                Bound::Int(n) => Box::new(*n),
            }
        })
        .collect()
}

impl RealDb for Postgres {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn batch(&mut self, sql: &str) {
        self.runtime
            .block_on(self.client.batch_execute(sql))
            .unwrap_or_else(|e| panic!("{e:?}: {sql}"));
    }

    fn query(&mut self, sql: &str, values: &[Bound]) -> Vec<Vec<Cell>> {
        let owned = params(values);
        let refs: Vec<&(dyn ToSql + Sync)> = owned.iter().map(|b| &**b as _).collect();
        let rows = self
            .runtime
            .block_on(self.client.query(sql, &refs))
            .unwrap_or_else(|e| panic!("{e:?}: {sql}"));
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        let ty = row.columns()[i].type_();
                        if *ty == Type::INT8 {
                            row.get::<_, Option<i64>>(i).map_or(Cell::Null, Cell::Int)
                        } else if *ty == Type::INT4 {
                            row.get::<_, Option<i32>>(i)
                                .map_or(Cell::Null, |n| Cell::Int(n.into()))
                        } else if *ty == Type::TEXT || *ty == Type::VARCHAR {
                            row.get::<_, Option<String>>(i)
                                .map_or(Cell::Null, Cell::Text)
                        } else {
                            Cell::Other(ty.name().to_string())
                        }
                    })
                    .collect()
            })
            .collect()
    }

    fn execute(&mut self, sql: &str, values: &[Bound]) -> u64 {
        let owned = params(values);
        let refs: Vec<&(dyn ToSql + Sync)> = owned.iter().map(|b| &**b as _).collect();
        self.runtime
            .block_on(self.client.execute(sql, &refs))
            .unwrap_or_else(|e| panic!("{e:?}: {sql}"))
    }
}

/// A table name private to this test and process.
fn table(test: &str) -> String {
    format!("mvp_{test}_{}", std::process::id())
}

fn statements(table: &str) -> Statements {
    Statements::new(Dialect::Postgres, &TableName::new(table).unwrap())
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs random sequences with `sql_for(table)` on one connection, fresh
/// tables per case; returns proptest's verdict.
fn random_sequences(
    runner: &mut TestRunner,
    test: &str,
    sql_for: impl Fn(&str) -> Sql,
) -> Result<(), TestError<Vec<Op>>> {
    let db = std::cell::RefCell::new(Postgres::connect());
    let lease_table = table(test);
    let app_table = table(&format!("{test}_app"));
    runner.run(&ops(40), |ops| {
        let mut db = db.borrow_mut();
        let mut c = Comparison::new(&mut *db, sql_for(&lease_table), &app_table);
        let verdict = c.run(&ops);
        c.drop_tables();
        verdict.map_err(proptest::test_runner::TestCaseError::fail)
    })
}

/// The model and PostgreSQL agree on every outcome (who holds, the epoch,
/// accepted or rejected, the fence) of random sequences of acquires,
/// renews, releases and force-releases by three holders with current,
/// stale and future epochs, and time steps.
#[test]
fn model_and_postgres_agree_on_random_operation_sequences() {
    let config = Config {
        cases: cases(64),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    if let Err(e) = random_sequences(&mut runner, "props", |t| Sql::new(&statements(t))) {
        panic!("{e}");
    }
}

/// The comparison is sharp enough on PostgreSQL too: each mutant of the
/// SQL — the renew without its epoch condition (` AND "…"."epoch" = $4`
/// stripped), the acquire that never takes over a lapsed lease, the fence
/// without its expiry check, the release without its holder condition, the
/// force release that keeps the epoch — makes the random sequences find a
/// disagreement.
#[test]
fn the_comparison_catches_mutated_sql_on_postgres() {
    for (name, mutant) in SQL_MUTANTS {
        let config = Config {
            cases: 256,
            max_shrink_iters: 64,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
        match random_sequences(&mut runner, "mutant", |t| mutant(Sql::new(&statements(t)))) {
            // Caught by a disagreement, not by a mutant that failed to apply.
            Err(TestError::Fail(why, ops)) if why.to_string().contains("disagree") => {
                eprintln!("{name}: caught by {} operations: {why}", ops.len())
            }
            other => panic!("{name}: not caught ({other:?})"),
        }
    }
}

/// Sixteen connections acquire a free row at once: exactly one wins, at
/// epoch 1, and every other sees that winner and epoch, as in the model.
#[test]
fn sixteen_concurrent_acquires_on_postgres_elect_one_like_the_model() {
    let name = table("concurrent");
    let s = statements(&name);
    let mut setup = Postgres::connect();
    setup.batch(&format!(
        "DROP TABLE IF EXISTS \"{name}\"; {}",
        s.create_table()
    ));
    let ttl_ms = 60_000;
    let barrier = Barrier::new(16);
    let replies: Vec<(String, Reply)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (s, barrier) = (&s, &barrier);
                scope.spawn(move || {
                    let holder = format!("node-{i:02}");
                    let mut db = Postgres::connect();
                    let values = model_vs::bind(s.acquire(), LEASES[0], &holder, ttl_ms, None);
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
    setup.batch(&format!("DROP TABLE IF EXISTS \"{name}\""));
    check_concurrent_acquires(&s, ttl_ms, &replies);
}

/// With a real ttl of 50 ms the lease lapses on PostgreSQL's own clock:
/// the second holder is refused before, takes it at epoch 2 after, and
/// the first holder's renew, release and fenced write are then refused —
/// the model agreeing at every step.
#[test]
fn a_short_real_ttl_lapses_on_postgres_like_the_model() {
    let mut db = Postgres::connect();
    for attempt in 0..5 {
        let s = statements(&table(&format!("expiry{attempt}")));
        let app = table(&format!("expiry{attempt}_app"));
        let mut c = Comparison::new(&mut db, Sql::new(&s), &app);
        let observed = check_real_expiry(&mut c, 0, 50);
        c.drop_tables();
        if observed {
            return;
        }
        eprintln!("attempt {attempt}: too slow to see the lease before it lapsed; again");
    }
    panic!("five attempts too slow to observe a 50 ms lease");
}

/// The fence, numbered after the application's own parameter
/// (`fence_from(2)`), ANDed into a real `UPDATE app SET … WHERE id = $1 AND
/// <fence>`, changes the row exactly when the model's fence holds.
#[test]
fn the_fence_in_a_real_update_agrees_with_the_model_on_postgres() {
    let mut db = Postgres::connect();
    let s = statements(&table("fence"));
    let app = table("fence_app");
    let mut c = Comparison::new(&mut db, Sql::new(&s), &app);
    let lease = 0;
    let fence = |who, epoch| Op::Fence { who, lease, epoch };
    let acquired = |e| {
        Outcome::Reply(Ok(Reply::Acquired {
            epoch: Epoch::new(e),
        }))
    };
    let script = [
        (fence(0, EpochPick::Raw(0)), Outcome::Fenced(false)),
        (Op::Acquire { who: 0, lease }, acquired(1)),
        (fence(0, EpochPick::Current), Outcome::Fenced(true)),
        (fence(0, EpochPick::Offset(-1)), Outcome::Fenced(false)),
        (fence(0, EpochPick::Offset(1)), Outcome::Fenced(false)),
        (fence(1, EpochPick::Current), Outcome::Fenced(false)),
        (Op::Acquire { who: 1, lease: 1 }, acquired(1)),
        (fence(1, EpochPick::Current), Outcome::Fenced(false)),
        (Op::Advance { steps: 9 }, Outcome::Advanced),
        (fence(0, EpochPick::Current), Outcome::Fenced(true)),
        (Op::Advance { steps: 1 }, Outcome::Advanced),
        (fence(0, EpochPick::Current), Outcome::Fenced(false)),
        (Op::Acquire { who: 0, lease }, acquired(2)),
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
        (Op::Acquire { who: 2, lease }, acquired(3)),
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
        assert_eq!(real, expected, "PostgreSQL, {op:?}");
    }
    let writes = c
        .real()
        .query(&format!("SELECT writes FROM \"{app}\" WHERE id = 1"), &[]);
    assert_eq!(
        writes,
        vec![vec![Cell::Int(4)]],
        "four fenced writes went through"
    );
    c.drop_tables();
}

/// Runs random batch sequences on one connection, fresh tables per case,
/// the real side running the batch SQL `mutant` makes of the real one;
/// returns proptest's verdict.
fn random_batch_sequences(
    runner: &mut TestRunner,
    test: &str,
    mutant: Option<BatchMutant>,
) -> Result<(), TestError<Vec<BatchOp>>> {
    random_batch_sequences_of(runner, test, mutant, None)
}

/// [`random_batch_sequences`]; by liveness when `linked` is given (the
/// statements of `Statements::renewing_by_liveness` against
/// `ModelDb::by_liveness`), adding to it how many linked rows the model's
/// batch acquires took and its renewals confirmed.
fn random_batch_sequences_of(
    runner: &mut TestRunner,
    test: &str,
    mutant: Option<BatchMutant>,
    linked: Option<&std::cell::RefCell<(u64, u64)>>,
) -> Result<(), TestError<Vec<BatchOp>>> {
    let db = std::cell::RefCell::new(Postgres::connect());
    let lease_table = table(test);
    let app_table = table(&format!("{test}_app"));
    runner.run(&batch_ops(30), |ops| {
        let mut db = db.borrow_mut();
        let mut s = statements(&lease_table);
        let mut model = ModelDb::new();
        if linked.is_some() {
            s = s.renewing_by_liveness();
            model = ModelDb::by_liveness();
        }
        let mut sql = BatchSql::new(&s);
        if let Some(mutant) = mutant {
            mutant(&mut sql, &lease_table);
        }
        let mut c = Comparison::new(&mut *db, Sql::new(&s), &app_table).with_model(model);
        let verdict = c.run_batch_with(&ops, &sql);
        if let Some(linked) = linked {
            let mut linked = linked.borrow_mut();
            linked.0 += c.linked_taken;
            linked.1 += c.linked_confirmed;
        }
        c.drop_tables();
        verdict.map_err(proptest::test_runner::TestCaseError::fail)
    })
}

/// The model's batch methods (the single-lease rules applied per item)
/// and PostgreSQL's batch statements agree on every outcome, sorted by
/// name, and on the whole table after every step, over random sequences
/// of batch acquires, renews and releases (current, stale and future
/// epochs), surveys and time steps by three holders over four leases, one
/// of them a membership row.
#[test]
fn model_and_postgres_agree_on_random_batch_sequences() {
    let config = Config {
        cases: cases(64),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    if let Err(e) = random_batch_sequences(&mut runner, "batch", None) {
        panic!("{e}");
    }
}

/// Renewing by liveness (DESIGN §9 "Renewal by liveness"), the model's set statements
/// (`ModelDb::by_liveness`, the kill of a lapsed liveness included) and
/// PostgreSQL's (`Statements::renewing_by_liveness`) agree on every
/// outcome and on the whole table after every step.
#[test]
fn model_and_postgres_agree_on_random_batch_sequences_by_liveness() {
    let config = Config {
        cases: cases(256),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let linked = std::cell::RefCell::new((0, 0));
    if let Err(e) = random_batch_sequences_of(&mut runner, "batch_live", None, Some(&linked)) {
        panic!("{e}");
    }
    assert_linked_rows_met(linked.into_inner());
}

/// The batch comparison is sharp on PostgreSQL too: each mutant of the
/// batch SQL (renew or release without the holder condition, renew
/// without the epoch condition, acquire that never takes over a lapsed
/// lease, survey that reports lapsed members) makes the random sequences
/// find a disagreement.
#[test]
fn the_batch_comparison_catches_mutated_sql_on_postgres() {
    for (name, mutant) in BATCH_MUTANTS {
        let config = Config {
            cases: 256,
            max_shrink_iters: 64,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
        match random_batch_sequences(&mut runner, "batch_mutant", Some(mutant)) {
            Err(TestError::Fail(why, ops)) => {
                eprintln!("{name}: caught by {} operations: {why}", ops.len())
            }
            other => panic!("{name}: not caught ({other:?})"),
        }
    }
}

/// One batch renews 1,000 leases (and a membership row) on PostgreSQL,
/// printing how long the statement took (no timing assertion); the survey,
/// another holder's renew and the batch release then see exactly what
/// they should. Names JSON must escape arrive intact.
#[test]
fn a_batch_of_a_thousand_leases_renews_in_one_statement_on_postgres() {
    let mut db = Postgres::connect();
    let mut c = Comparison::new(
        &mut db,
        Sql::new(&statements(&table("many"))),
        &table("many_app"),
    );
    let took = renew_many(&mut c, 1_000);
    eprintln!("PostgreSQL: renewed 1,001 rows in one statement in {took:?}");
    c.drop_tables();
    let mut c = Comparison::new(
        &mut db,
        Sql::new(&statements(&table("awkward"))),
        &table("awkward_app"),
    );
    check_awkward_names(&mut c);
    c.drop_tables();
}

/// A planned handover's statements agree with the model step by step
/// (`check_hand_over_script`).
#[test]
fn a_planned_handover_agrees_with_the_model_on_postgres() {
    let mut db = Postgres::connect();
    let s = statements(&table("handover"));
    let app = table("handover_app");
    let mut c = Comparison::new(&mut db, Sql::new(&s), &app);
    check_hand_over_script(&mut c);
    c.drop_tables();
}

/// Renewing by liveness, the runbook after a failover keeps a linked
/// row's grace on PostgreSQL (`check_runbook_keeps_a_linked_rows_grace`).
#[test]
fn the_runbook_keeps_a_linked_rows_grace_on_postgres() {
    let mut db = Postgres::connect();
    let s = statements(&table("runbook_live")).renewing_by_liveness();
    let mut c = Comparison::new(&mut db, Sql::new(&s), &table("runbook_live_app"));
    check_runbook_keeps_a_linked_rows_grace(&mut c);
    c.drop_tables();
}
