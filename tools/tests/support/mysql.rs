//! Plain SQL on the test MySQL/MariaDB server, through its command-line
//! client, for the MySQL CLI tests.

use std::process::Command;

/// Runs `sql` on database `db` of the server at 127.0.0.1:3306 as root
/// (panics, failing the test, when the server is unreachable) and returns
/// every row as its columns' text joined by `|`.
pub fn sql(db: &str, sql: &str) -> Vec<String> {
    let out = Command::new("mysql")
        .args([
            "-h",
            "127.0.0.1",
            "-P",
            "3306",
            "-u",
            "root",
            "--batch",
            "--skip-column-names",
        ])
        .args(["-e", sql, db])
        .output()
        .expect("the mysql client runs");
    assert!(
        out.status.success(),
        "the MariaDB server at 127.0.0.1:3306 must be running for these tests; {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| line.replace('\t', "|"))
        .collect()
}
