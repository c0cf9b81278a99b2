//! `picolease status` on SQLite paths: a missing file in an existing
//! directory reads as no leases (exit 0, nothing created); a path whose
//! directory does not exist is a mistake, reported in one line (exit 2).

use crate::support;

use support::picolease;

#[test]
fn a_missing_file_in_an_existing_directory_reads_as_no_leases_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    {
        let db = format!("sqlite://{}", path.display());
        let out = picolease(&["--db", &db, "status", "--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
        assert!(!path.exists(), "status created {}", path.display());
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_path_whose_directory_does_not_exist_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let path = missing.join("leases.db");
    {
        let db = format!("sqlite://{}", path.display());
        for args in [vec!["status", "--json"], vec!["status"]] {
            let mut all = vec!["--db", db.as_str()];
            all.extend(args);
            let out = picolease(&all);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
            assert!(stderr.starts_with("error: "), "{stderr}");
            assert!(stderr.contains(&path.display().to_string()), "{stderr}");
            assert!(out.stdout.is_empty(), "{:?}", out.stdout);
        }
    }
    assert!(!missing.exists(), "status created {}", missing.display());
}
