//! Bad input to the `picolease` binary: every case is a one-line error on
//! stderr naming the problem, exit 2 (usage/configuration) or 1 (run time),
//! no panic, and nothing in the database changed.

use crate::support;

use std::path::Path;
use std::process::Output;

use support::picolease;

/// Asserts a clean failure: exit `code`, one line on stderr that starts with
/// `error:` and contains every word of `names`, no panic.
fn assert_error(out: &Output, code: i32, names: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line expected, got: {stderr:?}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "{stderr}"
    );
    for name in names {
        assert!(stderr.contains(name), "{name:?} not named in {stderr:?}");
    }
}

fn url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

/// Every row of every table, as text: "nothing changed" means this is equal
/// before and after.
fn dump(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out = tables.clone();
    for table in tables {
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let columns = stmt.column_count();
        let rows = stmt
            .query_map([], |row| {
                Ok((0..columns)
                    .map(|i| format!("{:?}", row.get_ref(i).unwrap()))
                    .collect::<Vec<_>>()
                    .join("|"))
            })
            .unwrap();
        out.extend(rows.map(Result::unwrap));
    }
    out
}

/// A table created by hand WITHOUT the NOT NULL constraints, holding one
/// malformed row.
fn foreign_row(path: &Path, epoch: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE picolease_leases (name TEXT PRIMARY KEY, holder TEXT, epoch INTEGER, expires_at INTEGER);
         INSERT INTO picolease_leases VALUES ('job', 'someone', {epoch}, 0);
         CREATE TABLE other (x INTEGER); INSERT INTO other VALUES (42);"
    ))
    .unwrap();
}

#[test]
fn unknown_flags_and_subcommands_are_usage_errors() {
    assert_error(&picolease(&["--frobnicate"]), 2, &["--frobnicate"]);
    assert_error(
        &picolease(&["run", "--name", "a", "--bogus"]),
        2,
        &["--bogus"],
    );
    assert_error(&picolease(&["explode"]), 2, &["explode"]);
    assert_error(&picolease(&["run"]), 2, &["--name"]);
}

#[test]
fn impossible_timings_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = url(&dir.path().join("t.db"));
    assert_error(
        &picolease(&["--db", &db, "run", "--name", "a", "--ttl", "0"]),
        2,
        &["ttl"],
    );
    assert_error(
        &picolease(&["--db", &db, "run", "--name", "a", "--ttl", "0s"]),
        2,
        &["ttl"],
    );
    assert_error(
        &picolease(&[
            "--db",
            &db,
            "run",
            "--name",
            "a",
            "--ttl",
            "1s",
            "--interval",
            "500ms",
        ]),
        2,
        &["interval", "500ms"],
    );
    assert_error(
        &picolease(&["--db", &db, "run", "--name", "a", "--ttl", "5parsecs"]),
        2,
        &["5parsecs"],
    );
    assert_error(
        &picolease(&["--db", &db, "run", "--name", "a", "--ttl", "99999999999h"]),
        2,
        &["99999999999h"],
    );
    assert_error(
        &picolease(&["--db", &db, "run", "--name", ""]),
        2,
        &["lease name"],
    );
    assert_error(
        &picolease(&["--db", &db, "run", "--name", "a", "--node", "x\ny"]),
        2,
        &["node name"],
    );
    assert_error(&picolease(&["demo", "--nodes", "1"]), 2, &["--nodes"]);
    assert_error(&picolease(&["demo", "--leases", "0"]), 2, &["--leases"]);
    assert_error(&picolease(&["demo", "--leases", "1001"]), 2, &["--leases"]);
    assert_error(
        &picolease(&["demo", "--leases", "4", "--ttl", "30s"]),
        2,
        &["--ttl"],
    );
    assert!(
        !dir.path().join("t.db").exists(),
        "no file created for a bad configuration"
    );
}

#[test]
fn bad_database_urls_and_paths() {
    let dir = tempfile::tempdir().unwrap();
    assert_error(
        &picolease(&["--db", &url(dir.path()), "init"]),
        2,
        &["directory"],
    );
    assert_error(
        &picolease(&["--db", &url(dir.path()), "run", "--name", "a"]),
        2,
        &["directory"],
    );
    assert_error(
        &picolease(&["--db", "sqlite:///proc/picolease/none/x.db", "init"]),
        2,
        &["/proc/picolease/none/x.db"],
    );
    assert_error(
        &picolease(&["--db", "oracle://h/db", "status"]),
        2,
        &["oracle://h/db", "not a supported database URL"],
    );
    // A MySQL URL without a database, its password hidden.
    assert_error(
        &picolease(&["--db", "mysql://u:secret@h", "status"]),
        2,
        &["mysql://u:***@h", "no database"],
    );
    // With the `postgres` feature (the default) such URLs are served:
    // tests/cli_postgres.rs covers them.
    #[cfg(not(feature = "postgres"))]
    assert_error(
        &picolease(&["--db", "postgres://u:pw@h/db", "status"]),
        2,
        &["postgres support not built"],
    );
    let foreign = dir.path().join("notes.txt");
    std::fs::write(
        &foreign,
        "these are not the bytes of a database\n".repeat(100),
    )
    .unwrap();
    for args in [
        vec!["init"],
        vec!["status"],
        vec!["run", "--name", "a"],
        vec!["release", "--name", "a", "--force"],
    ] {
        let mut all = vec!["--db", &*Box::leak(url(&foreign).into_boxed_str())];
        all.extend(args);
        assert_error(&picolease(&all), 2, &["not a SQLite database"]);
    }
    assert_eq!(
        std::fs::read_to_string(&foreign).unwrap(),
        "these are not the bytes of a database\n".repeat(100)
    );
}

#[test]
fn table_names_with_quotes_or_semicolons_are_refused_before_any_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    for table in ["x\"; DROP TABLE y; --", "a;b", "it's", "a b", "1x", ""] {
        for args in [vec!["init"], vec!["status"], vec!["run", "--name", "a"]] {
            let mut all = vec![
                "--db".to_string(),
                url(&path),
                "--table".into(),
                table.into(),
            ];
            all.extend(args.iter().map(|s| s.to_string()));
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            assert_error(&picolease(&all), 2, &["table name"]);
        }
    }
    assert!(!path.exists(), "nothing created");
}

#[test]
fn malformed_rows_are_reported_and_left_untouched() {
    for epoch in ["NULL", "-5"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        foreign_row(&path, epoch);
        let before = dump(&path);
        let db = url(&path);
        let out = picolease(&["--db", &db, "run", "--name", "job", "--ttl", "1s"]);
        assert_error(&out, 1, &["epoch", "picolease_leases"]);
        assert_error(&picolease(&["--db", &db, "status"]), 1, &["epoch"]);
        assert_error(
            &picolease(&["--db", &db, "status", "--json"]),
            1,
            &["epoch"],
        );
        assert_error(
            &picolease(&["--db", &db, "release", "--name", "job", "--force"]),
            1,
            &["epoch"],
        );
        // Nothing changed but the table's marker row, which the start
        // adds to a table that lacks it (`picolease.table`, DESIGN §3
        // "Failover"), as it would any migration.
        let marker = format!(
            "{:?}|Null|Integer(0)|Integer(0)",
            rusqlite::types::ValueRef::Text(b"picolease.table")
        );
        let after: Vec<String> = dump(&path)
            .into_iter()
            .filter(|row| *row != marker)
            .collect();
        assert_eq!(after, before, "nothing changed for epoch {epoch}");
    }
}

#[test]
fn release_needs_force_and_an_existing_lease() {
    let dir = tempfile::tempdir().unwrap();
    let db = url(&dir.path().join("t.db"));
    assert_eq!(picolease(&["--db", &db, "init"]).status.code(), Some(0));
    assert_error(
        &picolease(&["--db", &db, "release", "--name", "job"]),
        2,
        &["--force", "job"],
    );
    assert_error(
        &picolease(&["--db", &db, "release", "--name", "job", "--force"]),
        1,
        &["job"],
    );
}

#[test]
fn status_reads_without_creating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.db");
    let out = picolease(&["--db", &url(&path), "status", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    assert!(!path.exists());
    let out = picolease(&["--db", "sqlite::memory:", "status", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

#[test]
fn simulate_runs_and_refuses_bad_fault_lists() {
    let out = picolease(&[
        "simulate",
        "--ttl",
        "200ms",
        "--seed",
        "3",
        "--faults",
        "crash@1s,restart@2s",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("LEADER at epoch 2") && stdout.contains("all hold"),
        "{stdout}"
    );
    assert_error(
        &picolease(&["simulate", "--faults", "bogus@1s"]),
        2,
        &["bogus@1s"],
    );
    assert_error(
        &picolease(&["simulate", "--faults", "crash"]),
        2,
        &["crash"],
    );
    assert_error(
        &picolease(&["simulate", "--faults", "pause@1s+99999999999999999s"]),
        2,
        &["virtual time"],
    );
    assert_error(&picolease(&["simulate", "--nodes", "0"]), 2, &["--nodes"]);
    assert_error(&picolease(&["simulate", "--ttl", "0"]), 2, &["ttl"]);
}
