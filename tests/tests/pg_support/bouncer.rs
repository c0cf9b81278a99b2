//! A private PgBouncer for the tests of a transaction pooler (Debian's
//! `pgbouncer`, which `.ci/run` installs when missing): started on a free
//! port in transaction mode with a pool of 2 server connections, in front
//! of the shared server at 127.0.0.1:5432, and killed when dropped (also
//! on failure). PgBouncer refuses to run as root, so it runs as
//! `postgres`. Shared by `tests/tests/pg_pooler.rs` (through `pg_support`)
//! and `tools/tests/cli_pooler.rs` (by path).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The shared server behind the pooler.
const SERVER_HOST: &str = "127.0.0.1";
const SERVER_PORT: &str = "5432";

/// Bouncers started by this test process so far (part of their database
/// names).
static STARTED: AtomicU32 = AtomicU32::new(0);

/// A private PgBouncer in transaction mode, pool of 2; killed on drop.
pub struct Bouncer {
    child: Child,
    port: u16,
    /// The name this bouncer, and only it, serves the server's `test`
    /// database under.
    database: String,
    _dir: tempfile::TempDir,
}

impl Bouncer {
    pub fn start() -> Bouncer {
        Bouncer::start_with("")
    }

    /// [`Bouncer::start`] with `settings` added to its `[pgbouncer]`
    /// section (TLS files, say: they must be readable by `postgres`).
    pub fn start_with(settings: &str) -> Bouncer {
        // A port found free may be taken before PgBouncer binds it (by
        // another test's bouncer, or by a client socket). Each bouncer
        // serves the database under a name of its own, and is ready only
        // when that name is served on its port: a test can never talk to
        // another test's bouncer (which would vanish when that test ends,
        // taking this test's connections with it; seen in CI under load,
        // where the loser's bind failure came later than any fixed wait).
        for _ in 0..5 {
            if let Some(bouncer) = Bouncer::try_start(settings) {
                return bouncer;
            }
        }
        panic!("pgbouncer did not start on a free port in 5 attempts");
    }

    fn try_start(settings: &str) -> Option<Bouncer> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let database = format!(
            "test_{}_{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        );
        let (host, server_port) = (SERVER_HOST, SERVER_PORT);
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n{database} = host={host} port={server_port} dbname=test user=postgres\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 auth_type = any\npool_mode = transaction\ndefault_pool_size = 2\n\
                 max_client_conn = 200\nunix_socket_dir =\n\
                 ignore_startup_parameters = extra_float_digits\n{settings}"
            ),
        )
        .unwrap();
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
            database,
            _dir: dir,
        };
        let started = Instant::now();
        loop {
            match serves(port, &bouncer.database) {
                Some(true) => return Some(bouncer),
                // Another process holds the port: ours cannot bind it.
                Some(false) => return None,
                None if bouncer.exited() => return None,
                None => {}
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "pgbouncer did not serve {} on {port} within 10 s",
                bouncer.database
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True once this bouncer's process has exited.
    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// The test database through the pooler, with `extra` URL parameters.
    pub fn url(&self, app: &str, extra: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{}?application_name={app}&connect_timeout=2{extra}",
            self.port, self.database
        )
    }
}

/// Whether what listens on `port` serves `database`: `Some(true)` when it
/// answers a startup message for it with an authentication request,
/// `Some(false)` when it answers otherwise (an error: not ours), `None`
/// when nothing answers yet.
fn serves(port: u16, database: &str) -> Option<bool> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    // StartupMessage, protocol 3.0: length, version, then name/value
    // pairs, each NUL-terminated, and a final NUL.
    let mut body = 196_608_u32.to_be_bytes().to_vec();
    for part in ["user", "postgres", "database", database] {
        body.extend_from_slice(part.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut message = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    stream.write_all(&message).ok()?;
    let mut kind = [0_u8; 1];
    stream.read_exact(&mut kind).ok()?;
    Some(kind[0] == b'R')
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
