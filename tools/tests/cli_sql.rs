//! `picolease sql`: the statements for other languages, held to the letter
//! from outside — the JSON shape and keys, placeholders per dialect,
//! parameters in placeholder order, the dialect following `--db`, bad
//! values refused with exit 2 — and the printed SQL actually runs: the
//! create, acquire, renew, release and fence (in `SELECT <fence>`), and a
//! lease set's acquire, renew and release batches and survey, are executed
//! as printed on SQLite (rusqlite) and on the PostgreSQL server, binding
//! parameters in the printed order (the batch as JSON text).

use crate::support;

use std::collections::BTreeSet;
use std::process::Output;

use support::picolease;

use picolease::sql::{Dialect, Param, Statements};
use picolease::TableName;
use serde_json::Value;

/// Runs `picolease ARGS` (with `--json`), expects success and exactly one
/// JSON object on one line of stdout, and returns it.
fn json(args: &[&str]) -> Value {
    let out = picolease(args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout:?}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

const KEYS: [&str; 11] = [
    "create",
    "acquire",
    "renew",
    "release",
    "force_release",
    "status",
    "fence",
    "acquire_batch",
    "renew_batch",
    "release_batch",
    "survey",
];

/// A lease set's statements, printed after the single lease's.
const BATCH_KEYS: [&str; 4] = ["acquire_batch", "renew_batch", "release_batch", "survey"];

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn params(statement: &Value) -> Vec<String> {
    statement["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

fn sql(statement: &Value) -> &str {
    statement["sql"].as_str().unwrap()
}

/// The `$n` placeholders of `sql`, in order of appearance.
fn dollar_placeholders(sql: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let bytes = sql.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            let start = i + 1;
            i += 1;
            while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            found.push(sql[start..i].parse().unwrap());
        } else {
            i += 1;
        }
    }
    found
}

fn param_name(param: Param) -> &'static str {
    match param {
        Param::Lease => "lease",
        Param::Holder => "holder",
        Param::Epoch => "epoch",
        Param::TtlMillis => "ttl_ms",
        Param::Batch => "batch",
        Param::StaleMillis => "stale_ms",
        Param::Successor => "successor",
        Param::ReservationMillis => "reservation_ms",
        Param::Candidacy => "candidacy",
    }
}

#[test]
fn json_has_exactly_the_documented_shape() {
    for dialect in ["sqlite", "postgres"] {
        let v = json(&["sql", "--dialect", dialect, "--json"]);
        assert_eq!(keys(&v), set(&["dialect", "table", "statements"]), "{v}");
        assert_eq!(v["dialect"], dialect);
        assert_eq!(v["table"], "picolease_leases");
        assert_eq!(keys(&v["statements"]), set(&KEYS));
        for key in KEYS {
            let s = &v["statements"][key];
            assert_eq!(keys(s), set(&["sql", "params"]), "{key}: {s}");
            assert!(!sql(s).is_empty());
            for p in params(s) {
                assert!(
                    ["lease", "holder", "epoch", "ttl_ms", "batch", "stale_ms"]
                        .contains(&p.as_str()),
                    "{key}: unknown parameter {p}"
                );
            }
        }
        let st = &v["statements"];
        assert_eq!(params(&st["create"]), Vec::<String>::new());
        assert_eq!(params(&st["status"]), Vec::<String>::new());
        assert_eq!(params(&st["fence"]), ["lease", "holder", "epoch"]);
        assert_eq!(params(&st["acquire"]), ["lease", "holder", "ttl_ms"]);
        // PostgreSQL and MySQL adopt a row another server incarnation
        // wrote for a ttl (DESIGN §3 "Failover"); SQLite has no
        // incarnation.
        let force = match dialect {
            "sqlite" => &["lease"][..],
            _ => &["ttl_ms", "lease"][..],
        };
        assert_eq!(params(&st["force_release"]), force);
        assert!(sql(&st["fence"]).starts_with("EXISTS"));
        assert_eq!(params(&st["acquire_batch"]), ["holder", "ttl_ms", "batch"]);
        assert_eq!(params(&st["renew_batch"]), ["ttl_ms", "holder", "batch"]);
        assert_eq!(params(&st["release_batch"]), ["holder", "batch"]);
        assert_eq!(params(&st["survey"]), ["stale_ms"]);
        assert_eq!(
            sql(&st["release_batch"]).contains("pg_notify("),
            dialect == "postgres",
            "{dialect}: {}",
            sql(&st["release_batch"])
        );
    }
    let v = json(&[
        "--table",
        "app.leases",
        "sql",
        "--dialect",
        "postgres",
        "--json",
    ]);
    assert_eq!(v["table"], "app.leases");
    assert!(sql(&v["statements"]["acquire"]).contains("\"app\".\"leases\""));
}

/// `$1…$n` on PostgreSQL, each once and in order, one per parameter (the
/// batch statements use each of `$1…$n`, some more than once and not in
/// order: a parameter is named once per number); `?` on SQLite; and the
/// order and the text are the library's own.
#[test]
fn placeholders_follow_the_dialect_and_params_follow_the_placeholders() {
    for (name, dialect) in [("sqlite", Dialect::Sqlite), ("postgres", Dialect::Postgres)] {
        let v = json(&["sql", "--dialect", name, "--json"]);
        let lib = Statements::new(dialect, &TableName::default());
        for key in KEYS {
            let s = &v["statements"][key];
            let text = sql(s);
            let n = params(s).len();
            match dialect {
                Dialect::Postgres if BATCH_KEYS.contains(&key) => {
                    let used: BTreeSet<usize> = dollar_placeholders(text).into_iter().collect();
                    assert_eq!(used, (1..=n).collect(), "{key}: {text}");
                    assert!(!text.contains('?'), "{key}: {text}");
                }
                Dialect::Postgres => {
                    assert_eq!(
                        dollar_placeholders(text),
                        (1..=n).collect::<Vec<_>>(),
                        "{key}: {text}"
                    );
                    assert!(!text.contains('?'), "{key}: {text}");
                }
                _ => {
                    assert_eq!(text.matches('?').count(), n, "{key}: {text}");
                    assert!(dollar_placeholders(text).is_empty(), "{key}: {text}");
                }
            }
        }
        for (key, statement) in [
            ("acquire", lib.acquire()),
            ("renew", lib.renew()),
            ("release", lib.release()),
            ("force_release", lib.force_release()),
            ("status", lib.status()),
            ("fence", lib.fence()),
            ("acquire_batch", lib.acquire_batch()),
            ("renew_batch", lib.renew_batch()),
            ("release_batch", lib.release_batch()),
            ("survey", lib.survey()),
        ] {
            let expected: Vec<_> = statement.params().iter().map(|p| param_name(*p)).collect();
            assert_eq!(params(&v["statements"][key]), expected, "{name} {key}");
            assert_eq!(sql(&v["statements"][key]), statement.sql(), "{name} {key}");
        }
        let create = sql(&v["statements"]["create"]);
        assert!(create.starts_with(lib.create_table()));
        match lib.create_index() {
            Some(index) => assert!(create.ends_with(index), "{create}"),
            None => assert_eq!(create, lib.create_table()),
        }
    }
}

#[test]
fn the_dialect_follows_db_unless_given() {
    for (db, expected) in [
        ("sqlite://x.db", "sqlite"),
        ("sqlite::memory:", "sqlite"),
        ("postgres://u@h/db", "postgres"),
        ("postgresql://u:pw@h:5433/db", "postgres"),
    ] {
        let v = json(&["--db", db, "sql", "--json"]);
        assert_eq!(v["dialect"], expected, "--db {db}");
    }
    // The default --db is sqlite://picolease.db.
    assert_eq!(json(&["sql", "--json"])["dialect"], "sqlite");
    // The flag wins over the URL.
    let v = json(&[
        "--db",
        "postgres://u@h/db",
        "sql",
        "--dialect",
        "sqlite",
        "--json",
    ]);
    assert_eq!(v["dialect"], "sqlite");
}

#[test]
fn plain_output_names_the_parameters_of_each_statement_in_order() {
    let out = picolease(&["sql", "--dialect", "postgres"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("-- parameters: $1 ttl_ms, $2 lease, $3 holder, $4 epoch\nUPDATE"),
        "{text}"
    );
    assert!(text.contains("-- parameters: $1 lease, $2 holder, $3 epoch\nEXISTS("));
    assert!(text.contains("FOR KEY SHARE)"));
    let out = picolease(&["sql", "--dialect", "sqlite"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("-- parameters (?, in order): lease, holder, ttl_ms\nINSERT"),
        "{text}"
    );
    for key in KEYS {
        assert!(text.contains(&format!("\n-- {key}: ")), "{key}: {text}");
    }
}

/// The batch statements come after the single lease's, each with its
/// description (what the batch parameter holds) and its parameters.
#[test]
fn plain_output_prints_the_batch_statements_last_with_their_parameters() {
    for (dialect, expected) in [
        (
            "postgres",
            [
                "-- parameters: $1 holder, $2 ttl_ms, $3 batch\nWITH",
                "-- parameters: $1 ttl_ms, $2 holder, $3 batch\nUPDATE",
                "-- parameters: $1 holder, $2 batch\nWITH released AS (UPDATE",
                "-- parameters: $1 stale_ms\nSELECT",
            ],
        ),
        (
            "sqlite",
            [
                "-- parameters (?, in order): holder, ttl_ms, batch\nINSERT",
                "-- parameters (?, in order): ttl_ms, holder, batch\nUPDATE",
                "-- parameters (?, in order): holder, batch\nUPDATE",
                "-- parameters (?, in order): stale_ms\nSELECT",
            ],
        ),
    ] {
        let out = picolease(&["sql", "--dialect", dialect]);
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        // Every statement once, in the documented order.
        let at: Vec<usize> = KEYS
            .iter()
            .map(|key| {
                let header = format!("\n-- {key}: ");
                assert_eq!(text.matches(&header).count(), 1, "{key}: {text}");
                text.find(&header).unwrap()
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{dialect}: {text}");
        for (key, params) in BATCH_KEYS.iter().zip(expected) {
            let section = &text[text.find(&format!("\n-- {key}: ")).unwrap()..];
            let description = section[1..].lines().next().unwrap();
            let rest = &section[1 + description.len()..];
            assert!(rest.starts_with(&format!("\n{params}")), "{key}: {section}");
            assert!(description.contains("lease sets: "), "{description}");
        }
        let description = |key: &str| {
            let at = text.find(&format!("\n-- {key}: ")).unwrap();
            text[at + 1..].lines().next().unwrap().to_string()
        };
        assert!(
            description("acquire_batch").contains(r#"["a","b"]"#),
            "{text}"
        );
        for key in ["renew_batch", "release_batch"] {
            assert!(description(key).contains("[name, epoch] pairs"), "{text}");
        }
        assert!(description("renew_batch").contains(r#"[["a",3],["b",5]]"#));
        assert!(description("survey").contains("stale_ms"));
        assert!(description("survey").contains(picolease::sql::MEMBER_PREFIX));
    }
}

fn assert_usage_error(out: &Output, names: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(out.stdout.is_empty());
    for name in names {
        assert!(stderr.contains(name), "{name:?} not in {stderr:?}");
    }
}

#[test]
fn bad_values_exit_2_with_one_line_naming_them() {
    assert_usage_error(&picolease(&["sql", "--dialect", "oracle"]), &["oracle"]);
    assert_usage_error(
        &picolease(&["sql", "--dialect", "Postgres", "--json"]),
        &["Postgres"],
    );
    assert_usage_error(&picolease(&["--table", "bad name", "sql"]), &["bad name"]);
    assert_usage_error(
        &picolease(&["--table", "a.b.c", "sql", "--dialect", "sqlite"]),
        &["a.b.c"],
    );
    let out = picolease(&["--db", "oracle://u:secret@h/db", "sql"]);
    assert_usage_error(&out, &["oracle://"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("secret"));
}

#[test]
fn it_touches_no_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("never.db");
    let db = format!("sqlite://{}", path.display());
    json(&["--db", &db, "sql", "--json"]);
    assert!(!path.exists(), "picolease sql created {}", path.display());
    // An unreachable server is never contacted.
    json(&["--db", "postgres://u@127.0.0.1:1/nothing", "sql", "--json"]);
}

/// The values to bind for `names`, in the printed order.
fn sqlite_values(names: &[String], holder: &str, epoch: i64) -> Vec<rusqlite::types::Value> {
    names
        .iter()
        .map(|name| match name.as_str() {
            "lease" => rusqlite::types::Value::Text("job".into()),
            "holder" => rusqlite::types::Value::Text(holder.into()),
            "epoch" => rusqlite::types::Value::Integer(epoch),
            "ttl_ms" => rusqlite::types::Value::Integer(10_000),
            other => panic!("unknown parameter {other}"),
        })
        .collect()
}

#[test]
fn the_printed_sqlite_statements_run() {
    use rusqlite::params_from_iter;

    let v = json(&[
        "sql",
        "--dialect",
        "sqlite",
        "--table",
        "cli_sql_leases",
        "--json",
    ]);
    let st = &v["statements"];
    let dir = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("sql.db")).unwrap();
    conn.execute_batch(sql(&st["create"])).unwrap();
    conn.execute_batch(sql(&st["create"])).unwrap();

    let acquire = |holder: &str| -> (String, i64, i64) {
        conn.query_row(
            sql(&st["acquire"]),
            params_from_iter(sqlite_values(&params(&st["acquire"]), holder, 0)),
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    };
    let fence = |holder: &str, epoch: i64| -> bool {
        conn.query_row(
            &format!("SELECT {}", sql(&st["fence"])),
            params_from_iter(sqlite_values(&params(&st["fence"]), holder, epoch)),
            |r| r.get(0),
        )
        .unwrap()
    };
    let (holder, epoch, left) = acquire("h1");
    assert_eq!((holder.as_str(), epoch), ("h1", 1));
    assert!(left > 0 && left <= 10_000, "{left}");
    assert_eq!(acquire("h2").0, "h1", "held: h2 learns the holder");
    assert!(fence("h1", 1));
    assert!(!fence("h1", 2));
    assert!(!fence("h2", 1));
    let renewed: Vec<i64> = conn
        .prepare(sql(&st["renew"]))
        .unwrap()
        .query_map(
            params_from_iter(sqlite_values(&params(&st["renew"]), "h1", 1)),
            |r| r.get(0),
        )
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(renewed, [1]);
    let released: Vec<i64> = conn
        .prepare(sql(&st["release"]))
        .unwrap()
        .query_map(
            params_from_iter(sqlite_values(&params(&st["release"]), "h1", 1)),
            |r| r.get(0),
        )
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(released, [1]);
    assert!(!fence("h1", 1), "released: the fence no longer holds");
    assert_eq!(acquire("h2").1, 2);
    let forced: i64 = conn
        .query_row(
            sql(&st["force_release"]),
            params_from_iter(sqlite_values(&params(&st["force_release"]), "", 0)),
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(forced, 3);
    let status: Vec<(String, Option<String>, i64)> = conn
        .prepare(sql(&st["status"]))
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(status, [("job".to_string(), None, 3)]);
}

/// The values to bind for `names`, in the printed order, as PostgreSQL
/// parameters.
fn pg_values(
    names: &[String],
    holder: &str,
    epoch: i64,
) -> Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> {
    names
        .iter()
        .map(
            |name| -> Box<dyn tokio_postgres::types::ToSql + Sync + Send> {
                match name.as_str() {
                    "lease" => Box::new("job".to_string()),
                    "holder" => Box::new(holder.to_string()),
                    "epoch" => Box::new(epoch),
                    "ttl_ms" => Box::new(10_000i64),
                    other => panic!("unknown parameter {other}"),
                }
            },
        )
        .collect()
}

#[tokio::test]
async fn the_printed_postgres_statements_run_on_the_server() {
    let table = format!("cli_sql_{}", std::process::id());
    let v = json(&["sql", "--dialect", "postgres", "--table", &table, "--json"]);
    let st = &v["statements"];
    let (client, connection) = tokio_postgres::connect(
        "host=127.0.0.1 port=5432 user=postgres dbname=test",
        tokio_postgres::NoTls,
    )
    .await
    .expect("the PostgreSQL server at 127.0.0.1:5432 must be running (these tests never skip)");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
        .await
        .unwrap();
    // The create batch runs, twice (idempotent), and makes the index.
    client.batch_execute(sql(&st["create"])).await.unwrap();
    client.batch_execute(sql(&st["create"])).await.unwrap();
    let indexed: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE tablename = $1 AND indexname = $2",
            &[&table, &format!("{table}_fence")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(indexed, 1);

    let run = |key: &'static str, holder: &'static str, epoch: i64| {
        let client = &client;
        let text = sql(&st[key]).to_string();
        let names = params(&st[key]);
        async move {
            let owned = pg_values(&names, holder, epoch);
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                owned.iter().map(|b| &**b as _).collect();
            client.query(text.as_str(), &refs).await.unwrap()
        }
    };
    let fence = |holder: &'static str, epoch: i64| {
        let client = &client;
        let text = format!("SELECT {}", sql(&st["fence"]));
        let names = params(&st["fence"]);
        async move {
            let owned = pg_values(&names, holder, epoch);
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                owned.iter().map(|b| &**b as _).collect();
            client
                .query_one(text.as_str(), &refs)
                .await
                .unwrap()
                .get::<_, bool>(0)
        }
    };

    let rows = run("acquire", "h1", 0).await;
    assert_eq!(rows[0].get::<_, Option<String>>(0).as_deref(), Some("h1"));
    assert_eq!(rows[0].get::<_, i64>(1), 1);
    let rows = run("acquire", "h2", 0).await;
    assert_eq!(rows[0].get::<_, Option<String>>(0).as_deref(), Some("h1"));
    assert!(fence("h1", 1).await);
    assert!(!fence("h1", 2).await);
    assert!(!fence("h2", 1).await);
    assert_eq!(run("renew", "h1", 1).await.len(), 1);
    assert_eq!(run("renew", "h2", 1).await.len(), 0);
    assert_eq!(run("release", "h1", 1).await[0].get::<_, i64>(0), 1);
    assert!(!fence("h1", 1).await);
    assert_eq!(run("acquire", "h2", 0).await[0].get::<_, i64>(1), 2);
    assert_eq!(run("force_release", "", 0).await[0].get::<_, i64>(0), 3);
    let status = run("status", "", 0).await;
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].get::<_, i64>(2), 3);

    client
        .batch_execute(&format!("DROP TABLE \"{table}\""))
        .await
        .unwrap();
}

/// A lease set's values for `names`, in the printed order: the holder, a
/// ttl of 10 s, the batch (JSON text) and the survey's stale threshold.
#[derive(Clone, Copy)]
struct BatchArgs<'a> {
    holder: &'a str,
    batch: &'a str,
    stale_ms: i64,
}

impl BatchArgs<'_> {
    fn sqlite(&self, names: &[String]) -> Vec<rusqlite::types::Value> {
        use rusqlite::types::Value::{Integer, Text};
        names
            .iter()
            .map(|name| match name.as_str() {
                "holder" => Text(self.holder.into()),
                "ttl_ms" => Integer(10_000),
                "batch" => Text(self.batch.into()),
                "stale_ms" => Integer(self.stale_ms),
                other => panic!("a batch statement with parameter {other}"),
            })
            .collect()
    }

    fn postgres(
        &self,
        names: &[String],
    ) -> Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> {
        names
            .iter()
            .map(
                |name| -> Box<dyn tokio_postgres::types::ToSql + Sync + Send> {
                    match name.as_str() {
                        "holder" => Box::new(self.holder.to_string()),
                        "ttl_ms" => Box::new(10_000i64),
                        // Bound as text: the statement casts it to JSON.
                        "batch" => Box::new(self.batch.to_string()),
                        "stale_ms" => Box::new(self.stale_ms),
                        other => panic!("a batch statement with parameter {other}"),
                    }
                },
            )
            .collect()
    }
}

fn names_json(names: &[&str]) -> String {
    serde_json::json!(names).to_string()
}

/// `[[name, epoch], …]`, as another language would write it.
fn pairs_json(pairs: &[(String, i64)]) -> String {
    serde_json::json!(pairs).to_string()
}

/// A row of the acquire batch or the survey: name, holder, epoch.
type LeaseRow = (String, Option<String>, i64);

const MEMBER: &str = "picolease.member:h1";

/// The lease-set round both databases run, on `run(key, args)` returning
/// the rows' first three columns (`name, epoch` rows get `None` holders):
/// three leases acquired, held against another node, renewed, surveyed
/// with the membership row, released, and taken by the other node.
fn batch_round(mut run: impl FnMut(&str, BatchArgs<'_>) -> Vec<LeaseRow>) {
    fn args<'a>(holder: &'a str, batch: &'a str, stale_ms: i64) -> BatchArgs<'a> {
        BatchArgs {
            holder,
            batch,
            stale_ms,
        }
    }
    let sorted = |mut rows: Vec<LeaseRow>| {
        rows.sort();
        rows
    };
    let abc = names_json(&["a", "b", "c"]);
    let held_by = |holder: &str, epoch| -> Vec<LeaseRow> {
        ["a", "b", "c"]
            .iter()
            .map(|n| (n.to_string(), Some(holder.to_string()), epoch))
            .collect()
    };

    let acquired = sorted(run("acquire_batch", args("h1", &abc, 0)));
    assert_eq!(acquired, held_by("h1", 1), "h1 takes the three free leases");
    let other = sorted(run("acquire_batch", args("h2", &abc, 0)));
    assert_eq!(
        other,
        held_by("h1", 1),
        "held: h2 learns the holder of each"
    );

    let pairs: Vec<(String, i64)> = acquired.iter().map(|(n, _, e)| (n.clone(), *e)).collect();
    let pairs = pairs_json(&pairs);
    let renewed = sorted(run("renew_batch", args("h1", &pairs, 0)));
    assert_eq!(renewed.len(), 3, "{renewed:?}");
    assert!(renewed.iter().all(|(_, _, epoch)| *epoch == 1));
    assert!(run("renew_batch", args("h2", &pairs, 0)).is_empty());
    let stale_epoch = pairs_json(&[("a".into(), 2)]);
    assert!(run("renew_batch", args("h1", &stale_epoch, 0)).is_empty());

    // Healthy held rows are not surveyed; within the threshold they are.
    assert!(run("survey", args("", "", 0)).is_empty());
    assert_eq!(run("survey", args("", "", 60_000)).len(), 3);
    // A live membership row always is.
    let member = run("acquire_batch", args("h1", &names_json(&[MEMBER]), 0));
    assert_eq!(member, [(MEMBER.into(), Some("h1".into()), 1)]);
    assert_eq!(
        run("survey", args("", "", 0)),
        [(MEMBER.into(), Some("h1".into()), 1)]
    );

    let released = sorted(run("release_batch", args("h1", &pairs, 0)));
    assert_eq!(released.len(), 3, "{released:?}");
    assert!(run("release_batch", args("h1", &pairs, 0)).is_empty());
    let mut after: Vec<LeaseRow> = ["a", "b", "c"]
        .iter()
        .map(|n| (n.to_string(), None, 1))
        .collect();
    after.push((MEMBER.into(), Some("h1".into()), 1));
    assert_eq!(run("survey", args("", "", 0)), after, "free rows, by name");
    let taken = sorted(run("acquire_batch", args("h2", &abc, 0)));
    assert_eq!(taken, held_by("h2", 2), "free: h2 takes them, epoch + 1");
}

#[test]
fn the_printed_sqlite_batch_statements_run() {
    use rusqlite::params_from_iter;
    use rusqlite::types::Value as V;

    let v = json(&[
        "sql",
        "--dialect",
        "sqlite",
        "--table",
        "cli_sql_batch",
        "--json",
    ]);
    let st = &v["statements"];
    let dir = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("batch.db")).unwrap();
    conn.execute_batch(sql(&st["create"])).unwrap();
    batch_round(|key, args| {
        let mut statement = conn.prepare(sql(&st[key])).unwrap();
        let values = args.sqlite(&params(&st[key]));
        let rows: Vec<Vec<V>> = statement
            .query_map(params_from_iter(values), |r| {
                (0..r.as_ref().column_count())
                    .map(|i| r.get::<_, V>(i))
                    .collect()
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        rows.into_iter()
            .map(|row| {
                let text = |v: &V| match v {
                    V::Text(s) => Some(s.clone()),
                    V::Null => None,
                    other => panic!("{key}: text expected, got {other:?}"),
                };
                let int = |v: &V| match v {
                    V::Integer(i) => *i,
                    other => panic!("{key}: an integer expected, got {other:?}"),
                };
                match row.len() {
                    // name, epoch (release batch), and the handover
                    // request (renew batch)
                    2 | 3 => (text(&row[0]).unwrap(), None, int(&row[1])),
                    // name, holder, epoch, expires_in_ms
                    4 => (text(&row[0]).unwrap(), text(&row[1]), int(&row[2])),
                    n => panic!("{key}: {n} columns"),
                }
            })
            .collect()
    });
}

const PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Drops the test's table at the end, also when the test failed.
struct DropTable(String);

impl Drop for DropTable {
    fn drop(&mut self) {
        support::pg::sql(PG_URL, &format!("DROP TABLE IF EXISTS \"{}\"", self.0));
    }
}

#[test]
fn the_printed_postgres_batch_statements_run_on_the_server() {
    let table = format!("cli_sql_batch_{}", std::process::id());
    let v = json(&["sql", "--dialect", "postgres", "--table", &table, "--json"]);
    let st = &v["statements"];
    support::pg::sql(PG_URL, &format!("DROP TABLE IF EXISTS \"{table}\""));
    let _drop = DropTable(table.clone());
    support::pg::sql(PG_URL, sql(&st["create"]));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(PG_URL, tokio_postgres::NoTls)
            .await
            .expect(
                "the PostgreSQL server at 127.0.0.1:5432 must be running (these tests never skip)",
            );
        tokio::spawn(connection);
        client
    });
    batch_round(|key, args| {
        let owned = args.postgres(&params(&st[key]));
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            owned.iter().map(|b| &**b as _).collect();
        let rows = runtime
            .block_on(client.query(sql(&st[key]), &refs))
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        rows.iter()
            .map(|row| match row.len() {
                // name, epoch (release batch), and the handover request
                // (renew batch)
                2 | 3 => (row.get(0), None, row.get(1)),
                // name, holder, epoch, expires_in_ms
                4 => (row.get(0), row.get(1), row.get(2)),
                n => panic!("{key}: {n} columns"),
            })
            .collect()
    });
}

/// `sql --by-liveness` prints a set's statements renewing by
/// liveness (DESIGN §9 "Renewal by liveness"): the same keys, the library's own
/// `Statements::renewing_by_liveness` text; on SQLite the batch acquire
/// and renewal carry a read-back (two statements, one transaction), on
/// MySQL a chain of them (each `read_back` with its own, every step's
/// SQL and parameters the library's, in the order they run).
#[test]
fn by_liveness_prints_the_statements_renewing_by_liveness() {
    for (dialect, name) in [
        (Dialect::Sqlite, "sqlite"),
        (Dialect::Postgres, "postgres"),
        (Dialect::Mysql, "mysql"),
    ] {
        let v = json(&["sql", "--dialect", name, "--json", "--by-liveness"]);
        assert_eq!(keys(&v["statements"]), set(&KEYS));
        let s = Statements::new(dialect, &TableName::default()).renewing_by_liveness();
        for (key, statement) in [
            ("acquire_batch", s.acquire_batch()),
            ("renew_batch", s.renew_batch()),
            ("survey", s.survey()),
            ("status", s.status()),
            ("fence", s.fence()),
        ] {
            // The printed chain, step by step, is the statement's.
            let (steps, _) = statement.in_order();
            let mut printed = &v["statements"][key];
            for (at, step) in steps.iter().enumerate() {
                assert_eq!(sql(printed), step.sql(), "{name} {key} step {at}");
                let params: Vec<&str> = printed["params"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_str().unwrap())
                    .collect();
                assert_eq!(params.len(), step.params().len(), "{name} {key} step {at}");
                if at + 1 < steps.len() {
                    // MySQL's acquire ends a lapsed liveness first, in a
                    // transaction of its own.
                    let order = if at < statement.committed_first() {
                        "after_commit"
                    } else {
                        "after"
                    };
                    assert_eq!(printed["read_back"]["order"], order, "{name} {key}");
                }
                printed = &printed["read_back"];
            }
            assert!(
                printed.is_null(),
                "{name} {key}: no step past the statement's"
            );
        }
        let chain = |key: &str| {
            let mut n = 0;
            let mut at = &v["statements"][key];
            while at.is_object() {
                n += 1;
                at = &at["read_back"];
            }
            n
        };
        let (acquire, renew) = match name {
            "sqlite" => (2, 2),
            "postgres" => (1, 1),
            _ => (9, 3),
        };
        assert_eq!(
            (chain("acquire_batch"), chain("renew_batch")),
            (acquire, renew),
            "{name}"
        );
        // Not the default statements.
        let plain = json(&["sql", "--dialect", name, "--json"]);
        assert_ne!(
            sql(&plain["statements"]["renew_batch"]),
            sql(&v["statements"]["renew_batch"])
        );
    }
}
