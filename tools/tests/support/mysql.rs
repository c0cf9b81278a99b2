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

/// Another MariaDB session holding the lock of lease row `lease` of
/// `table` (database `test`) in an open transaction: the client waits on
/// its stdin, and the row is printed once the lock is held. Dropping it
/// rolls back and waits for the client to exit. Renewals of that lease
/// wait behind it, as a stall would make them.
pub struct RowLock {
    client: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
}

impl RowLock {
    pub fn take(table: &str, lease: &str) -> Self {
        use std::io::{BufRead, BufReader, Write};
        use std::process::Stdio;
        let mut client = Command::new("mysql")
            .args(["-h", "127.0.0.1", "-P", "3306", "-u", "root"])
            .args(["--batch", "--skip-column-names", "--unbuffered", "test"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the mysql client runs");
        let mut stdin = client.stdin.take().unwrap();
        writeln!(
            stdin,
            "START TRANSACTION; SELECT name FROM {table} WHERE name = '{lease}' FOR UPDATE;"
        )
        .unwrap();
        let mut line = String::new();
        BufReader::new(client.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), lease, "the lease row is locked");
        RowLock {
            client,
            stdin: Some(stdin),
        }
    }
}

impl Drop for RowLock {
    fn drop(&mut self) {
        use std::io::Write;
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "ROLLBACK;");
        }
        let _ = self.client.wait();
    }
}
