//! A private MariaDB server for the tests that must configure, crash or
//! replicate one (never the shared one at 127.0.0.1:3306, whose settings
//! no test changes): `mariadb-install-db` into a temporary directory
//! (named `picolease-mysqltest-…`, which `.ci/run` cleans up after a
//! killed run), `mariadbd` as the `mysql` user on a free port; a
//! three-node Galera cluster of them (`galera.rs`).

#![allow(dead_code)]

pub mod galera;

use std::net::TcpListener;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A private MariaDB server on a free port of 127.0.0.1, in a temporary
/// directory of its own; killed, and the directory removed, when dropped.
pub struct Server {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Server {
    /// Installs and starts a server with `args` added to picolease's
    /// (`--no-defaults`, a 16 MB buffer pool, no name resolution), with
    /// a database `test` and a password-less user `picolease` allowed
    /// everything.
    pub fn start(args: &[String]) -> Server {
        Server::launch(args, &[], true)
    }

    /// [`Server::start`] with `env` added to the server's environment
    /// (libfaketime's, for a skewed clock), and, unless `setup`, without
    /// the database and the user (a Galera joiner receives both with the
    /// cluster's state).
    pub fn launch(args: &[String], env: &[(&str, &str)], setup: bool) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("picolease-mysqltest-")
            .tempdir()
            .expect("a temporary directory");
        let data = dir.path().join("data");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let chown = Command::new("chown")
            .args(["-R", "mysql:mysql"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success());
        // Its own temporary directory: two servers installed at once
        // would share /tmp's temporary tables.
        let installed = Command::new("mariadb-install-db")
            .env("TMPDIR", dir.path())
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args([
                "--user=mysql",
                "--skip-test-db",
                "--auth-root-authentication-method=normal",
            ])
            .output()
            .expect("mariadb-install-db runs (MariaDB must be installed)");
        assert!(
            installed.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&installed.stderr)
        );
        let socket = dir.path().join("sock");
        let child = Command::new("/usr/sbin/mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .arg(format!("--log-error={}", dir.path().join("err").display()))
            .arg(format!("--tmpdir={}", dir.path().display()))
            .arg(format!("--port={port}"))
            .args([
                "--bind-address=127.0.0.1",
                "--user=mysql",
                "--skip-name-resolve",
            ])
            .arg("--innodb-buffer-pool-size=16M")
            .args(args)
            .envs(env.iter().copied())
            .spawn()
            .expect("mariadbd starts");
        let server = Server { dir, port, child };
        let started = Instant::now();
        // A Galera node joining by state transfer on a loaded 2-core
        // machine took over 30 s once.
        while !server.ping() {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "mariadbd did not start: {}",
                std::fs::read_to_string(server.dir.path().join("err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        if setup {
            server.sql(
                "CREATE DATABASE test; \
                 CREATE USER 'picolease'@'%'; GRANT ALL ON *.* TO 'picolease'@'%';",
            );
        }
        server
    }

    pub fn socket(&self) -> String {
        self.dir.path().join("sock").display().to_string()
    }

    pub fn ping(&self) -> bool {
        Command::new("mysqladmin")
            .args([
                "--no-defaults",
                "-uroot",
                &format!("--socket={}", self.socket()),
                "ping",
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Runs `sql` as root through the socket (a socket counts as secure
    /// transport); its tab-separated output.
    pub fn sql(&self, sql: &str) -> String {
        let out = Command::new("mariadb")
            .args(["--no-defaults", "-uroot", "-N", "-B"])
            .arg(format!("--socket={}", self.socket()))
            .args(["-e", sql])
            .output()
            .expect("mariadb runs");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// The directory the server lives in (its data in `data`).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn url(&self, host: &str, user: &str, params: &str) -> String {
        format!("mysql://{user}@{host}:{}/test?{params}", self.port)
    }
}

impl Server {
    /// [`Server::sql`], `None` when it fails (the server still starting,
    /// a table not there yet).
    pub fn try_sql(&self, sql: &str) -> Option<String> {
        let out = Command::new("mariadb")
            .args(["--no-defaults", "-uroot", "-N", "-B"])
            .arg(format!("--socket={}", self.socket()))
            .args(["-e", sql])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL: a crash) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
