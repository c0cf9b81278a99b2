//! `picolease run`'s arguments: one lease or a set, CMD and its
//! supervision (grace, restarts, health probe), ranks, metrics.

use std::time::Duration;

use clap::Args;

use crate::duration::parse_duration;

/// Options of `picolease run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lease to contend for. Repeat it, or write a range `{A..B}`
    /// (quoted: `--name 's{0..199}'` is s0 … s199; `{00..99}` pads to
    /// A's width), to contend for several leases in one process with a
    /// fair share between the processes: then every event's "name" says
    /// which lease, one CMD runs per held lease, a CMD that exits by
    /// itself gives its lease up (run goes on), and run exits 0 on a
    /// signal. At most 100,000 names.
    #[arg(long, required = true)]
    pub name: Vec<String>,
    /// This node's name (a host or pod name; two processes may share it:
    /// the stored holder id adds a per-process incarnation, NAME#xxxxxx).
    /// Default: host, pid and a random suffix.
    #[arg(long)]
    pub node: Option<String>,
    /// How long an acquisition or renewal holds the lease.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// How often to renew or poll (default: ttl/4; must be below ttl/2).
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// When a term ends, how long between SIGTERM and SIGKILL to CMD's
    /// process group. When renewals keep failing, SIGTERM goes out this
    /// long before the deadline and SIGKILL at it. Must be below
    /// ttl·(1 − ρ) − 1ms − interval − request timeout (ρ = 1 %), so renewals
    /// that succeed never trigger it; 0 kills at the deadline. Default:
    /// half that bound, at most 5s.
    #[arg(long, value_parser = parse_duration)]
    pub grace: Option<Duration>,
    /// This node's priority as a candidate (DESIGN §3 "Preferred
    /// holders"): a leader hands the lease over, by its own handover, to a
    /// live candidate of higher priority, or of equal priority and a newer
    /// --version-tag. 0 (the default) with no --version-tag announces
    /// nothing. With several names the membership row carries the rank:
    /// the leases are shared among the live members of the best rank, and
    /// a member that a live one outranks hands its leases to those (DESIGN
    /// §9 "Preferred members").
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub priority: u32,
    /// This node's version (1.28.0, v2.1, 1.29.0-rc.1; up to 64 bytes): at
    /// equal priority a newer version is preferred, and a tag that is not
    /// a version ranks below every version.
    #[arg(long, value_name = "TAG")]
    pub version_tag: Option<String>,
    /// SIGTERM, SIGINT and SIGHUP hand the lease (or, with several
    /// names, every held lease) over, then exit, as SIGUSR1 always does
    /// (see above), instead of releasing.
    #[arg(long)]
    pub handover_on_term: bool,
    /// One JSON object per line for each event (see above).
    #[arg(long)]
    pub json: bool,
    /// With several names: renew every held row each interval, instead of
    /// by liveness (the default, DESIGN §9 "Renewal by liveness": one row
    /// per node per interval, a lease row written only when it changes
    /// hands). Needed on MySQL proper, which refuses the default's
    /// statements (MariaDB runs them); a fleet may mix both shapes.
    #[arg(long)]
    pub every_row: bool,
    /// With several names: renew by liveness, the default (kept for the
    /// scripts that name it).
    #[arg(long, hide = true, conflicts_with = "every_row")]
    pub by_liveness: bool,
    /// Serve HTTP on ADDR (IP:PORT or localhost:PORT) while running:
    /// GET /metrics (Prometheus text), /leader (200 when leading, else
    /// 503; {"name", "holder", "epoch"}) and /healthz (503 only when the
    /// election loop is wedged).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// `on-failure`: a CMD that fails by itself (a non-zero exit or a
    /// signal it was not sent) starts again in the same term after a
    /// backoff (--restart-backoff, doubling up to 30s), and past
    /// --restart-limit the lease is handed to another node (the live
    /// candidate the last renewal read, else released) and this node
    /// stands aside for --cool-down (DESIGN §5 "Work that fails"). `no`
    /// (the default): a CMD that exits by itself ends a lone lease's run
    /// with its status, and gives a set's lease up.
    #[arg(long, value_name = "POLICY", default_value = "no", value_parser = ["no", "on-failure"])]
    pub restart: String,
    /// With --restart on-failure: at most N restarts within PERIOD; one
    /// more failure escalates.
    /// Default: 3/60s.
    #[arg(long, value_name = "N/PERIOD", value_parser = parse_restart_limit)]
    pub restart_limit: Option<RestartLimit>,
    /// With --restart on-failure: the wait before the first restart
    /// (default 1s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub restart_backoff: Option<Duration>,
    /// How long a node whose CMD escalated stands aside: it counts as
    /// unhealthy (announces nothing, leaves a lapsed lease to healthy
    /// nodes for two intervals, and a degraded leader of its own keeps the
    /// lease only while no healthy node is there). With --restart
    /// on-failure; default 60s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cool_down: Option<Duration>,
    /// A health probe, run with `sh -c` every --health-interval: exit 0
    /// within --health-timeout is healthy. Unhealthy, a follower announces
    /// nothing and leaves a lapsed lease to healthy nodes for two
    /// intervals, and a leader hands the lease to a healthy live
    /// candidate (healthy nodes with a probe announce themselves); with no
    /// healthy node one still leads. With several names it is the set
    /// member's health: unhealthy, the member hands its leases to the
    /// healthy members and aims for none.
    #[arg(long, value_name = "CMD")]
    pub health_cmd: Option<String>,
    /// How often the probe runs (default: the interval).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub health_interval: Option<Duration>,
    /// How long one run of the probe may take (default: the health
    /// interval); longer is unhealthy, and the probe is killed.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub health_timeout: Option<Duration>,
    /// The command to run while leader (under the guard; see above).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `--restart-limit N/PERIOD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartLimit {
    /// Restarts allowed within the period.
    pub restarts: u32,
    /// The period.
    pub period: Duration,
}

/// Parses `3/60s`.
fn parse_restart_limit(text: &str) -> Result<RestartLimit, String> {
    let bad =
        || format!("{text:?} is not N/PERIOD (e.g. 3/60s: at most 3 restarts within 60 seconds)");
    let (count, period) = text.split_once('/').ok_or_else(bad)?;
    let restarts = count.trim().parse::<u32>().map_err(|_| bad())?;
    let period = parse_duration(period)?;
    if period.is_zero() {
        return Err(format!("{text:?}: the period must be above zero"));
    }
    Ok(RestartLimit { restarts, period })
}
