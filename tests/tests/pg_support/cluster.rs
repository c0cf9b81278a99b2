//! Private PostgreSQL servers for the tests that must crash, restart or
//! fail over a server (never the shared one at 127.0.0.1:5432): a
//! primary made with `initdb` into a temporary directory, as the
//! `postgres` user, on a free port, and streaming standbys made from it
//! with `pg_basebackup -R`. A test may SIGKILL a server, start it again
//! on the same data directory, cut a standby's replication and promote
//! it. Every server is stopped (`pg_ctl stop -m immediate`) and its
//! directory removed when its [`Server`] is dropped, also when the test
//! fails; `.ci/run` kills whatever a killed test process left behind
//! (their data directories are named `picolease-pgtest-*`).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The PostgreSQL 15 binaries Debian installs.
const BIN: &str = "/usr/lib/postgresql/15/bin";

/// How long a server may take to start, stop or be promoted.
const PATIENCE: Duration = Duration::from_secs(30);

/// One private server: its data directory and its port.
pub struct Server {
    dir: tempfile::TempDir,
    port: u16,
}

/// Runs `program` of PostgreSQL's as the `postgres` user; panics with its
/// output when it fails.
fn as_postgres(program: &str, args: &[&str]) -> Output {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(Path::new(BIN).join(program))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("runuser {program}: {e} (PostgreSQL 15 must be installed)"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A temporary directory the `postgres` user owns.
pub fn postgres_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("picolease-pgtest-")
        .tempdir()
        .expect("a temporary directory");
    let status = Command::new("chown")
        .args(["postgres:postgres"])
        .arg(dir.path())
        .status()
        .expect("chown");
    assert!(status.success(), "chown of {}", dir.path().display());
    dir
}

impl Server {
    /// A new primary: `initdb` (trust for local and loopback connections,
    /// replication included) with `settings` appended to its
    /// `postgresql.conf` (e.g. `synchronous_commit = off`), started.
    pub fn primary(settings: &[&str]) -> Server {
        let server = Server {
            dir: postgres_dir(),
            port: free_port(),
        };
        let data = server.data();
        as_postgres(
            "initdb",
            &["-D", &data, "--auth=trust", "--no-sync", "-U", "postgres"],
        );
        server.configure(settings);
        server.start();
        server
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`), with
    /// `settings` appended, started and replaying.
    pub fn standby_of(primary: &Server, settings: &[&str]) -> Server {
        let server = Server {
            dir: postgres_dir(),
            port: free_port(),
        };
        let data = server.data();
        as_postgres(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &data,
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        );
        server.configure(settings);
        server.start();
        server
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// Its own port and socket directory, fast for tests, and `settings`.
    fn configure(&self, settings: &[&str]) {
        let conf = PathBuf::from(self.data()).join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
        text.push_str(&format!(
            "\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nshared_buffers = 16MB\nmax_connections = 50\n\
             wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\n\
             wal_receiver_status_interval = 1s\n",
            self.port,
            self.dir.path().display()
        ));
        for setting in settings {
            text.push_str(setting);
            text.push('\n');
        }
        std::fs::write(&conf, text).expect("postgresql.conf written");
    }

    /// Lets every role connect without a password from `cidr` (the
    /// server must listen there: `listen_addresses` in its settings).
    pub fn trust_network(&self, cidr: &str) {
        let hba = PathBuf::from(self.data()).join("pg_hba.conf");
        let mut text = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        text.push_str(&format!("\nhost all all {cidr} trust\n"));
        std::fs::write(&hba, text).expect("pg_hba.conf written");
        self.sql("SELECT pg_reload_conf()");
    }

    /// Replaces `pg_hba.conf` with `rules` and reloads.
    pub fn set_hba(&self, rules: &str) {
        let hba = PathBuf::from(self.data()).join("pg_hba.conf");
        std::fs::write(&hba, rules).expect("pg_hba.conf written");
        self.sql("SELECT pg_reload_conf()");
    }

    /// The directory the server's files live in (owned by `postgres`):
    /// for files it must read, such as TLS keys.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`, for multi-host URLs.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A URL of database `postgres` on this server alone.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server on its data directory and waits until it
    /// accepts connections.
    pub fn start(&self) {
        let log = self.dir.path().join("log").display().to_string();
        as_postgres(
            "pg_ctl",
            &["-D", &self.data(), "-l", &log, "-w", "-t", "30", "start"],
        );
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            let ready = Command::new(Path::new(BIN).join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "the server on port {} did not accept connections",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The postmaster's pid, while it runs.
    pub fn pid(&self) -> Option<i32> {
        let pid_file = PathBuf::from(self.data()).join("postmaster.pid");
        std::fs::read_to_string(pid_file)
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// SIGKILLs the postmaster (its backends end with it, nothing is
    /// flushed or checkpointed): a crash. Waits until it is gone.
    pub fn crash(&self) {
        let Some(pid) = self.pid() else { return };
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        let started = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                started.elapsed() < PATIENCE,
                "postmaster {pid} survived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Its backends notice the postmaster's death on their own; make
        // sure none holds the port or the shared memory when it restarts.
        let _ = Command::new("pkill")
            .args(["-KILL", "-f", &self.data()])
            .status();
        std::thread::sleep(Duration::from_millis(100));
    }

    /// Stops the standby's replication (an empty `primary_conninfo`,
    /// reloaded) and waits until its WAL receiver is gone: it keeps what
    /// it has and receives nothing more.
    pub fn cut_replication(&self) {
        self.sql("ALTER SYSTEM SET primary_conninfo = ''");
        self.sql("SELECT pg_reload_conf()");
        let started = Instant::now();
        while self.sql("SELECT count(*) FROM pg_stat_wal_receiver").trim() != "0" {
            assert!(
                started.elapsed() < PATIENCE,
                "the WAL receiver did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Promotes a standby and waits until it accepts writes.
    pub fn promote(&self) {
        as_postgres("pg_ctl", &["-D", &self.data(), "-w", "-t", "30", "promote"]);
        let started = Instant::now();
        while self.sql("SELECT pg_is_in_recovery()").trim() != "f" {
            assert!(started.elapsed() < PATIENCE, "not promoted");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `sql` with psql on this server (database `postgres`); its
    /// unaligned output. Panics when psql fails.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|e| panic!("psql on port {}: {sql}: {e}", self.port))
    }

    /// [`Server::sql`], its error as a value (for waiting on a standby
    /// that has not replayed a table yet).
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args([
                "-d",
                "postgres",
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
            .output()
            .expect("psql runs");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).to_string())
        }
    }

    /// The server's log so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(Path::new(BIN).join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .output();
        let _ = Command::new("pkill")
            .args(["-KILL", "-f", &self.data()])
            .status();
        // The TempDir removes the directory.
    }
}
