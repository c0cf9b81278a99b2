//! A start while the database fails over (issue 44): `run` started while
//! the server is not ready for writes (here, a proxy that accepts and
//! closes every connection, as HAProxy does while it has no primary)
//! waits and retries, saying on stderr why and for how long, and leads
//! once the server is back; it does not exit 1 as it did. A server where
//! nothing listens is still reported at once (`cli_postgres.rs`,
//! `cli_mysql.rs`: exit 1, "could not connect").
//!
//! PostgreSQL at 127.0.0.1:5432 and MariaDB at 127.0.0.1:3306 must be up
//! (fail, not skip).

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A TCP proxy to `upstream` that, while `closing`, accepts and closes.
struct Proxy {
    port: u16,
    closing: Arc<AtomicBool>,
}

impl Proxy {
    fn new(upstream: &'static str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let closing = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&closing);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if flag.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, closing }
    }

    fn open(&self) {
        self.closing.store(false, Ordering::SeqCst);
    }
}

/// `run` through a closing proxy: still running and warning after 2 s,
/// leading within 5 s of the proxy opening.
fn waits_then_leads(case: &str, proxy: &Proxy, url: &str, table: &str) {
    let proxy_url = url.to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_picolease"))
        .env_remove("PICOLEASE_DB")
        .args(["--db", &proxy_url, "--table", table])
        .args(["run", "--name", "job", "--ttl", "2s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stderr.take().unwrap();
    let sink = Arc::clone(&stderr);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                return;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "{case}: run exited while the server was not ready: {}",
        stderr.lock().unwrap()
    );
    let said = stderr.lock().unwrap().clone();
    assert!(
        said.contains("not ready for writes") && said.contains("as during a failover"),
        "{case}: no warning says why it waits: {said}"
    );
    if let Some(first) = said.lines().next() {
        println!("{case}: {first}");
    }
    proxy.open();
    let opened = Instant::now();
    let led = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(5).saturating_sub(opened.elapsed()))
            .unwrap_or_else(|_| {
                panic!(
                    "{case}: no leader within 5 s of the server being back: {}",
                    stderr.lock().unwrap()
                )
            });
        if line.contains("\"event\":\"leader\"") {
            break opened.elapsed();
        }
    };
    println!("{case}: led {led:?} after the server was back");
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_a_start_during_a_failover_waits_and_then_leads() {
    let table = format!("pl_start_wait_{}", std::process::id());
    let proxy = Proxy::new("127.0.0.1:5432");
    let url = format!("postgres://postgres@127.0.0.1:{}/test", proxy.port);
    waits_then_leads("postgres", &proxy, &url, &table);
    let drop = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c"])
        .arg(format!("DROP TABLE IF EXISTS {table}"))
        .output();
    assert!(drop.is_ok_and(|o| o.status.success()));
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_a_start_during_a_failover_waits_and_then_leads() {
    let table = format!("pl_start_wait_{}", std::process::id());
    let proxy = Proxy::new("127.0.0.1:3306");
    let url = format!("mysql://root@127.0.0.1:{}/test", proxy.port);
    waits_then_leads("mysql", &proxy, &url, &table);
    let drop = std::process::Command::new("mysql")
        .args(["-h", "127.0.0.1", "-u", "root", "test", "-e"])
        .arg(format!("DROP TABLE IF EXISTS {table}"))
        .output();
    assert!(drop.is_ok_and(|o| o.status.success()));
}
