//! A network namespace joined to this host by a veth pair, for silent
//! partitions (issue 20): a process started in it (`Netns::command`)
//! reaches the host at [`Netns::host_ip`], and [`Netns::partition`] makes
//! the namespace drop every packet to and from the host (nftables), so
//! that connections stay open on both ends with nothing getting through,
//! no RST, as a pulled cable or a dead switch port would leave them.
//! [`Netns::heal`] lets packets through again. The namespace, the veth
//! pair and the rules go when the value is dropped, also when the test
//! fails; `.ci/run` removes whatever a killed test left behind (their
//! names start with `plns`/`plv`).

#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// One namespace and its link to the host, on `10.<a>.<b>.0/24`.
pub struct Netns {
    name: String,
    host_if: String,
    subnet: (u8, u8),
}

/// Runs `ip`/`nft` with `args`; panics with its output when it fails.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    /// A new namespace with its veth pair up and addressed: the host is
    /// `10.a.b.1`, the namespace `10.a.b.2`.
    pub fn new() -> Netns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = std::process::id() % 10_000;
        // Interface names fit 15 bytes; subnets differ per process and
        // namespace (10.200-249.x.0/24).
        let netns = Netns {
            name: format!("plns{id}_{n}"),
            host_if: format!("plv{id}_{n}h"),
            subnet: (200 + (id % 50) as u8, (n % 250) as u8),
        };
        let ns_if = format!("plv{id}_{n}n");
        run("ip", &["netns", "add", &netns.name]);
        run(
            "ip",
            &[
                "link",
                "add",
                &netns.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &ns_if,
            ],
        );
        run("ip", &["link", "set", &ns_if, "netns", &netns.name]);
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", netns.host_ip()),
                "dev",
                &netns.host_if,
            ],
        );
        run("ip", &["link", "set", &netns.host_if, "up"]);
        netns.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", netns.ns_ip()),
            "dev",
            &ns_if,
        ]);
        netns.exec(&["ip", "link", "set", &ns_if, "up"]);
        netns.exec(&["ip", "link", "set", "lo", "up"]);
        netns
    }

    /// The host's address on the link.
    pub fn host_ip(&self) -> String {
        format!("10.{}.{}.1", self.subnet.0, self.subnet.1)
    }

    /// The namespace's address on the link.
    pub fn ns_ip(&self) -> String {
        format!("10.{}.{}.2", self.subnet.0, self.subnet.1)
    }

    /// The link's network, for `pg_hba.conf`.
    pub fn cidr(&self) -> String {
        format!("10.{}.{}.0/24", self.subnet.0, self.subnet.1)
    }

    fn exec(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// `program` to be run inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// From now on every packet between the namespace and the host is
    /// dropped, both ways, silently.
    pub fn partition(&self) {
        let host = self.host_ip();
        self.exec(&["nft", "add", "table", "inet", "picolease"]);
        for (chain, hook, field) in [("out", "output", "daddr"), ("in", "input", "saddr")] {
            self.exec(&[
                "nft",
                "add",
                "chain",
                "inet",
                "picolease",
                chain,
                &format!("{{ type filter hook {hook} priority 0; }}"),
            ]);
            self.exec(&[
                "nft",
                "add",
                "rule",
                "inet",
                "picolease",
                chain,
                "ip",
                field,
                &host,
                "drop",
            ]);
        }
    }

    /// Packets flow again.
    pub fn heal(&self) {
        self.exec(&["nft", "delete", "table", "inet", "picolease"]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and the
        // pair with it; the host end is deleted too in case it lingers.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}
