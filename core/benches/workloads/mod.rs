//! The steady-state workloads of one `LeaseState` — a leader renewing and a
//! follower polling a lease held by someone else — shared by the `step`
//! benchmark and the allocation test (`core/tests/step_allocations.rs`).
//!
//! A *step* is one input plus draining the commands it produced, as a
//! driver does. Each cycle here is two steps: the timeout that sends the
//! statement, and the statement's reply.

use std::hint::black_box;
use std::time::Duration;

use picolease_core::{
    Command, Config, Epoch, HolderId, Instant, LeaseName, LeaseState, Operation, Reply, RequestId,
};

/// Reply latency in the workloads.
const RTT: Duration = Duration::from_millis(1);

/// Drains the commands of one input; returns the request of the `Execute`
/// among them, if any, and how many there were.
#[inline]
fn drain(lease: &mut LeaseState) -> (Option<RequestId>, usize) {
    let mut sent = None;
    let mut count = 0;
    while let Some(command) = lease.poll_command() {
        count += 1;
        if let Command::Execute { request, .. } = command {
            sent = Some(request);
        }
        black_box(&command);
    }
    (sent, count)
}

fn config(holder: &str) -> Config {
    Config::new(
        LeaseName::new("bench").expect("valid"),
        HolderId::new(holder).expect("valid"),
    )
}

/// A node that leads at epoch 1 and renews every interval.
pub struct Leader {
    lease: LeaseState,
    now: Instant,
}

impl Leader {
    /// Acquires the lease and settles into renewing.
    pub fn new() -> Self {
        let mut lease = LeaseState::new(config("leader"), Instant::ZERO).expect("valid config");
        lease.handle_timeout(Instant::ZERO);
        let (Some(id), _) = drain(&mut lease) else {
            panic!("no acquire")
        };
        let now = Instant::ZERO + RTT;
        lease.handle_reply(
            now,
            id,
            Reply::Acquired {
                epoch: Epoch::new(1),
            },
        );
        drain(&mut lease);
        assert!(lease.leadership().is_leader());
        let mut leader = Leader { lease, now };
        // One cycle so every lazy path has run once.
        leader.cycle();
        leader
    }

    /// Step 1: the renew timer fires (`Execute Renew`).
    #[inline]
    pub fn timeout_step(&mut self) -> RequestId {
        self.now = self.lease.poll_timeout().expect("running");
        self.lease.handle_timeout(self.now);
        let (sent, count) = drain(&mut self.lease);
        debug_assert_eq!(count, 1);
        sent.expect("a renew")
    }

    /// Step 2: the renew is accepted (no command).
    #[inline]
    pub fn reply_step(&mut self, request: RequestId) -> usize {
        self.now = self.now + RTT;
        self.lease.handle_reply(self.now, request, Reply::Accepted);
        drain(&mut self.lease).1
    }

    /// A whole renew cycle: two steps.
    #[inline]
    pub fn cycle(&mut self) -> usize {
        let request = self.timeout_step();
        self.reply_step(request)
    }

    /// A step with nothing due: an input and an empty drain (the baseline).
    #[inline]
    pub fn idle_step(&mut self) -> usize {
        self.lease.handle_timeout(self.now);
        drain(&mut self.lease).1
    }

    /// The machine, for checks.
    pub fn lease(&self) -> &LeaseState {
        &self.lease
    }
}

/// A node that polls a lease held by another node at epoch 7.
pub struct Follower {
    lease: LeaseState,
    now: Instant,
    holder: HolderId,
}

impl Follower {
    /// Learns the holder once (which publishes it) and settles into polling.
    pub fn new() -> Self {
        let lease = LeaseState::new(config("follower"), Instant::ZERO).expect("valid config");
        let mut follower = Follower {
            lease,
            now: Instant::ZERO,
            holder: HolderId::new("leader").expect("valid"),
        };
        follower.cycle();
        assert_eq!(
            follower.lease.leadership().holder.as_ref(),
            Some(&follower.holder)
        );
        follower.cycle();
        follower
    }

    /// Step 1: the poll timer fires (`Execute Acquire`).
    #[inline]
    pub fn timeout_step(&mut self) -> RequestId {
        self.now = self.lease.poll_timeout().expect("running");
        self.lease.handle_timeout(self.now);
        let (sent, _) = drain(&mut self.lease);
        sent.expect("an acquire")
    }

    /// Step 2: the row is held by the same holder at the same epoch (no
    /// command: the leadership in view did not change).
    #[inline]
    pub fn reply_step(&mut self, request: RequestId) -> usize {
        self.now = self.now + RTT;
        let reply = Reply::Held {
            holder: Some(self.holder.clone()),
            epoch: Epoch::new(7),
            expires_in: Duration::from_secs(9),
        };
        self.lease.handle_reply(self.now, request, reply);
        drain(&mut self.lease).1
    }

    /// A whole poll cycle: two steps.
    #[inline]
    pub fn cycle(&mut self) -> usize {
        let request = self.timeout_step();
        self.reply_step(request)
    }

    /// The machine, for checks.
    pub fn lease(&self) -> &LeaseState {
        &self.lease
    }
}

/// The other baseline: one command through a bare `VecDeque`, the queue
/// the machine drains from.
pub struct QueueBaseline {
    queue: std::collections::VecDeque<Command>,
    n: u64,
}

impl QueueBaseline {
    /// A queue with room for a few commands.
    pub fn new() -> Self {
        QueueBaseline {
            queue: std::collections::VecDeque::with_capacity(16),
            n: 0,
        }
    }

    /// Push one `Execute`, pop it.
    #[inline]
    pub fn step(&mut self) -> Option<Command> {
        self.n += 1;
        self.queue.push_back(Command::Execute {
            request: RequestId(self.n),
            operation: Operation::Acquire,
        });
        self.queue.pop_front()
    }
}
