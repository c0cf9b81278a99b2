//! A plain TCP forwarder for the failover tests, on a free port of
//! 127.0.0.1: to a target port that can be switched (a proxy or a
//! managed endpoint following the primary, `mysql_failover.rs`), and cut
//! (the replication link of a Patroni member, `pg_support/patroni.rs`):
//! once cut it closes every connection and refuses new ones.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

pub struct Forward {
    pub port: u16,
    target: Arc<AtomicU16>,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Forward {
    /// Forwards every connection to `target` on 127.0.0.1, one thread per
    /// direction.
    pub fn to(target: u16) -> Forward {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().unwrap().port();
        let forward = Forward {
            port,
            target: Arc::new(AtomicU16::new(target)),
            cut: Arc::default(),
            open: Arc::default(),
        };
        let (to, is_cut, streams) = (
            Arc::clone(&forward.target),
            Arc::clone(&forward.cut),
            Arc::clone(&forward.open),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if is_cut.load(Ordering::SeqCst) {
                    continue;
                }
                let target = to.load(Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                streams
                    .lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut into);
                        let _ = into.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        forward
    }

    /// New connections go to `target` from now on.
    pub fn switch(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
    }

    /// Closes every connection and refuses the next ones, for good.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}
