//! The batch statements of a lease set against the model: random
//! sequences of batch acquires, renews, releases, surveys and time steps
//! by three holders over four leases (one of them a membership row) run on
//! [`ModelDb`]'s batch methods and on the real database executing
//! [`Statements::acquire_batch`] and friends; both sides' rows go through
//! the same decoders and the outcomes, sorted by name, must agree. After
//! every step the whole table (the status) must agree too.
//!
//! Time follows the scheme of the parent module: everything the model can
//! see is a multiple of [`STEP_MS`], except the survey's stale threshold,
//! which is half a step past one so that "expires within the threshold?"
//! has the same answer for a real `expires_in` a little below the model's.

use std::time::{Duration, Instant};

use picolease_core::sql::{batch_names, batch_pairs, BatchBindings, Statement, MEMBER_PREFIX};
use picolease_core::{BatchKind, BatchReply};

use super::*;

/// The leases of the batch sequences: three plain leases and two
/// membership rows, of two of the holders (each its liveness, when the
/// statements renew by liveness), one of them with a rank.
pub const BATCH_LEASES: [&str; 5] = [
    "alpha",
    "beta",
    "gamma",
    // MEMBER_PREFIX followed by a holder id.
    "picolease.member:node-c",
    // MEMBER_PREFIX, a holder id, a space and a rank.
    "picolease.member:web#00000a 5 v2",
];

/// One step of a batch sequence. Each list names distinct leases (indices
/// into [`BATCH_LEASES`]), in the order the batch lists them.
#[derive(Clone, Debug)]
pub enum BatchOp {
    /// `who` acquires every listed lease in one statement.
    Acquire { who: usize, leases: Vec<usize> },
    /// `who` renews every listed lease at the picked epoch.
    Renew {
        who: usize,
        items: Vec<(usize, EpochPick)>,
    },
    /// `who` releases every listed lease at the picked epoch.
    Release {
        who: usize,
        items: Vec<(usize, EpochPick)>,
    },
    /// The survey with a stale threshold of `stale_steps` steps and a half.
    Survey { stale_steps: u8 },
    /// `who` hands `lease` over to the node of `to` with the single-row
    /// statement, as a set does (DESIGN §3 "Planned handover"): the
    /// reservation then meets the batch acquires and the survey.
    HandOver {
        who: usize,
        lease: usize,
        epoch: EpochPick,
        to: usize,
    },
    /// An operator asks that `lease`'s term `epoch` go to the node of `to`
    /// (`None`: anyone): the batch renewal reads the request.
    RequestHandOver {
        lease: usize,
        epoch: EpochPick,
        to: Option<usize>,
    },
    /// An operator frees `lease` whoever holds it (`release --force`).
    ForceRelease { lease: usize },
    /// Advance time by `steps · STEP_MS`.
    Advance { steps: u8 },
}

/// Distinct lease indices in random order, possibly none.
fn leases() -> impl Strategy<Value = Vec<usize>> {
    prop::sample::subsequence((0..BATCH_LEASES.len()).collect::<Vec<_>>(), 0..=4).prop_shuffle()
}

fn items() -> impl Strategy<Value = Vec<(usize, EpochPick)>> {
    (
        leases(),
        prop::collection::vec(epoch_pick(), BATCH_LEASES.len()),
    )
        .prop_map(|(leases, picks)| leases.into_iter().zip(picks).collect())
}

/// A random batch operation: mostly acquires, renews and time steps.
pub fn batch_op() -> impl Strategy<Value = BatchOp> {
    let who = 0..HOLDERS.len();
    prop_oneof![
        4 => (who.clone(), leases()).prop_map(|(who, leases)| BatchOp::Acquire { who, leases }),
        4 => (who.clone(), items()).prop_map(|(who, items)| BatchOp::Renew { who, items }),
        2 => (who.clone(), items()).prop_map(|(who, items)| BatchOp::Release { who, items }),
        2 => (0u8..=12).prop_map(|stale_steps| BatchOp::Survey { stale_steps }),
        2 => (who.clone(), 0..3usize, epoch_pick(), who.clone())
            .prop_map(|(who, lease, epoch, to)| BatchOp::HandOver { who, lease, epoch, to }),
        1 => (0..3usize, epoch_pick(), prop::option::of(who.clone()))
            .prop_map(|(lease, epoch, to)| BatchOp::RequestHandOver { lease, epoch, to }),
        1 => (0..BATCH_LEASES.len()).prop_map(|lease| BatchOp::ForceRelease { lease }),
        // 0..=12 steps: often a little, sometimes past the ttl of 10 steps.
        4 => (0u8..=12).prop_map(|steps| BatchOp::Advance { steps }),
    ]
}

/// A random sequence of up to `max` batch operations.
pub fn batch_ops(max: usize) -> impl Strategy<Value = Vec<BatchOp>> {
    prop::collection::vec(batch_op(), 1..=max)
}

/// A renewed lease and the handover request its renewal read: `None`,
/// none; `Some(None)`, to anyone; `Some(Some(node))`, to that node.
pub type RenewedItem = (String, Option<Option<HolderId>>);

/// A decoded outcome of one batch operation, on one side, sorted by name.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchOutcome {
    Acquired(Result<Vec<(String, Reply)>, RowError>),
    /// Released: the names and epochs the statement matched.
    Matched(Result<Vec<(String, Epoch)>, RowError>),
    /// Renewed: the names matched and the handover requests read.
    Renewed(Result<Vec<RenewedItem>, RowError>),
    /// Force-released: the new epoch, if the row was there.
    ForceReleased(Result<Option<Epoch>, RowError>),
    /// Handed over (one lease, the single-row statement).
    HandedOver(Result<Reply, RowError>),
    /// A request written (no rows).
    Requested,
    Surveyed(Result<Vec<LeaseRow>, RowError>),
    Advanced,
}

impl BatchOutcome {
    fn sorted(mut self) -> Self {
        match &mut self {
            BatchOutcome::Acquired(Ok(v)) => v.sort_by(|a, b| a.0.cmp(&b.0)),
            BatchOutcome::Matched(Ok(v)) => v.sort(),
            BatchOutcome::Renewed(Ok(v)) => v.sort_by(|a, b| a.0.cmp(&b.0)),
            BatchOutcome::Surveyed(Ok(v)) => v.sort_by(|a, b| a.name.cmp(&b.name)),
            _ => {}
        }
        self
    }
}

/// A renewal's reply as one list: each renewed name with the request read
/// for it (`None`: none; `Some(None)`: to anyone).
fn renewed_and_asked(reply: BatchReply) -> Vec<RenewedItem> {
    match reply {
        BatchReply::Matched(names) => names.into_iter().map(|n| (n, None)).collect(),
        BatchReply::Renewed { renewed, asked } => renewed
            .into_iter()
            .map(|n| {
                let to = asked
                    .iter()
                    .find(|(a, _)| *a == n)
                    .map(|(_, to)| to.clone());
                (n, to)
            })
            .collect(),
        other => panic!("a renewal decodes as a renewal: {other:?}"),
    }
}

/// Whether two batch outcomes agree: exactly, except that time left may be
/// smaller on the real side by less than a step (as [`agree`] allows).
pub fn batch_agree(model: &BatchOutcome, real: &BatchOutcome) -> bool {
    match (model, real) {
        (BatchOutcome::Acquired(Ok(m)), BatchOutcome::Acquired(Ok(r))) => {
            m.len() == r.len()
                && m.iter().zip(r).all(|((n1, r1), (n2, r2))| {
                    n1 == n2
                        && agree(
                            &Outcome::Reply(Ok(r1.clone())),
                            &Outcome::Reply(Ok(r2.clone())),
                        )
                })
        }
        (BatchOutcome::Surveyed(Ok(m)), BatchOutcome::Surveyed(Ok(r))) => status_agree(m, r),
        _ => model == real,
    }
}

/// The values of a batch statement, as [`Statement::bind_batch`] gives them.
pub fn bind_batch(
    statement: &Statement,
    holder: &str,
    ttl_ms: i64,
    batch: &str,
    stale_ms: i64,
) -> Vec<Bound> {
    let b = BatchBindings {
        holder,
        ttl_millis: ttl_ms,
        batch,
        stale_millis: stale_ms,
    };
    statement.bind_batch(&b).map(Bound::from).collect()
}

/// Runs a batch statement (with its read-backs, in one transaction, on
/// MySQL and SQLite's by liveness) bound by [`Statement::bind_batch`];
/// returns its rows.
pub fn run_batch<R: RealDb + ?Sized>(
    real: &mut R,
    statement: &Statement,
    holder: &str,
    ttl_ms: i64,
    batch: &str,
    stale_ms: i64,
) -> Vec<Vec<Cell>> {
    run_batch_text(
        real,
        statement,
        &steps_of(statement),
        (holder, ttl_ms, batch, stale_ms),
    )
}

/// The SQL text of each statement `statement` stands for, in the order a
/// driver runs them ([`Statement::in_order`]).
fn steps_of(statement: &Statement) -> Vec<String> {
    let (steps, _) = statement.in_order();
    steps.iter().map(|step| step.sql().to_string()).collect()
}

/// [`run_batch`] with the texts `steps` in place of the statement's own
/// (a mutant's), bound as the statement's are: alone, or every step in
/// one transaction (the first [`Statement::committed_first`] each in one
/// of its own before it), the reply's rows returned and no row count
/// read.
fn run_batch_text<R: RealDb + ?Sized>(
    real: &mut R,
    statement: &Statement,
    steps: &[String],
    (holder, ttl_ms, batch, stale_ms): (&str, i64, &str, i64),
) -> Vec<Vec<Cell>> {
    let (real_steps, reply) = statement.in_order();
    assert_eq!(steps.len(), real_steps.len(), "a text for every step");
    let values: Vec<Vec<Bound>> = real_steps
        .iter()
        .map(|step| bind_batch(step, holder, ttl_ms, batch, stale_ms))
        .collect();
    if let ([alone], [values]) = (steps, &values[..]) {
        return real.query(alone, values);
    }
    let alone = statement.committed_first();
    let mut rows = Vec::new();
    for (at, (step, values)) in steps.iter().zip(&values).enumerate() {
        if at <= alone {
            real.begin();
        }
        if at == reply {
            rows = real.query(step, values);
        } else {
            real.execute(step, values);
        }
        if at < alone {
            real.commit();
        }
    }
    real.commit();
    rows
}

/// The SQL text of the batch statements a comparison runs: the real
/// statements', unless mutated (a mutant keeps every placeholder, so the
/// real statements' parameters still bind). Each is its steps in the order
/// they run ([`Statement::in_order`]): on MySQL a write and its read-back,
/// or a chain of them; on SQLite by liveness a write and its read.
#[derive(Clone, Debug)]
pub struct BatchSql {
    pub dialect: Dialect,
    pub acquire: Vec<String>,
    pub renew: Vec<String>,
    pub release: Vec<String>,
    pub survey: String,
}

impl BatchSql {
    pub fn new(s: &Statements) -> Self {
        BatchSql {
            dialect: s.dialect(),
            acquire: steps_of(s.acquire_batch()),
            renew: steps_of(s.renew_batch()),
            release: steps_of(s.release_batch()),
            survey: s.survey().sql().to_string(),
        }
    }

    /// `table.column` as the dialect's statements quote it.
    fn col(&self, table: &str, column: &str) -> String {
        qualified(self.dialect, table, column)
    }
}

/// Replaces every occurrence of `from` (at least one) in `sql` by `to`.
fn replace_all(sql: &mut String, from: &str, to: &str) {
    assert!(sql.contains(from), "{from:?} must occur in {sql}");
    *sql = sql.replace(from, to);
}

/// Replaces every occurrence of `from` (at least one, in some step) in
/// the steps of an operation by `to`: the mutant is of the whole
/// operation.
fn replace_op(steps: &mut [String], from: &str, to: &str) {
    assert!(
        steps.iter().any(|step| step.contains(from)),
        "{from:?} must occur in {steps:?}"
    );
    replace_any(steps, from, to);
}

/// Replaces every occurrence of `from`, if any, in the steps by `to`.
fn replace_any(steps: &mut [String], from: &str, to: &str) {
    for step in steps {
        *step = step.replace(from, to);
    }
}

/// A deliberately broken copy of the batch statements, given the table.
pub type BatchMutant = fn(&mut BatchSql, &str);

/// The batch SQL mutants the comparison must catch, by name.
pub const BATCH_MUTANTS: [(&str, BatchMutant); 5] = [
    ("batch renew without the holder condition", |sql, t| {
        let holder = sql.col(t, "holder");
        replace_op(
            &mut sql.renew,
            &format!("{holder} = "),
            &format!("{holder} IS NOT NULL AND '' <> "),
        );
        // PostgreSQL checks the holder again where it locks the rows.
        replace_any(
            &mut sql.renew,
            "\"locked\".\"holder\" = ",
            "\"locked\".\"holder\" IS NOT NULL AND '' <> ",
        );
    }),
    ("batch release without the holder condition", |sql, t| {
        let holder = sql.col(t, "holder");
        replace_op(
            &mut sql.release,
            &format!("{holder} = "),
            &format!("{holder} IS NOT NULL AND '' <> "),
        );
        // PostgreSQL checks the holder again where it locks the rows.
        replace_any(
            &mut sql.release,
            "\"locked\".\"holder\" = ",
            "\"locked\".\"holder\" IS NOT NULL AND '' <> ",
        );
    }),
    ("batch renew without the epoch condition", |sql, t| {
        // Each pair's epoch replaced by the row's own: every epoch matches.
        // (PostgreSQL joins the pairs inside the row-locking subquery,
        // where the row is `locked`; MySQL joins its JSON_TABLE `j`.)
        if sql.dialect == Dialect::Mysql {
            let row_epoch = sql.col(t, "epoch");
            replace_op(&mut sql.renew, "`j`.`epoch`", &row_epoch);
            return;
        }
        let write = &mut sql.renew[0];
        let row_epoch = if write.contains("\"locked\"") {
            "\"locked\".\"epoch\"".to_string()
        } else {
            format!("\"{t}\".\"epoch\"")
        };
        for epoch in [
            "json_extract(\"j\".\"value\", '$[1]')",
            "CAST(\"j\".\"value\" ->> 1 AS bigint)",
        ] {
            *write = write.replace(epoch, &row_epoch);
        }
        assert!(!write.contains("'$[1]'") && !write.contains("->> 1"));
    }),
    ("batch acquire without the expiry condition", |sql, t| {
        let expires = sql.col(t, "expires_at");
        replace_all(
            &mut sql.acquire[0],
            &format!("{expires} <= ("),
            &format!("{expires} - 1000000000 <= ("),
        );
        // PostgreSQL first reads the rows others hold, unexpired, to leave
        // them out of the upsert: that read loses its expiry check too.
        replace_any(
            &mut sql.acquire,
            "\"h\".\"expires_at\" > (",
            "\"h\".\"expires_at\" - 1000000000 > (",
        );
    }),
    ("survey reporting lapsed members", |sql, t| {
        let expires = sql.col(t, "expires_at");
        replace_all(
            &mut sql.survey,
            &format!("{expires} > ("),
            &format!("{expires} + 1000000000 > ("),
        )
    }),
];

/// Reports how many linked rows the model's batch acquires took from
/// another holder (`taken`) and its renewals confirmed, and fails the
/// test unless both happened: a by-liveness comparison that never met a
/// linked row would pass without testing the shape.
pub fn assert_linked_rows_met((taken, confirmed): (u64, u64)) {
    eprintln!("linked rows taken by another holder: {taken}, confirmed by a renewal: {confirmed}");
    assert!(
        taken > 0 && confirmed > 0,
        "the sequences took ({taken}) and confirmed ({confirmed}) linked rows"
    );
}

/// Whether `name` is a membership row, but not one of `holder`'s.
fn is_others_member(name: &str, holder: &str) -> bool {
    name.strip_prefix(MEMBER_PREFIX).is_some_and(|rest| {
        rest.strip_prefix(holder)
            .is_none_or(|rank| !(rank.is_empty() || rank.starts_with(' ')))
    })
}

/// The mutants of the statements renewing by liveness (DESIGN §9 "Renewal by liveness") the
/// by-liveness comparison must catch, by name: SQLite's (its acquire's
/// upsert and its renewal's read are the read-backs).
pub const LIVENESS_MUTANTS: [(&str, BatchMutant); 2] = [
    ("a linked row taken while its liveness lives", |sql, _| {
        // The upsert's takeable test: the effective expiry a long way
        // sooner than it is.
        assert_eq!(sql.acquire.len(), 2, "SQLite's extension, then its upsert");
        replace_all(&mut sql.acquire[1], "END) <= (", "END) - 1000000000 <= (");
    }),
    (
        "a renewal confirming rows linked to a lapsed liveness",
        |sql, _| {
            assert_eq!(sql.renew.len(), 2, "SQLite's write, then its read");
            replace_all(&mut sql.renew[1], "END) > (", "END) + 1000000000 > (");
        },
    ),
];

impl<R: RealDb> Comparison<'_, R> {
    /// Runs one batch operation on both sides, the real side with the
    /// real statements; returns both outcomes, sorted by name.
    pub fn batch_step(&mut self, op: &BatchOp) -> (BatchOutcome, BatchOutcome) {
        let sql = BatchSql::new(&self.sql.statements);
        self.batch_step_with(op, &sql)
    }

    /// Runs one batch operation on both sides, the real side with `sql`.
    pub fn batch_step_with(
        &mut self,
        op: &BatchOp,
        sql: &BatchSql,
    ) -> (BatchOutcome, BatchOutcome) {
        let s = self.sql.statements.clone();
        let now = self.model_now;
        let ttl_ms = TTL_MS;
        let (model, real) = match op {
            BatchOp::Acquire { who, leases } => {
                let holder = HOLDERS[*who];
                let me = HolderId::new(holder).unwrap();
                let by_liveness = self.model.is_by_liveness();
                let names: Vec<&str> = leases
                    .iter()
                    .map(|&i| BATCH_LEASES[i])
                    // By liveness a set acquires no other node's
                    // membership row (another's liveness, which the
                    // statement may end in passing).
                    .filter(|name| !by_liveness || !is_others_member(name, holder))
                    .collect();
                let linked_to_others: Vec<&str> = names
                    .iter()
                    .copied()
                    .filter(|name| {
                        self.model.row(name).is_some_and(|row| {
                            ModelDb::link(row).is_some() && row.holder.as_deref() != Some(holder)
                        })
                    })
                    .collect();
                let model = self.model.acquire_batch(&names, holder, ttl_ms, now);
                self.linked_taken += linked_to_others
                    .iter()
                    .filter(|name| {
                        self.model
                            .row(name)
                            .is_some_and(|row| row.holder.as_deref() == Some(holder))
                    })
                    .count() as u64;
                let json = batch_names(names.iter().copied());
                let real = run_batch_text(
                    self.real,
                    s.acquire_batch(),
                    &sql.acquire,
                    (holder, ttl_ms, &json, 0),
                );
                (
                    BatchOutcome::Acquired(s.decode_acquire_batch(&me, &model)),
                    BatchOutcome::Acquired(s.decode_acquire_batch(&me, &real)),
                )
            }
            BatchOp::HandOver {
                who,
                lease,
                epoch,
                to,
            } => {
                let lease = BATCH_LEASES[*lease];
                // Mostly by the row's holder, so that hand-overs happen and
                // their reservations meet the batch acquires.
                let current = self.model.row(lease).and_then(|r| r.holder.clone());
                let holder = HOLDERS
                    .iter()
                    .find(|h| Some(**h) == current.as_deref() && *who != 2)
                    .copied()
                    .unwrap_or(HOLDERS[*who]);
                let epoch = self.epoch(lease, *epoch);
                let (model, real) = self.hand_over_both(holder, lease, epoch, *to, ttl_ms);
                (
                    BatchOutcome::HandedOver(model),
                    BatchOutcome::HandedOver(real),
                )
            }
            BatchOp::RequestHandOver { lease, epoch, to } => {
                let lease = BATCH_LEASES[*lease];
                let epoch = self.epoch(lease, *epoch);
                self.request_hand_over_both(lease, epoch, *to, ttl_ms);
                (BatchOutcome::Requested, BatchOutcome::Requested)
            }
            BatchOp::Renew { who, items } | BatchOp::Release { who, items } => {
                let holder = HOLDERS[*who];
                let pairs: Vec<(&str, Epoch)> = items
                    .iter()
                    .map(|&(i, pick)| (BATCH_LEASES[i], self.epoch(BATCH_LEASES[i], pick)))
                    .collect();
                let json = batch_pairs(pairs.iter().copied());
                let linked: Vec<&str> = pairs
                    .iter()
                    .map(|(name, _)| *name)
                    .filter(|name| {
                        self.model
                            .row(name)
                            .is_some_and(|r| ModelDb::link(r).is_some())
                    })
                    .collect();
                let (model, statement, text) = if matches!(op, BatchOp::Renew { .. }) {
                    let rows = self.model.renew_batch(&pairs, holder, ttl_ms, now);
                    self.linked_confirmed += rows
                        .iter()
                        .filter(|row| matches!(&row[0], Cell::Text(name) if linked.contains(&name.as_str())))
                        .count() as u64;
                    (rows, s.renew_batch(), &sql.renew)
                } else {
                    (
                        self.model.release_batch(&pairs, holder, now),
                        s.release_batch(),
                        &sql.release,
                    )
                };
                let real = run_batch_text(self.real, statement, text, (holder, ttl_ms, &json, 0));
                if matches!(op, BatchOp::Renew { .. }) {
                    let me = HolderId::new(holder).unwrap();
                    let renewed = |rows: &[Vec<Cell>]| {
                        s.decode_batch_reply(BatchKind::Renew, &me, rows)
                            .map(renewed_and_asked)
                    };
                    (
                        BatchOutcome::Renewed(renewed(&model)),
                        BatchOutcome::Renewed(renewed(&real)),
                    )
                } else {
                    (
                        BatchOutcome::Matched(s.decode_batch_names(&model)),
                        BatchOutcome::Matched(s.decode_batch_names(&real)),
                    )
                }
            }
            BatchOp::Survey { stale_steps } => {
                let stale_ms = i64::from(*stale_steps) * STEP_MS + STEP_MS / 2;
                let model = self.model.survey(stale_ms, now);
                let values = bind_batch(s.survey(), "", 0, "[]", stale_ms);
                let real = self.real.query(&sql.survey, &values);
                (
                    BatchOutcome::Surveyed(s.decode_survey(&model)),
                    BatchOutcome::Surveyed(s.decode_survey(&real)),
                )
            }
            BatchOp::ForceRelease { lease } => {
                let lease = BATCH_LEASES[*lease];
                let model = self.model.force_release(lease, ttl_ms, now);
                let real = run_statement(self.real, s.force_release(), lease, "", ttl_ms, None);
                (
                    BatchOutcome::ForceReleased(s.decode_force_release(&model)),
                    BatchOutcome::ForceReleased(s.decode_force_release(&real)),
                )
            }
            BatchOp::Advance { steps } => {
                self.step(Op::Advance { steps: *steps }, ttl_ms);
                self.log.pop();
                (BatchOutcome::Advanced, BatchOutcome::Advanced)
            }
        };
        let (model, real) = (model.sorted(), real.sorted());
        self.log.push(format!(
            "{op:?}\n      model {model:?}\n      real  {real:?}"
        ));
        (model, real)
    }

    /// Runs a whole batch sequence; `Err` describes the first disagreement
    /// (of an outcome, or of the table afterwards) with the operations that
    /// led to it.
    pub fn run_batch(&mut self, ops: &[BatchOp]) -> Result<(), String> {
        let sql = BatchSql::new(&self.sql.statements);
        self.run_batch_with(ops, &sql)
    }

    /// [`Comparison::run_batch`] with the real side running `sql`.
    pub fn run_batch_with(&mut self, ops: &[BatchOp], sql: &BatchSql) -> Result<(), String> {
        for op in ops {
            let (model, real) = self.batch_step_with(op, sql);
            if !batch_agree(&model, &real) {
                return Err(self.disagreement("batch outcomes differ"));
            }
            let (model, real) = self.status();
            let same = match (&model, &real) {
                (Ok(m), Ok(r)) => status_agree(m, r),
                (m, r) => m == r,
            };
            if !same {
                self.log.push(format!(
                    "status\n      model {model:?}\n      real  {real:?}"
                ));
                return Err(self.disagreement("status differs"));
            }
        }
        Ok(())
    }
}

/// `holder` acquires `n` fresh leases in one batch, then renews all `n` in
/// one batch; both statements must cover every lease. Returns how long the
/// renew took.
pub fn renew_many<R: RealDb>(c: &mut Comparison<'_, R>, n: usize) -> Duration {
    let s = c.sql.statements.clone();
    let holder = HOLDERS[0];
    let me = HolderId::new(holder).unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("lease-{i:05}")).collect();
    let member = format!("{MEMBER_PREFIX}{holder}");
    let all: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .chain([member.as_str()])
        .collect();
    let json = batch_names(all.iter().copied());
    let rows = run_batch(c.real, s.acquire_batch(), holder, 60_000, &json, 0);
    let acquired = s.decode_acquire_batch(&me, &rows).unwrap();
    assert_eq!(acquired.len(), n + 1);
    assert!(acquired.iter().all(|(_, r)| *r
        == Reply::Acquired {
            epoch: Epoch::new(1)
        }));

    let pairs: Vec<(&str, Epoch)> = all.iter().map(|&name| (name, Epoch::new(1))).collect();
    let json = batch_pairs(pairs.iter().copied());
    let started = Instant::now();
    let rows = run_batch(c.real, s.renew_batch(), holder, 60_000, &json, 0);
    let took = started.elapsed();
    let renewed = s.decode_batch_reply(BatchKind::Renew, &me, &rows).unwrap();
    assert_eq!(
        renewed,
        BatchReply::Matched(all.iter().map(|n| n.to_string()).collect()),
        "every lease renewed, no request read"
    );

    // The survey: the live member, none of the freshly renewed leases.
    let values = bind_batch(s.survey(), "", 0, "[]", 1_000);
    let rows = c.real.query(s.survey().sql(), &values);
    let survey = s.decode_survey(&rows).unwrap();
    assert_eq!(
        survey.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        [member.as_str()]
    );

    // Another holder's renew of the same pairs matches nothing.
    let rows = run_batch(c.real, s.renew_batch(), HOLDERS[1], 60_000, &json, 0);
    assert!(rows.is_empty());

    // Released in one batch: every lease free, all reported by the survey.
    let rows = run_batch(c.real, s.release_batch(), holder, 0, &json, 0);
    assert_eq!(s.decode_batch_names(&rows).unwrap().len(), n + 1);
    let values = bind_batch(s.survey(), "", 0, "[]", 1_000);
    let rows = c.real.query(s.survey().sql(), &values);
    assert_eq!(s.decode_survey(&rows).unwrap().len(), n, "members leave");
    took
}

/// Names JSON must escape reach the database intact: each is acquired
/// under its exact name, and the row reads back with it.
pub fn check_awkward_names<R: RealDb>(c: &mut Comparison<'_, R>) {
    let s = c.sql.statements.clone();
    let holder = HOLDERS[2];
    let me = HolderId::new(holder).unwrap();
    let names = [
        "quote\"d",
        "back\\slash",
        "tab\tnew\nline\u{1}",
        "jöbs ✓ 𝄞",
        "picolease.member",
        "picolease.member:",
        "picolease.member;x",
    ];
    let json = batch_names(names);
    let rows = run_batch(c.real, s.acquire_batch(), holder, 60_000, &json, 0);
    let mut got: Vec<String> = s
        .decode_acquire_batch(&me, &rows)
        .unwrap()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    got.sort();
    let mut want: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    want.sort();
    assert_eq!(got, want);
    // Held and fresh: the survey reports only the live member row (the
    // empty id after the prefix is still in the member range).
    let values = bind_batch(s.survey(), "", 0, "[]", 1_000);
    let rows = c.real.query(s.survey().sql(), &values);
    let names: Vec<String> = s
        .decode_survey(&rows)
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["picolease.member:"]);
}

/// Renewing by liveness, the operators' runbook after a failover
/// (`Statements::after_failover`) keeps a linked row's grace: `holder`
/// takes its membership row and a lease linked to it, the runbook runs,
/// and the lease is then nobody's for a ttl (another holder's batch
/// acquire finds it held by nobody, and its expiry a ttl away), a plain
/// row. Reading the raw `expires_at`, the runbook left the row linked with
/// no holder, which every by-liveness reader took as lapsed at once.
pub fn check_runbook_keeps_a_linked_rows_grace<R: RealDb>(c: &mut Comparison<'_, R>) {
    let s = c.sql.statements.clone();
    let (holder, other) = (HOLDERS[0], HOLDERS[2]);
    let member = BATCH_LEASES[4];
    assert!(
        member.contains(holder),
        "{member} is {holder}'s membership row"
    );
    for names in [vec![member], vec!["alpha"]] {
        let json = batch_names(names.iter().copied());
        run_batch(c.real, s.acquire_batch(), holder, TTL_MS, &json, 0);
    }
    let linked = c.real.query(
        &format!(
            "SELECT expires_at FROM {} WHERE name = 'alpha'",
            ident(s.dialect(), &s.table().to_string())
        ),
        &[],
    );
    assert!(
        matches!(linked[..], [ref row] if matches!(row[0], Cell::Int(at) if at >= picolease_core::sql::LINK_BASE)),
        "alpha is linked: {linked:?}"
    );
    run_statement(c.real, s.after_failover(), "", "", TTL_MS, None);
    let json = batch_names(["alpha"]);
    let rows = run_batch(c.real, s.acquire_batch(), other, TTL_MS, &json, 0);
    let me = HolderId::new(other).unwrap();
    let reply = s.decode_acquire_batch(&me, &rows).unwrap();
    match &reply[..] {
        [(
            name,
            Reply::Held {
                holder: None,
                expires_in,
                ..
            },
        )] if name == "alpha" => assert!(
            expires_in.as_millis() as i64 > TTL_MS - 1_000,
            "alpha's grace is a ttl: {expires_in:?}"
        ),
        other => panic!("alpha is nobody's for a ttl after the runbook: {other:?}"),
    }
}
