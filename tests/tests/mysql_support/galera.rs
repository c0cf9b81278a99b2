//! A private three-node MariaDB Galera cluster (galera-4, installed with
//! MariaDB): each node a [`Server`] of its own on free ports (SQL, group
//! communication, incremental and full state transfer), the first
//! bootstrapping the cluster and making the database and the user, the
//! others joining by an rsync state transfer. A node may run on a skewed
//! clock (libfaketime, Debian's `faketime`), as a node whose NTP failed
//! would.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use super::Server;

/// libfaketime, as Debian's `faketime` installs it.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// One node to start: its `server_id` and its clock's offset, if skewed
/// (libfaketime's `FAKETIME` syntax, e.g. `+1.5s`).
pub struct Node {
    pub server_id: u32,
    pub skew: Option<&'static str>,
}

/// The running cluster; every node killed and removed when dropped.
pub struct Galera {
    pub nodes: Vec<Option<Server>>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Galera {
    /// Starts `nodes` in order, each joining the first, and waits until
    /// the cluster has them all, synced.
    pub fn start(nodes: &[Node]) -> Galera {
        assert!(
            std::path::Path::new("/usr/lib/galera/libgalera_smm.so").exists(),
            "galera-4 must be installed (it comes with Debian's mariadb-server)"
        );
        let mut started: Vec<Option<Server>> = Vec::new();
        let mut first_gcomm = 0;
        for (i, node) in nodes.iter().enumerate() {
            let (gcomm, ist, sst) = (free_port(), free_port(), free_port());
            let cluster = if i == 0 {
                first_gcomm = gcomm;
                "gcomm://".to_string()
            } else {
                format!("gcomm://127.0.0.1:{first_gcomm}")
            };
            let mut args = vec![
                "--wsrep-on=ON".to_string(),
                "--wsrep-provider=/usr/lib/galera/libgalera_smm.so".to_string(),
                format!("--wsrep-cluster-address={cluster}"),
                format!(
                    "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{gcomm};\
                     ist.recv_addr=127.0.0.1:{ist}"
                ),
                format!("--wsrep-node-address=127.0.0.1:{gcomm}"),
                format!("--wsrep-sst-receive-address=127.0.0.1:{sst}"),
                "--wsrep-sst-method=rsync".to_string(),
                "--binlog-format=ROW".to_string(),
                "--innodb-autoinc-lock-mode=2".to_string(),
                format!("--server-id={}", node.server_id),
            ];
            if i == 0 {
                args.push("--wsrep-new-cluster".to_string());
            }
            let env: Vec<(&str, &str)> = match node.skew {
                Some(skew) => {
                    assert!(
                        std::path::Path::new(LIBFAKETIME).exists(),
                        "Debian's faketime must be installed for a skewed node"
                    );
                    vec![
                        ("LD_PRELOAD", LIBFAKETIME),
                        ("FAKETIME", skew),
                        // Galera's and InnoDB's timers keep real time:
                        // only the wall clock (UTC_TIMESTAMP) is skewed.
                        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
                        ("FAKETIME_NO_CACHE", "1"),
                    ]
                }
                None => Vec::new(),
            };
            let server = Server::launch(&args, &env, i == 0);
            started.push(Some(server));
        }
        let galera = Galera { nodes: started };
        galera.wait_synced(nodes.len());
        galera
    }

    /// The node `i` (panics if it was killed).
    pub fn node(&self, i: usize) -> &Server {
        self.nodes[i].as_ref().expect("a live node")
    }

    /// Waits until every live node sees `size` nodes and is synced.
    fn wait_synced(&self, size: usize) {
        let started = Instant::now();
        for node in self.nodes.iter().flatten() {
            loop {
                let status = node
                    .try_sql(
                        "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                         WHERE VARIABLE_NAME IN ('wsrep_cluster_size', 'wsrep_local_state_comment') \
                         ORDER BY VARIABLE_NAME",
                    )
                    .unwrap_or_default();
                let status: Vec<&str> = status.lines().collect();
                if status == [size.to_string().as_str(), "Synced"] {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(90),
                    "the Galera cluster did not form: {status:?}; {}",
                    std::fs::read_to_string(node.dir().join("err")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Kills node `i` (SIGKILL: the machine's crash).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut node) = self.nodes[i].take() {
            node.kill();
        }
    }
}
