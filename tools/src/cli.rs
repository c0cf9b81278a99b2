//! The command line. Flags, event names, JSON keys and exit codes are a
//! contract: black-box tests in `tools/tests/` hold them to the letter.

use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::duration::parse_duration;

mod run_args;

pub use run_args::RunArgs;

/// Leader election for background work through a lease row in your SQL
/// database. Start with `picolease demo`.
#[derive(Debug, Parser)]
#[command(name = "picolease", version, about, long_about = None)]
pub struct Cli {
    /// The database: sqlite://PATH, sqlite::memory: or
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?OPTIONS].
    #[arg(
        long,
        env = "PICOLEASE_DB",
        default_value = "sqlite://picolease.db",
        global = true
    )]
    pub db: String,
    /// The lease table (a plain identifier).
    #[arg(long, default_value = picolease::DEFAULT_TABLE, global = true)]
    pub table: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the lease table if it is missing.
    Init,
    /// Show every lease: name, holder, epoch, time left; below the table,
    /// each lease's live preferred candidate (`run --priority`), if any.
    Status {
        /// One JSON array on stdout (with --watch: one row object per
        /// line).
        #[arg(long)]
        json: bool,
        /// Keep watching: print the table again whenever a row's holder,
        /// epoch or free/held state changes (with --json, each row once at
        /// start and again when it changes) until SIGINT or SIGTERM.
        #[arg(long)]
        watch: bool,
        /// List the live members of lease sets (`run` with several
        /// names) instead of the leases: holder and time left; then each
        /// lease's preferred candidate (`run --priority/--version-tag`),
        /// if one is live. With --json, one array of {"holder",
        /// "expires_in_ms"} per member, then {"holder", "expires_in_ms",
        /// "lease", "priority", "version_tag"} per candidate.
        #[arg(long, conflicts_with = "watch")]
        members: bool,
    },
    /// Contend for a lease until stopped; optionally run CMD while leader.
    ///
    /// Stops cleanly (CMD first, then the release, exit 0) on SIGTERM,
    /// SIGINT or SIGHUP; with `-- CMD`, exits with CMD's status when CMD
    /// exits by itself. SIGUSR1 is "hand over, then exit" (DESIGN §3
    /// "Preferred holders"): CMD first, then the lease goes to its
    /// preferred candidate (the live `--priority`/`--version-tag`
    /// candidate the last renewal read, on another node; else it is
    /// released), exit 0; with several names each held lease goes to the
    /// live member that ranks first for it (released when none is live).
    ///
    /// CMD runs under a guard process (`picolease __guard`, this binary)
    /// that holds the term's deadline (CLOCK_BOOTTIME) and kills CMD's whole
    /// process group by it even if `run` is killed, stopped or hung: SIGTERM
    /// at the deadline minus --grace, SIGKILL at the deadline; if `run`
    /// dies, CMD is stopped at once; if the guard dies, the kernel kills CMD
    /// (parent-death signal). CMD gets PICOLEASE_NAME, PICOLEASE_NODE (the
    /// --node value), PICOLEASE_HOLDER (the stored holder id, for fences)
    /// and PICOLEASE_EPOCH.
    ///
    /// --json events, one object per line, each with "event", "name",
    /// "node" and "unix_ms": "leader" (+ "holder", "epoch", "ttl_ms",
    /// "interval_ms"); "follower" (+
    /// "holder", "epoch", "reason":
    /// lost|expired|released|error|clock|handover|unhealthy|escalated);
    /// "handover" (+ "from": this process's holder id, "to": the node the
    /// lease is now reserved for, "epoch": the term handed over; after
    /// `picolease handover --to`);
    /// "observed" (+ "holder": another holder or null, "epoch"); "child" (+
    /// "pid": CMD's pid and process group, "epoch"); "child_exit" (+ "pid",
    /// "epoch", and "code" or "signal", e.g. "SIGKILL"); with --restart
    /// on-failure "work_failed" (+ "epoch", "code" or "signal", "restarts",
    /// "escalated", and "cool_down_ms" when escalated); with --health-cmd
    /// "healthy" and "unhealthy" (+ "epoch": the last term seen or null,
    /// "reason").
    Run(Box<RunArgs>),
    /// Administrative: free a lease and bump its epoch, fencing out its
    /// holder (--name N --force); or, after a failover or a restore the
    /// database could not detect, put every lease into a grace period
    /// (--all --after-failover; docs/operations.md §5.4): nobody's for
    /// --ttl, at an epoch past anything issued. Exit 0 when done, 1 when
    /// there is no such lease (or no lease at all), 2 on bad usage or a
    /// missing table.
    Release {
        /// The lease.
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        name: Option<String>,
        /// Required with --name: this takes the lease from whoever holds it.
        #[arg(long)]
        force: bool,
        /// Every lease and membership row of the table (with
        /// --after-failover).
        #[arg(long, requires = "after_failover")]
        all: bool,
        /// The database failed over or was restored and may have lost
        /// writes: hold every row for --ttl so no lost term is granted
        /// again (with --all).
        #[arg(long, requires = "all")]
        after_failover: bool,
        /// The longest ttl the lease's contenders run with: how long a row
        /// stays nobody's after --after-failover, or after --force on a
        /// PostgreSQL row another server incarnation wrote.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Administrative: ask the holder of a lease to hand it over (DESIGN §3
    /// "Planned handover"): at its next renewal it stops its work (CMD)
    /// and reserves the row for --to, which takes it at once at the next
    /// epoch; nobody else may for two intervals, then anyone may. Without
    /// --to, to the lease's preferred candidate if one is live, else the
    /// holder releases it. Waits for the holder (at most the
    /// row's time left and a second) and for the successor (at most the
    /// reservation and a second) and says what happened. Exit 0 when the
    /// term was handed over, 1 when the lease does not exist, is not held
    /// or the holder did not act in time (an older picolease ignores the
    /// request), 2 on bad usage.
    Handover {
        /// The lease.
        #[arg(long)]
        name: String,
        /// The node to hand it to: its --node name (or a library holder
        /// id). Omitted: the lease's preferred candidate (`run
        /// --priority/--version-tag`), if one is live and on another node;
        /// else the holder releases it to whoever comes next.
        #[arg(long, value_name = "NODE")]
        to: Option<String>,
    },
    /// Print every statement of the protocol (create, acquire, renew,
    /// release, force release, status, fence, lease-set batches) with its parameters, for
    /// contenders written in other languages. Touches no database.
    Sql {
        /// sqlite, postgres or mysql (MySQL 8 and MariaDB 10.6+; default:
        /// the dialect of --db).
        #[arg(long, value_name = "sqlite|postgres|mysql")]
        dialect: Option<String>,
        /// One JSON object on stdout: {"dialect", "table", "statements":
        /// {NAME: {"sql", "params"}}}.
        #[arg(long)]
        json: bool,
        /// A lease set's batch, survey, status and fence statements
        /// renewing by liveness, picolease's default for sets (DESIGN §9
        /// "Renewal by liveness"), instead of those renewing every row.
        #[arg(long)]
        by_liveness: bool,
    },
    /// A live election among N nodes on a temporary SQLite file: crash,
    /// clean handover, fenced maintenance loops, and the final account.
    Demo {
        /// How many nodes.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(2..=12))]
        nodes: u8,
        /// The lease ttl.
        #[arg(long, default_value = "2s", value_parser = parse_duration)]
        ttl: Duration,
        /// Share N leases (s0 … sN-1) between the nodes instead, and show
        /// the fair share moving as a node crashes, joins and leaves.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::demo::MAX_DEMO_LEASES)))]
        leases: Option<u32>,
        /// Also draw the run as an HTML page (`picolease timeline`) at FILE.
        #[arg(long, value_name = "FILE")]
        timeline: Option<std::path::PathBuf>,
    },
    /// Draw a run as one self-contained HTML page (inline SVG, readable
    /// offline): who led which lease when, leaderless gaps beside their
    /// bounds, crashes, handovers and CMD's starts and ends, and any two
    /// leaders of one lease in red. Reads `run --json` lines from FILEs
    /// (several processes' streams are merged by "unix_ms"; `-` or none
    /// is stdin), or those `demo`, `simulate` and `check` write with
    /// --timeline. Exit 0; 1 when two processes led one lease at once
    /// (each named on stderr); 2 for an unreadable input or a line that
    /// is not an event.
    Timeline {
        /// `run --json` streams.
        #[arg(value_name = "FILE")]
        inputs: Vec<String>,
        /// The page to write.
        #[arg(long, short, value_name = "FILE", default_value = "timeline.html")]
        output: std::path::PathBuf,
        /// The ttl of a term whose `leader` line does not say its own (lines
        /// of `run` do): a lease taken over sooner than this after its
        /// holder's last line, with no end of the holder's term between,
        /// had two leaders.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        ttl: Duration,
        /// The page's title.
        #[arg(long)]
        title: Option<String>,
    },
    /// Run the core's deterministic simulator (no database) and print the
    /// timeline and the bounds observed.
    Simulate {
        /// How many nodes (default 3; with --replay, the nodes the trace
        /// names).
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=16))]
        nodes: Option<u8>,
        /// The simulation seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The lease ttl.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        ttl: Duration,
        /// Faults, comma-separated, each KIND[:NODE]@TIME[+DURATION]: crash,
        /// restart, shutdown, pause, partition, failover, handover (the
        /// leader hands over to the next node; the target is the leader at
        /// the time unless :NODE is given), e.g. crash@20s,pause:1@30s+15s.
        /// Empty: a default schedule; `none`: no faults.
        #[arg(long, default_value = "")]
        faults: String,
        /// Replay a trace printed by `picolease check` step by step, with
        /// the check's default bounds, and show the violation it reaches.
        #[arg(long, value_name = "TRACE", conflicts_with_all = ["seed", "ttl", "faults"])]
        replay: Option<String>,
        /// With --replay: the trace is of `check --leases N` (each node a
        /// lease set of N leases).
        #[arg(long, value_name = "N", requires = "replay", default_value_t = 0)]
        leases: usize,
        /// With --replay: the trace is of `check --ranked`.
        #[arg(long, requires = "replay")]
        ranked: bool,
        /// Also draw the run (with --replay, the trace) as an HTML page
        /// (`picolease timeline`) at FILE.
        #[arg(long, value_name = "FILE")]
        timeline: Option<std::path::PathBuf>,
    },
    /// Exhaustive model check of the core: every schedule of a bounded
    /// world (clock ticks with drift, deliveries, losses, pauses, crashes,
    /// restarts, shutdowns), checking mutual exclusion, fencing, validity,
    /// gating and liveness. Progress on stderr; exit 0 complete and clean,
    /// 1 a violation or an incomplete search, 2 bad bounds.
    Check {
        /// How many nodes: 2 or 3.
        #[arg(long, default_value_t = 2)]
        nodes: usize,
        /// Check lease sets instead: each node the real `LeaseSet` over
        /// this many leases (1 to 3), with the per-lease properties and
        /// the share's (no stealing); bounded by depth (default 30, no
        /// fault). 0 (the default): one lease per node.
        #[arg(long, default_value_t = 0)]
        leases: usize,
        /// The longest path explored, in steps (default: per node count).
        #[arg(long)]
        depth: Option<usize>,
        /// Faults per path (default: per node count).
        #[arg(long)]
        faults: Option<usize>,
        /// Let the database fail over once, as one of the faults: a
        /// standby that copies it whenever the search says is promoted,
        /// losing the writes since its last copy, under a new server
        /// incarnation (DESIGN §3 "Failover"). Lone lease only; no twins.
        #[arg(long, conflicts_with = "leases")]
        failover: bool,
        /// Let the database fail over up to N times (1 or 2), each to the
        /// next of N standbys that copy it together: with 2, the second
        /// may lack what the first wrote after its promotion, a chain of
        /// two lossy failovers over three servers. Lone lease only.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=2), conflicts_with_all = ["leases", "failover"])]
        failovers: Option<u8>,
        /// A leader may hand its lease over to the next node (the step
        /// nN:handover, a fault; DESIGN §3 "Planned handover"); with
        /// --leases, a set's node hands its first lease over.
        #[arg(long, conflicts_with_all = ["failover", "failovers"])]
        handover: bool,
        /// Rank the nodes: node N has priority N+1, followers announce
        /// themselves and a leader yields to a better live candidate
        /// (DESIGN §3 "Preferred holders"); with --leases, membership rows
        /// carry the ranks and an outranked member hands its leases to a
        /// better one (DESIGN §9 "Preferred members"). Also checks that
        /// every yield goes to a node that outranks its holder. No twins;
        /// bounded by depth (default 30).
        #[arg(long, conflicts_with_all = ["failover", "failovers", "handover"])]
        ranked: bool,
        /// Every node has a health probe that passes at its start (healthy
        /// nodes announce themselves); a fault step nN:unhealthy makes one
        /// fail for good (DESIGN §5 "Work that fails"). Also checks that an
        /// unhealthy leader that read a live candidate yields to it. A lone
        /// lease only.
        #[arg(long, conflicts_with_all = ["failover", "failovers", "handover", "ranked", "leases"])]
        health: bool,
        /// One JSON object on stdout: {"nodes", "states", "transitions",
        /// "depth", "complete", "violations": [TRACE, ...]}, and "leases"
        /// with `--leases`.
        #[arg(long)]
        json: bool,
        /// Draw the first counterexample found (its trace replayed) as an
        /// HTML page (`picolease timeline`) at FILE.
        #[arg(long, value_name = "FILE")]
        timeline: Option<std::path::PathBuf>,
        /// The most memory the check may use (e.g. 512MiB, 8GiB; default:
        /// three quarters of the machine's available memory). A search
        /// that reaches it stops, reports the depth whose every path it
        /// checked, and exits 1 as not complete.
        #[arg(long, value_name = "SIZE", value_parser = crate::memory::parse_size)]
        memory: Option<u64>,
    },
    /// Measure this database for leases: statement round trip, renew
    /// latency through the driver, clean handover between contenders (with
    /// notifications) and crash-takeover lag past the row's expiry, each
    /// beside its floor measured on plain connections in the same run; then
    /// recommend a ttl and interval. Works in a scratch table that it
    /// creates and drops. Progress on stderr; exit 2 for a bad value, 1 for
    /// an unreachable database.
    Bench {
        /// Clean handovers and crash takeovers to time (each crash waits
        /// out a 400 ms ttl).
        #[arg(long, default_value_t = 10, allow_negative_numbers = true, value_parser = clap::value_parser!(u16).range(1..=1000))]
        rounds: u16,
        /// One JSON object on stdout, in milliseconds: {"rtt_p50_ms",
        /// "renew_p50_ms", "renew_p99_ms", "renew_floor_p50_ms",
        /// "clean_handover_p50_ms", "clean_handover_max_ms",
        /// "clean_handover_floor_p50_ms", "planned_handover_p50_ms",
        /// "planned_handover_max_ms", "planned_to_clean_handover_p50_ratio"
        /// (a ratio), "crash_lag_p50_ms", "crash_lag_max_ms",
        /// "recommended_ttl_ms", "recommended_interval_ms"}.
        #[arg(long)]
        json: bool,
        /// Instead of the above: what keeping N leases among --nodes `run`
        /// processes costs the database in steady state (PostgreSQL: WAL,
        /// the table's row updates and commits per second, beside the same
        /// with no process running). JSON keys: "leases", "nodes",
        /// "ttl_ms", "window_s", "held", "settled_s" (when every lease was
        /// first held, null if not while settling), "exited", "wal_bytes_per_s",
        /// "row_updates_per_s", "row_updates_per_interval",
        /// "commits_per_s", "floor_wal_bytes_per_s", "floor_commits_per_s".
        #[arg(long, value_name = "N", requires = "nodes", value_parser = clap::value_parser!(u32).range(1..=100_000))]
        leases: Option<u32>,
        /// With --leases: how many `run` processes share them.
        #[arg(long, value_name = "P", requires = "leases", value_parser = clap::value_parser!(u16).range(1..=64))]
        nodes: Option<u16>,
        /// With --leases: the processes' ttl (default 10s).
        #[arg(long, value_name = "DURATION", requires = "leases", value_parser = parse_duration)]
        ttl: Option<Duration>,
        /// With --leases: how long to let them settle before measuring
        /// (default 25s).
        #[arg(long, value_name = "DURATION", requires = "leases", value_parser = parse_duration)]
        settle: Option<Duration>,
        /// With --leases: how long to measure (default 20s).
        #[arg(long, value_name = "DURATION", requires = "leases", value_parser = parse_duration)]
        window: Option<Duration>,
        /// With --leases: the processes renew every held row each interval
        /// (`run --every-row`) instead of by liveness (the default, DESIGN
        /// §9 "Renewal by liveness"); the JSON's "by_liveness" says which.
        #[arg(long, requires = "leases")]
        every_row: bool,
        /// With --leases: renew by liveness, the default (kept for the
        /// scripts that name it).
        #[arg(long, requires = "leases", hide = true, conflicts_with = "every_row")]
        by_liveness: bool,
    },
    /// The guard between `run` and CMD (internal: started by `run`).
    #[command(name = "__guard", hide = true)]
    Guard {
        /// Between SIGTERM and SIGKILL, in milliseconds.
        #[arg(long)]
        grace_ms: u64,
        /// The term's deadline: CLOCK_BOOTTIME nanoseconds.
        #[arg(long)]
        deadline_ns: u64,
        /// The command.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}
