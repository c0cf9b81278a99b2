//! The command line. Flags, event names, JSON keys and exit codes are a
//! contract: black-box tests in `tools/tests/` hold them to the letter.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::duration::parse_duration;

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
    /// Show every lease: name, holder, epoch, time left.
    Status {
        /// One JSON array on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Contend for a lease until stopped; optionally run CMD while leader.
    Run(RunArgs),
    /// Administrative: free a lease and bump its epoch, fencing out its holder.
    Release {
        /// The lease.
        #[arg(long)]
        name: String,
        /// Required: this takes the lease from whoever holds it.
        #[arg(long)]
        force: bool,
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
    },
    /// Run the core's deterministic simulator (no database) and print the
    /// timeline and the bounds observed.
    Simulate {
        /// How many nodes.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=16))]
        nodes: u8,
        /// The simulation seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The lease ttl.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        ttl: Duration,
        /// Faults, comma-separated, each KIND[:NODE]@TIME[+DURATION]: crash,
        /// restart, shutdown, pause, partition (the target is the leader at
        /// the time unless :NODE is given), e.g. crash@20s,pause:1@30s+15s.
        /// Empty: a default schedule; `none`: no faults.
        #[arg(long, default_value = "")]
        faults: String,
    },
}

/// Options of `picolease run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lease to contend for.
    #[arg(long)]
    pub name: String,
    /// This contender's id (default: host, pid and a random suffix).
    #[arg(long)]
    pub node: Option<String>,
    /// How long an acquisition or renewal holds the lease.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// How often to renew or poll (default: ttl/4; must be below ttl/2).
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// After SIGTERM to CMD on demotion, how long before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,
    /// One JSON object per line for each transition.
    #[arg(long)]
    pub json: bool,
    /// The command to run while leader.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}
