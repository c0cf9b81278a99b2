//! `picolease bench` from outside: the exact JSON keys on both databases,
//! figures that hang together, the scratch table gone afterwards, and bad
//! input as one line with exit 2 (a bad value) or 1 (an unreachable
//! database). The figures themselves are not judged here: they are
//! measurements, printed by the command for a human to read.

use crate::support;

use std::process::Output;

use support::picolease;

const KEYS: [&str; 14] = [
    "rtt_p50_ms",
    "renew_p50_ms",
    "renew_p99_ms",
    "renew_floor_p50_ms",
    "clean_handover_p50_ms",
    "clean_handover_max_ms",
    "clean_handover_floor_p50_ms",
    "planned_handover_p50_ms",
    "planned_handover_max_ms",
    "planned_to_clean_handover_p50_ratio",
    "crash_lag_p50_ms",
    "crash_lag_max_ms",
    "recommended_ttl_ms",
    "recommended_interval_ms",
];

const PG: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Runs `bench --json` and checks the object: exactly the fourteen keys, all
/// numbers, non-negative, p50 ≤ p99/max, and a recommendation the run
/// command accepts (interval below ttl / 2).
fn bench_json(db: &str) -> serde_json::Map<String, serde_json::Value> {
    let out = picolease(&["--db", db, "bench", "--rounds", "2", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    let object: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let object = object.as_object().expect("an object").clone();
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort();
    let mut expected = KEYS.to_vec();
    expected.sort();
    assert_eq!(keys, expected, "{stdout}");
    let get = |k: &str| {
        object[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} is a number: {stdout}"))
    };
    for key in KEYS {
        assert!(get(key) >= 0.0, "{key}: {stdout}");
    }
    assert!(get("renew_p50_ms") <= get("renew_p99_ms"), "{stdout}");
    assert!(
        get("clean_handover_p50_ms") <= get("clean_handover_max_ms"),
        "{stdout}"
    );
    assert!(
        get("planned_handover_p50_ms") <= get("planned_handover_max_ms"),
        "{stdout}"
    );
    assert!(
        get("crash_lag_p50_ms") <= get("crash_lag_max_ms"),
        "{stdout}"
    );
    assert!(
        get("renew_p50_ms") > 0.0
            && get("clean_handover_p50_ms") > 0.0
            && get("planned_handover_p50_ms") > 0.0,
        "{stdout}"
    );
    // The ratio is the two p50s' (each rounded to the microsecond).
    let ratio = get("planned_handover_p50_ms") / get("clean_handover_p50_ms");
    assert!(
        (get("planned_to_clean_handover_p50_ratio") - ratio).abs() <= 0.01 * ratio.max(1.0),
        "{stdout}"
    );
    assert!(get("recommended_interval_ms") >= 100.0, "{stdout}");
    assert!(
        get("recommended_interval_ms") * 2.0 < get("recommended_ttl_ms"),
        "{stdout}"
    );
    object
}

#[test]
fn sqlite_bench_prints_the_figures_and_their_floors_and_leaves_no_table() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("bench.db").display());
    bench_json(&db);
    let status = picolease(&["--db", &db, "status", "--json"]);
    assert_eq!(status.status.code(), Some(0));
    let conn = rusqlite::Connection::open(dir.path().join("bench.db")).unwrap();
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name LIKE 'picolease_bench_%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "the scratch table is dropped");
}

#[test]
fn postgres_bench_prints_the_figures_and_their_floors() {
    bench_json(PG);
}

/// MySQL/MariaDB at 127.0.0.1:3306 (fails, not skips, without it); the
/// scratch table is dropped.
#[test]
fn mysql_bench_prints_the_figures_and_their_floors_and_leaves_no_table() {
    let object = bench_json("mysql://root@127.0.0.1:3306/test");
    assert!(object["renew_floor_p50_ms"].as_f64().unwrap() > 0.0);
    let out = std::process::Command::new("mysql")
        .args(["-h", "127.0.0.1", "-u", "root", "--batch", "--skip-column-names", "test"])
        .args(["-e", "SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'picolease_bench_%'"])
        .output()
        .expect("the mysql client runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{out:?}");
}

#[test]
fn the_plain_output_is_a_table_with_the_recommendation_and_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("bench.db").display());
    let out = picolease(&["--db", &db, "bench", "--rounds", "1"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "round trip",
        "renew through the driver",
        "clean handover",
        "planned handover",
        "planned handover / clean handover, p50: x",
        "crash takeover",
        "recommended: --ttl ",
        "picolease bench --db URL",
    ] {
        assert!(stdout.contains(needle), "{needle:?} in {stdout}");
    }
    // Progress goes to stderr, one line per stage when not on a terminal.
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("bench: clean handover"), "{stderr}");
    assert!(stderr.contains("bench: planned handover"), "{stderr}");
}

fn assert_one_line_error(out: &Output, code: i32, names: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(
        stderr.starts_with("error: ") && !stderr.contains("panicked"),
        "{stderr}"
    );
    for name in names {
        assert!(stderr.contains(name), "{name:?} in {stderr:?}");
    }
    assert!(out.stdout.is_empty(), "nothing on stdout");
}

#[test]
fn bad_values_exit_2_and_unreachable_databases_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("bench.db").display());
    for rounds in ["0", "-3", "many", "1001"] {
        let out = picolease(&["--db", &db, "bench", "--rounds", rounds]);
        assert_one_line_error(&out, 2, &["--rounds", rounds]);
    }
    assert!(!dir.path().join("bench.db").exists(), "nothing created");
    let missing = format!("sqlite://{}/no/such/dir/bench.db", dir.path().display());
    assert_one_line_error(
        &picolease(&["--db", &missing, "bench"]),
        1,
        &["no/such/dir"],
    );
    let closed = "postgres://postgres@127.0.0.1:1/test?connect_timeout=2";
    assert_one_line_error(
        &picolease(&["--db", closed, "bench", "--json"]),
        1,
        &["127.0.0.1"],
    );
    assert_one_line_error(
        &picolease(&["--db", "sqlite::memory:", "bench"]),
        2,
        &["sqlite://PATH"],
    );
}

/// `bench --leases N --nodes P --json` (a set's steady-state cost on
/// PostgreSQL): exactly its keys, every lease held; renewing by liveness
/// (the default) about one row update per process per interval, and with
/// `--every-row` about one per lease and one per process (every held row
/// renewed every interval). Loose bounds: the server's statistics are
/// flushed lazily.
#[test]
fn postgres_write_cost_bench_counts_a_sets_row_updates() {
    let bench = |shape: &[&str]| {
        let mut args = vec![
            "--db", PG, "bench", "--leases", "20", "--nodes", "2", "--ttl", "1s", "--settle", "3s",
            "--window", "4s", "--json",
        ];
        args.extend_from_slice(shape);
        let out = picolease(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let object: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let object = object.as_object().unwrap().clone();
        let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "by_liveness",
                "commits_per_s",
                "exited",
                "floor_commits_per_s",
                "floor_wal_bytes_per_s",
                "held",
                "leases",
                "nodes",
                "row_updates_per_interval",
                "row_updates_per_s",
                "settled_s",
                "ttl_ms",
                "wal_bytes_per_s",
                "window_s"
            ]
        );
        assert_eq!(object["held"], 20);
        assert_eq!(object["exited"], 0);
        assert!(object["wal_bytes_per_s"].as_f64().unwrap() > 0.0);
        assert!(object["settled_s"].as_f64().is_some_and(|s| s < 3.0));
        object
    };
    let every_row = bench(&["--every-row"]);
    assert_eq!(every_row["by_liveness"], false);
    let per_interval = every_row["row_updates_per_interval"].as_f64().unwrap();
    assert!((11.0..=44.0).contains(&per_interval), "{per_interval}");
    let by_liveness = bench(&[]);
    assert_eq!(by_liveness["by_liveness"], true);
    let per_interval = by_liveness["row_updates_per_interval"].as_f64().unwrap();
    assert!((1.0..=6.0).contains(&per_interval), "{per_interval}");
}

#[test]
fn the_write_cost_bench_refuses_other_databases_and_bad_counts() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("bench.db").display());
    assert_one_line_error(
        &picolease(&["--db", &db, "bench", "--leases", "10", "--nodes", "2"]),
        2,
        &["PostgreSQL"],
    );
    for (flag, value) in [("--leases", "0"), ("--nodes", "0"), ("--nodes", "65")] {
        let mut args = vec!["--db", PG, "bench", "--leases", "5", "--nodes", "2"];
        let at = args.iter().position(|a| *a == flag).unwrap();
        args[at + 1] = value;
        assert_one_line_error(&picolease(&args), 2, &[flag, value]);
    }
    assert_one_line_error(
        &picolease(&["--db", PG, "bench", "--nodes", "2"]),
        2,
        &["--leases"],
    );
}
