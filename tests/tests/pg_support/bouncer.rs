//! A private PgBouncer for the tests of a transaction pooler (Debian's
//! `pgbouncer`, which `.ci/run` installs when missing): started on a free
//! port in transaction mode with a pool of 2 server connections, in front
//! of the shared server at 127.0.0.1:5432, and killed when dropped (also
//! on failure). PgBouncer refuses to run as root, so it runs as
//! `postgres`. Shared by `tests/tests/pg_pooler.rs` (through `pg_support`)
//! and `tools/tests/cli_pooler.rs` (by path).

#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shared server behind the pooler.
const SERVER_HOST: &str = "127.0.0.1";
const SERVER_PORT: &str = "5432";

/// A private PgBouncer in transaction mode, pool of 2; killed on drop.
pub struct Bouncer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Bouncer {
    pub fn start() -> Bouncer {
        // A port found free may be taken before PgBouncer binds it (by
        // another test's bouncer, which then answers for both, or by a
        // client socket): a bouncer that exits is started again on
        // another port, and one is trusted only once it listens and is
        // still running a moment later.
        for _ in 0..5 {
            if let Some(bouncer) = Bouncer::try_start() {
                return bouncer;
            }
        }
        panic!("pgbouncer did not start on a free port in 5 attempts");
    }

    fn try_start() -> Option<Bouncer> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let (host, server_port) = (SERVER_HOST, SERVER_PORT);
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\ntest = host={host} port={server_port} dbname=test user=postgres\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 auth_type = any\npool_mode = transaction\ndefault_pool_size = 2\n\
                 max_client_conn = 200\nunix_socket_dir =\n\
                 ignore_startup_parameters = extra_float_digits\n"
            ),
        )
        .unwrap();
        // Readable by `postgres`, whom PgBouncer runs as.
        let status = Command::new("chmod")
            .arg("-R")
            .arg("a+rwx")
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        let child = Command::new("runuser")
            .args(["-u", "postgres", "--", "pgbouncer"])
            .arg(&ini)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer must be installed (apt-get install -y pgbouncer)");
        let mut bouncer = Bouncer {
            child,
            port,
            _dir: dir,
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if bouncer.exited() {
                return None;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "pgbouncer did not listen on {port} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Something listens: ours, unless ours failed to bind and exits.
        std::thread::sleep(Duration::from_millis(200));
        (!bouncer.exited()).then_some(bouncer)
    }

    /// True once this bouncer's process has exited.
    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// The test database through the pooler, with `extra` URL parameters.
    pub fn url(&self, app: &str, extra: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/test?application_name={app}&connect_timeout=2{extra}",
            self.port
        )
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        // runuser passes SIGTERM on to PgBouncer, which then exits.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("pkill")
            .args(["-f", &format!("{}", self._dir.path().display())])
            .status();
    }
}
