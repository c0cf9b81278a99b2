//! The release wake-up of a lone lease on MySQL, which has no `LISTEN`: a
//! named user lock (`GET_LOCK`) that the leader's statement session holds
//! while it leads, and that a follower waits on from a second connection.
//! The leader gives the lock up right after its release commits (or its
//! session dies with it), so a waiting follower returns from `GET_LOCK`
//! at once and tells its task to look, as a PostgreSQL notice does.
//!
//! The lock is only a wake-up, never a safety mechanism: it is per
//! session and local to one server (Galera grants it on the node that
//! took it only, so followers on other nodes are not woken), unsafe for
//! statement replication, and nothing decides on it. Who leads is still the row's and the epoch's
//! (DESIGN §3). Whenever it is missing (refused, behind a proxy, held by a
//! paused process's session, or taken by nobody) followers fall back to
//! their polls, with the core's expiry-aware takeover.
//!
//! Costs: the leader sends one `GET_LOCK(name, 0)` after the acquire that
//! starts its term (again after a renewal, while it does not hold it) and
//! one `RELEASE_LOCK` after its release; a waiting follower, one
//! `IS_USED_LOCK` and one `GET_LOCK` per interval on its second connection
//! (when no other session holds the lock, a few more `IS_USED_LOCK`s, 20
//! ms apart and doubling, before it settles at one per interval).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use picolease_core::{Operation, Reply};
use tokio::sync::mpsc;

use super::connect::MysqlConnector;
use crate::server::Notice;

/// The longest pause between failed attempts to wait (a `GET_LOCK` the
/// server refuses is retried this seldom).
const MOST_PATIENT: Duration = Duration::from_secs(30);

/// The first pause after a failed attempt, doubled per failure.
const FIRST_RETRY: Duration = Duration::from_millis(500);

/// How often a new leader tries the lock at its term's start, and the
/// pause between tries (at most 40 ms before its first renewal).
const TAKE_TRIES: u32 = 5;
const TAKE_PAUSE: Duration = Duration::from_millis(10);

/// The first pause of a follower that finds the lock held by no other
/// session, doubled per look up to an interval (see `wait_once`).
const FIRST_LOOK: Duration = Duration::from_millis(20);

/// The name of the user lock that wakes followers of `lease` in
/// `table` of `database` (the table's schema when it names one): what
/// `IS_USED_LOCK(…)` takes, to see which session leads. User locks are
/// server-wide and their names at most 64 characters, so the name is a
/// fixed prefix and a 64-bit FNV-1a hash of all three.
pub fn wake_lock_name(database: &str, table: &str, lease: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in [database, table, lease].join("\0").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("picolease:{hash:016x}")
}

/// One lease's wake-up lock: its name, and which of this node's
/// statement sessions holds it (0: none).
#[derive(Debug)]
pub(crate) struct WakeLock {
    name: String,
    /// The lease, as the notice names it.
    lease: String,
    held_by: AtomicU32,
}

impl WakeLock {
    /// The lock of `lease` in `table` of database `database`
    /// ([`wake_lock_name`]).
    pub(crate) fn new(database: &str, table: &str, lease: &str) -> Self {
        WakeLock {
            name: wake_lock_name(database, table, lease),
            lease: lease.to_string(),
            held_by: AtomicU32::new(0),
        }
    }

    /// The lock's name, as `GET_LOCK` takes it.
    #[cfg(test)]
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn held_by(&self) -> u32 {
        self.held_by.load(Ordering::Relaxed)
    }

    /// The leader's side, after `operation` was answered `reply` on
    /// `conn`: take the lock when a term starts (or while a leading
    /// session lacks it), give it up when the term ends. Never fails the
    /// statement: a lock that cannot be had only costs the followers
    /// their wake-up.
    pub(crate) async fn follow(&self, conn: &mut Conn, operation: Operation, reply: &Reply) {
        let mine = self.held_by() == conn.id();
        let leading = match (operation, reply) {
            (Operation::Acquire, Reply::Acquired { .. }) => true,
            (
                Operation::Renew { .. },
                Reply::Accepted | Reply::HandOverAsked { .. } | Reply::CandidateSeen { .. },
            ) => true,
            (Operation::Renew { .. }, Reply::Failed(_)) => return,
            _ => false,
        };
        if leading && !mine {
            // At a term's start the followers its predecessor's release
            // woke pass the lock from one to the next for a few round
            // trips: look a few times, TAKE_PAUSE apart.
            let tries = if operation == Operation::Acquire {
                TAKE_TRIES
            } else {
                1
            };
            for attempt in 1..=tries {
                match conn
                    .exec_first::<Option<i64>, _, _>("SELECT GET_LOCK(?, 0)", (&self.name,))
                    .await
                {
                    Ok(Some(Some(1))) => {
                        self.held_by.store(conn.id(), Ordering::Relaxed);
                        return;
                    }
                    Ok(_) if attempt < tries => tokio::time::sleep(TAKE_PAUSE).await,
                    Ok(_) => {
                        tracing::debug!(lock = %self.name, "picolease: the wake-up lock is held by another session")
                    }
                    Err(e) => {
                        tracing::debug!(lock = %self.name, error = %e, "picolease: could not take the wake-up lock");
                        return;
                    }
                }
            }
        } else if !leading && mine {
            self.held_by.store(0, Ordering::Relaxed);
            if let Err(e) = conn.exec_drop("DO RELEASE_LOCK(?)", (&self.name,)).await {
                tracing::debug!(lock = %self.name, error = %e, "picolease: could not give the wake-up lock up");
            }
        }
    }
}

/// Spawns the follower's side: a task on a connection of its own that
/// waits on the lock while another session holds it and, when that
/// session gives it up, tells the driver (one pending notice is enough).
/// Ends once `notices` is closed or the handle is aborted.
pub(crate) fn spawn_waker(
    connector: MysqlConnector,
    lock: Arc<WakeLock>,
    interval: Duration,
    notices: mpsc::Sender<Notice>,
) -> tokio::task::JoinHandle<()> {
    // Whole seconds, the unit both servers take.
    let wait = interval.as_secs().max(1);
    let bound = Duration::from_secs(wait) + Duration::from_secs(10);
    tokio::spawn(async move {
        let mut failures: u32 = 0;
        let mut idle = FIRST_LOOK;
        loop {
            let outcome = async {
                let mut conn = connector.connect(bound).await?;
                loop {
                    let waited =
                        wait_once(&mut conn, &lock, (wait, interval), &mut idle, &notices).await?;
                    failures = 0;
                    if !waited {
                        return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(());
                    }
                }
            };
            tokio::select! {
                outcome = outcome => match outcome {
                    Ok(()) => return,
                    Err(e) => tracing::debug!(lock = %lock.name, error = %e, "picolease: the wake-up connection failed"),
                },
                () = notices.closed() => return,
            }
            let pause = FIRST_RETRY.saturating_mul(1 << failures.min(6));
            failures += 1;
            tokio::time::sleep(pause.min(MOST_PATIENT)).await;
        }
    })
}

/// One round of the follower's wait (`GET_LOCK` for `wait` seconds):
/// `Ok(false)` once the driver is gone. When no other session holds the
/// lock there is nothing to wait for, and the round is a pause of `idle`,
/// which doubles per such round up to `interval` and starts again at
/// [`FIRST_LOOK`] once a holder is seen. A new leader may find the lock
/// held for a moment by a follower its predecessor's release woke (its
/// `GET_LOCK(name, 0)` then fails, and it tries again at its next
/// renewal): a whole interval's pause then would miss that leader's own
/// handover or release, which came after its next renewal took the lock
/// (seen: a MariaDB rolling replacement's second handover took 505 ms,
/// one poll, instead of 8–11 ms).
async fn wait_once(
    conn: &mut Conn,
    lock: &WakeLock,
    (wait, interval): (u64, Duration),
    idle: &mut Duration,
    notices: &mpsc::Sender<Notice>,
) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
    if notices.is_closed() {
        return Ok(false);
    }
    let holder: Option<Option<u64>> = conn
        .exec_first("SELECT IS_USED_LOCK(?)", (&lock.name,))
        .await?;
    let holder = holder.flatten();
    if holder.is_none_or(|id| id == u64::from(lock.held_by())) {
        tokio::time::sleep(*idle).await;
        *idle = idle.saturating_mul(2).min(interval);
        return Ok(true);
    }
    *idle = FIRST_LOOK;
    let got: Option<Option<i64>> = conn
        .exec_first("SELECT GET_LOCK(?, ?)", (&lock.name, wait))
        .await?;
    if got.flatten() == Some(1) {
        conn.exec_drop("DO RELEASE_LOCK(?)", (&lock.name,)).await?;
        tracing::debug!(lock = %lock.name, "picolease: the leader gave the wake-up lock up");
        let notice = Notice::Released(lock.lease.clone());
        // Full means a notice is already pending: enough.
        if let Err(mpsc::error::TrySendError::Closed(_)) = notices.try_send(notice) {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::WakeLock;

    #[test]
    fn lock_names_fit_the_servers_limit_and_differ_by_database_table_and_lease() {
        let long = "x".repeat(300);
        let names = [
            WakeLock::new("test", "picolease_leases", "reaper"),
            WakeLock::new("other", "picolease_leases", "reaper"),
            WakeLock::new("test", "other_leases", "reaper"),
            WakeLock::new("test", "picolease_leases", "cleaner"),
            WakeLock::new(&long, &long, &long),
        ];
        for lock in &names {
            assert!(lock.name().len() <= 64, "{}", lock.name());
            assert!(lock.name().starts_with("picolease:"), "{}", lock.name());
        }
        let distinct: std::collections::BTreeSet<_> = names.iter().map(WakeLock::name).collect();
        assert_eq!(distinct.len(), names.len());
        // Stable across processes: the same inputs, the same name.
        assert_eq!(
            WakeLock::new("test", "picolease_leases", "reaper").name(),
            names[0].name()
        );
    }
}
