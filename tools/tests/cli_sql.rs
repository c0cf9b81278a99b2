//! `picolease sql`: the statements for other languages, held to the letter
//! from outside — the JSON shape and keys, placeholders per dialect,
//! parameters in placeholder order, the dialect following `--db`, bad
//! values refused with exit 2 — and the printed SQL actually runs: the
//! create, acquire, renew, release and fence (in `SELECT <fence>`) are
//! executed as printed on SQLite (rusqlite) and on the PostgreSQL server,
//! binding parameters in the printed order.

mod support;

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

const KEYS: [&str; 7] = [
    "create",
    "acquire",
    "renew",
    "release",
    "force_release",
    "status",
    "fence",
];

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
                    ["lease", "holder", "epoch", "ttl_ms"].contains(&p.as_str()),
                    "{key}: unknown parameter {p}"
                );
            }
        }
        let st = &v["statements"];
        assert_eq!(params(&st["create"]), Vec::<String>::new());
        assert_eq!(params(&st["status"]), Vec::<String>::new());
        assert_eq!(params(&st["fence"]), ["lease", "holder", "epoch"]);
        assert_eq!(params(&st["acquire"]), ["lease", "holder", "ttl_ms"]);
        assert_eq!(params(&st["force_release"]), ["lease"]);
        assert!(sql(&st["fence"]).starts_with("EXISTS"));
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

/// `$1…$n` on PostgreSQL, each once and in order, one per parameter; `?`
/// on SQLite; and the order is the library's own.
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
    assert_usage_error(&picolease(&["sql", "--dialect", "mysql"]), &["mysql"]);
    assert_usage_error(
        &picolease(&["sql", "--dialect", "Postgres", "--json"]),
        &["Postgres"],
    );
    assert_usage_error(&picolease(&["--table", "bad name", "sql"]), &["bad name"]);
    assert_usage_error(
        &picolease(&["--table", "a.b.c", "sql", "--dialect", "sqlite"]),
        &["a.b.c"],
    );
    let out = picolease(&["--db", "mysql://u:secret@h/db", "sql"]);
    assert_usage_error(&out, &["mysql://"]);
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
