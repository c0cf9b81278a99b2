//! A private Patroni cluster for the failover tests (issue 44): one etcd
//! member and two Patroni members (Debian's `patroni`, `etcd-server`),
//! each PostgreSQL server run by Patroni as the `postgres` user, on free
//! ports of 127.0.0.1, in one temporary directory named
//! `picolease-pgtest-…` (which `.ci/run` cleans up after a killed run).
//! Patroni's own limits set the timings: a leader key of 20 s (its
//! minimum), a 1 s loop, a 3 s retry timeout; `maximum_lag_on_failover`
//! 1 GiB, so a lagging replica is still promoted. Each member advertises
//! a proxy to its server for replication, so a test can cut a replica
//! off (`cut_replication`) and make the next failover lose commits. Everything is killed and
//! removed when the [`Patroni`] is dropped, also on failure.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{free_port, postgres_dir};
use super::forward::Forward;

/// How long a bootstrap, a switchover or a failover may take: Patroni's
/// leader key (20 s) and then some.
const PATIENCE: Duration = Duration::from_secs(60);

/// One Patroni member: its name, ports and process.
pub struct Member {
    pub name: String,
    pub pg_port: u16,
    rest_port: u16,
    config: PathBuf,
    child: Option<Child>,
    /// The address Patroni advertises for the server
    /// (`postgresql.connect_address`), which a replica streams from: a
    /// proxy to `pg_port`, so that a test can cut the replication.
    replication: Forward,
}

/// The cluster.
pub struct Patroni {
    dir: tempfile::TempDir,
    etcd: Child,
    pub members: Vec<Member>,
}

impl Drop for Patroni {
    fn drop(&mut self) {
        for member in &mut self.members {
            member.kill();
        }
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
        // Patroni's servers outlive a SIGKILLed Patroni: stop each.
        for member in &self.members {
            let data = self.dir.path().join(&member.name);
            let _ = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg("/usr/lib/postgresql/15/bin/pg_ctl")
                .args(["stop", "-m", "immediate", "-D"])
                .arg(&data)
                .output();
        }
    }
}

/// Whether Patroni's REST API on `port` answers `GET path` with 200.
fn rest_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b" 200")
}

impl Member {
    /// SIGKILLs its process group: `runuser` and the Patroni it runs
    /// (killing `runuser` alone would leave Patroni running).
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = child.wait();
        }
    }
}

impl Patroni {
    /// etcd and two members, bootstrapped; returns once one member leads
    /// and the other streams from it.
    pub fn start() -> Patroni {
        let dir = postgres_dir();
        let (client, peer) = (free_port(), free_port());
        let etcd = Command::new("etcd")
            .args(["--name", "e"])
            .arg(format!("--data-dir={}", dir.path().join("etcd").display()))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=e=http://127.0.0.1:{peer}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("etcd.log")).unwrap())
            .spawn()
            .expect("etcd starts (Debian's etcd-server must be installed)");
        let mut patroni = Patroni {
            dir,
            etcd,
            members: Vec::new(),
        };
        for name in ["m1", "m2"] {
            let member = patroni.member(name, client);
            patroni.members.push(member);
            // The first bootstraps alone: the second then joins as its
            // replica instead of racing it for the initialize key.
            if name == "m1" {
                patroni.wait_for("m1 to lead", |p| p.leader().is_some());
            }
        }
        patroni.wait_for("a replica streaming", |p| p.streaming());
        // Patroni itself must count it a healthy replica (`GET /replica`
        // answers 200), or it refuses a switchover to it.
        patroni.wait_for("Patroni's replica running", |p| {
            p.members.iter().any(|m| rest_ok(m.rest_port, "/replica"))
        });
        patroni
    }

    fn member(&self, name: &str, etcd: u16) -> Member {
        let (pg_port, rest_port) = (free_port(), free_port());
        let replication = Forward::to(pg_port);
        let dir = self.dir.path();
        let config = dir.join(format!("{name}.yml"));
        std::fs::write(
            &config,
            format!(
                "scope: picolease\n\
                 namespace: /picolease-test/\n\
                 name: {name}\n\
                 restapi:\n  listen: 127.0.0.1:{rest_port}\n  connect_address: 127.0.0.1:{rest_port}\n\
                 etcd3:\n  hosts: 127.0.0.1:{etcd}\n\
                 bootstrap:\n  dcs:\n    ttl: 20\n    loop_wait: 1\n    retry_timeout: 3\n    \
                 maximum_lag_on_failover: 1073741824\n    postgresql:\n      use_pg_rewind: false\n  \
                 initdb:\n  - encoding: UTF8\n  \
                 pg_hba:\n  - local all all trust\n  - host all all 127.0.0.1/32 trust\n  \
                 - host replication all 127.0.0.1/32 trust\n\
                 postgresql:\n  listen: 127.0.0.1:{pg_port}\n  connect_address: 127.0.0.1:{advertised}\n  \
                 data_dir: {data}\n  bin_dir: /usr/lib/postgresql/15/bin\n  pgpass: {pgpass}\n  \
                 authentication:\n    superuser:\n      username: postgres\n    \
                 replication:\n      username: postgres\n  \
                 parameters:\n    unix_socket_directories: {sockets}\n",
                data = dir.join(name).display(),
                pgpass = dir.join(format!("{name}.pgpass")).display(),
                sockets = dir.display(),
                advertised = replication.port,
            ),
        )
        .unwrap();
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(chown.success());
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new("runuser")
            .args(["-u", "postgres", "--", "patroni"])
            .arg(&config)
            .env("PYTHONUNBUFFERED", "1")
            .process_group(0)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("patroni starts (Debian's patroni must be installed)");
        Member {
            name: name.to_string(),
            pg_port,
            rest_port,
            config,
            child: Some(child),
            replication,
        }
    }

    /// A multi-host URL over every member, to the one that takes writes.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.pg_port))
            .collect();
        format!(
            "postgres://postgres@{}/postgres?target_session_attrs=read-write&connect_timeout=1",
            hosts.join(",")
        )
    }

    /// The member whose server is a primary now, if any.
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len())
            .find(|&i| self.sql(i, "SELECT pg_is_in_recovery()") == Some("f".into()))
    }

    /// Whether the primary has a streaming replica.
    fn streaming(&self) -> bool {
        self.leader().is_some_and(|i| {
            self.sql(
                i,
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
            ) == Some("1".into())
        })
    }

    /// `sql` on member `i`'s server; its one value, `None` on failure.
    pub fn sql(&self, i: usize, sql: &str) -> Option<String> {
        let out = Command::new("psql")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-tA"])
            .args(["-p", &self.members[i].pg_port.to_string()])
            .args(["-c", sql])
            .env("PGCONNECT_TIMEOUT", "1")
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Waits until `done`, at most [`PATIENCE`]; the members' logs in the
    /// panic otherwise.
    pub fn wait_for(&self, what: &str, done: impl Fn(&Patroni) -> bool) -> Duration {
        let started = Instant::now();
        while !done(self) {
            assert!(
                started.elapsed() < PATIENCE,
                "Patroni: {what}, not within {PATIENCE:?}: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        started.elapsed()
    }

    /// A planned switchover to the replica (`patronictl switchover`).
    pub fn switchover(&self) {
        let leader = self.leader().expect("a leader to switch from");
        let candidate = 1 - leader;
        let out = Command::new("runuser")
            .args(["-u", "postgres", "--", "patronictl", "-c"])
            .arg(&self.members[leader].config)
            .args(["switchover", "--force"])
            .args(["--leader", &self.members[leader].name])
            .args(["--candidate", &self.members[candidate].name])
            .output()
            .expect("patronictl runs");
        assert!(
            out.status.success(),
            "patronictl switchover: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The replica stops receiving the leader's WAL: the link it streams
    /// through is cut (and stays cut), so what the leader commits from
    /// now on is lost if the replica is promoted.
    pub fn cut_replication(&self) {
        let leader = self.leader().expect("a leader to cut the replica from");
        self.members[leader].replication.cut();
        let replica = 1 - leader;
        let started = Instant::now();
        while self.sql(
            replica,
            "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'",
        ) != Some("0".into())
        {
            assert!(
                started.elapsed() < PATIENCE,
                "the replica still streams: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The leader crashes: its Patroni and its server SIGKILLed, as when
    /// its machine dies. Returns the member's index.
    pub fn crash_leader(&mut self) -> usize {
        let leader = self.leader().expect("a leader to crash");
        self.members[leader].kill();
        let pid = std::fs::read_to_string(self.data(leader).join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().map(str::to_string));
        if let Some(pid) = pid {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
        leader
    }

    fn data(&self, i: usize) -> PathBuf {
        self.dir.path().join(&self.members[i].name)
    }

    fn logs(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let tail = |s: String| s.lines().rev().take(15).collect::<Vec<_>>().join("\n");
        let mut out = String::new();
        for m in &self.members {
            out += &format!(
                "\n--- {} (rest {}) ---\n{}",
                m.name,
                m.rest_port,
                tail(read(&self.dir.path().join(format!("{}.log", m.name))))
            );
        }
        out + &format!(
            "\n--- etcd ---\n{}",
            tail(read(&self.dir.path().join("etcd.log")))
        )
    }
}
