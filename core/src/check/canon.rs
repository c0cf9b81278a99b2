//! State fingerprints: what tells two model states apart, up to the
//! symmetries that cannot change what happens next.
//!
//! - **Time shifts.** Instants are kept relative to their own clock (a
//!   node's to its local clock, the row's expiry to the database clock);
//!   instants further in the past than any timing of the protocol reaches
//!   are clamped, as are a row's expiry once lapsed. Clocks themselves are
//!   left out: only skews and the drift anchors remain.
//! - **Epochs and request ids** are replaced by their rank among the values
//!   present: the machine and the database only compare them and draw new
//!   ones above every existing one (the row's epoch is the maximum of all
//!   epochs in the system; a node's next request id the maximum of its ids).
//! - **Node symmetry.** Nodes differ only by holder id, which the machine
//!   and the statements only compare; the fingerprint is the least encoding
//!   over every renaming of the nodes.
//! - The jitter generator's state is left out (jitter is 0).
//!
//! The encoding is a vector of integers; its 128-bit hash is what the
//! search stores.

use super::bounds::TICK;
use super::channel::{Delivery, Request};
use super::world::{parse_holder, Node, World, LEASE};
use crate::names::Epoch;
use crate::protocol::{Demotion, Failure, Operation, Reply, RequestId, Role};
use crate::sim::DB_EPOCH_MS;
use crate::state::Snapshot;
use crate::time::Instant;

/// Every renaming of 2 or 3 nodes: `perm[old] = new`.
const PERMS_2: [[usize; 3]; 2] = [[0, 1, 2], [1, 0, 2]];
const PERMS_3: [[usize; 3]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

/// Reused buffers, so fingerprinting does not allocate per state.
#[derive(Default)]
pub(crate) struct Fingerprinter {
    epochs: Vec<u64>,
    ids: Vec<Vec<u64>>,
    best: Vec<i64>,
    current: Vec<i64>,
    snapshots: Vec<Option<Snapshot>>,
}

struct Ctx<'a> {
    world: &'a World,
    perm: [usize; 3],
    epochs: &'a [u64],
    ids: &'a [Vec<u64>],
    snapshots: &'a [Option<Snapshot>],
    /// How far into the past an instant still matters, in ticks.
    horizon: i64,
    ttl: i64,
}

impl Fingerprinter {
    /// The 128-bit fingerprint of `world` up to the symmetries above.
    pub(crate) fn fingerprint(&mut self, world: &World, ttl: u32, interval: u32) -> u128 {
        self.snapshots.clear();
        self.snapshots.extend(
            world
                .nodes
                .iter()
                .map(|n| n.lease.as_ref().map(|l| l.snapshot())),
        );
        self.collect_epochs(world);
        self.collect_ids(world);
        // Ranked nodes (`Bounds::ranked`) are not interchangeable.
        let perms: &[[usize; 3]] = if world.ranked {
            &PERMS_3[..1]
        } else if world.nodes.len() == 3 {
            &PERMS_3
        } else {
            &PERMS_2
        };
        self.best.clear();
        for (k, perm) in perms.iter().enumerate() {
            let ctx = Ctx {
                world,
                perm: *perm,
                epochs: &self.epochs,
                ids: &self.ids,
                snapshots: &self.snapshots,
                horizon: i64::from(ttl + interval + 2),
                ttl: i64::from(ttl),
            };
            self.current.clear();
            ctx.encode(&mut self.current);
            if k == 0 || self.current < self.best {
                std::mem::swap(&mut self.best, &mut self.current);
            }
        }
        hash128(&self.best)
    }

    fn collect_epochs(&mut self, world: &World) {
        let e = &mut self.epochs;
        e.clear();
        if let Some(row) = world.db.row(LEASE) {
            e.push(u64::try_from(row.epoch).unwrap_or(0));
        }
        for row in world.standbys.iter().filter_map(|s| s.row(LEASE)) {
            e.push(u64::try_from(row.epoch).unwrap_or(0));
        }
        for issued in [world.issued, world.issued_before] {
            e.push(u64::try_from(issued).unwrap_or(0));
        }
        e.extend(world.outlived.iter().flatten().map(|e| e.get()));
        e.extend(world.last_epoch.iter().flatten().map(|e| e.get()));
        if let Some(req) = &world.stray {
            e.extend(req.operation.epoch().map(Epoch::get));
        }
        for (n, snap) in world.nodes.iter().zip(&self.snapshots) {
            e.extend(n.work.map(Epoch::get));
            if let Some(s) = snap.as_ref().filter(|s| !s.finished) {
                e.extend(s.leading.map(|(ep, _)| ep.get()));
                e.extend(
                    s.in_flight
                        .and_then(|(_, op, _)| op.epoch())
                        .map(Epoch::get),
                );
                e.extend(s.shutting_down.flatten().map(Epoch::get));
                e.extend(s.published.epoch.map(Epoch::get));
            }
            for req in &n.to_db.queue {
                e.extend(req.operation.epoch().map(Epoch::get));
            }
            for d in &n.to_node.queue {
                match d {
                    Delivery::Reply(_, Reply::Acquired { epoch })
                    | Delivery::Reply(_, Reply::Held { epoch, .. }) => e.push(epoch.get()),
                    _ => {}
                }
            }
        }
        e.sort_unstable();
        e.dedup();
    }

    fn collect_ids(&mut self, world: &World) {
        self.ids.resize_with(world.nodes.len(), Vec::new);
        for (i, (n, snap)) in world.nodes.iter().zip(&self.snapshots).enumerate() {
            let ids = &mut self.ids[i];
            ids.clear();
            ids.push(n.abandoned_upto);
            if let Some(s) = snap {
                ids.push(s.next_request);
                ids.extend(s.in_flight.map(|(id, _, _)| id.0));
            }
            let mine = |r: &&Request| r.incarnation == n.incarnation;
            ids.extend(n.to_db.queue.iter().filter(mine).map(|r| r.id.0));
            ids.extend(
                world
                    .stray
                    .iter()
                    .filter(|r| r.node == i)
                    .filter(mine)
                    .map(|r| r.id.0),
            );
            ids.extend(n.to_node.queue.iter().filter_map(|d| match d {
                Delivery::Reply(id, _) => Some(id.0),
                Delivery::Notice => None,
            }));
            ids.sort_unstable();
            ids.dedup();
        }
    }
}

/// A 128-bit hash of the encoding: two independent multiply-rotate lanes
/// (much faster than SipHash, which took a tenth of the search), each
/// finished with MurmurHash3's avalanche. The length goes in first.
pub(super) fn hash128(values: &[i64]) -> u128 {
    const K1: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let mut a = 0x243f_6a88_85a3_08d3_u64 ^ values.len() as u64;
    let mut b = 0x1319_8a2e_0370_7344_u64 ^ (values.len() as u64).wrapping_mul(K2);
    for &v in values {
        let v = v as u64;
        a = (a ^ v).wrapping_mul(K1).rotate_left(29);
        b = (b.rotate_left(17) ^ v).wrapping_mul(K2);
    }
    (u128::from(fmix(a)) << 64) | u128::from(fmix(b ^ a.rotate_left(32)))
}

fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn rank(values: &[u64], v: u64) -> i64 {
    values.partition_point(|&x| x < v) as i64
}

impl Ctx<'_> {
    fn epoch(&self, e: Option<Epoch>) -> i64 {
        e.map_or(-1, |e| rank(self.epochs, e.get()))
    }

    fn id(&self, node: usize, id: RequestId) -> i64 {
        rank(&self.ids[node], id.0)
    }

    /// A holder id as (renamed node, incarnations ago).
    fn holder(&self, holder: Option<&str>) -> i64 {
        // A reservation (`<node>#`, a planned handover) ranks beside the
        // holder it names, in the upper half of that holder's band.
        if let Some(node) = holder.and_then(|h| h.strip_suffix('#')) {
            return match self.holder(Some(node)) {
                h if h >= 1 => h + 32,
                _ => -3,
            };
        }
        let nodes = &self.world.nodes;
        if let Some(h) = holder {
            // Most holders seen are a node's current one: no parsing.
            if let Some(i) = nodes.iter().position(|n| n.holder.as_str() == h) {
                return 1 + self.perm[i] as i64 * 64;
            }
        }
        match holder.and_then(parse_holder) {
            Some((node, inc)) if node < self.world.nodes.len() => {
                let ago = i64::from(self.world.nodes[node].incarnation) - i64::from(inc);
                1 + self.perm[node] as i64 * 64 + ago
            }
            Some(_) => -2,
            None => -1,
        }
    }

    /// A local instant relative to the node's clock, clamped.
    fn local(&self, node: &Node, at: Instant) -> i64 {
        local(node.clock, at, self.horizon)
    }

    fn operation(&self, out: &mut Vec<i64>, op: Operation) {
        operation(out, op, |e| self.epoch(e));
    }

    fn request(&self, out: &mut Vec<i64>, req: &Request) {
        let current = self.world.nodes[req.node].incarnation == req.incarnation;
        out.push(self.holder(Some(req.holder.as_str())));
        out.push(if current {
            self.id(req.node, req.id)
        } else {
            -1
        });
        self.operation(out, req.operation);
        out.push(self.holder(req.successor.as_ref().map(|h| h.as_str())));
    }

    fn encode(&self, out: &mut Vec<i64>) {
        let w = self.world;
        out.extend([
            i64::from(w.faults),
            i64::from(w.leaderless[0]),
            self.epoch(w.last_epoch[0]),
        ]);
        // The row, and with `Bounds::failovers` each standby's copy of
        // it, whether the row is the current server's, how many standbys
        // are still there to promote, and whether the server adopted a
        // row at this very tick (no promotion then).
        out.push(w.standbys.len() as i64);
        let rows = std::iter::once(w.db.row(LEASE)).chain(w.standbys.iter().map(|s| s.row(LEASE)));
        for row in rows {
            match row {
                Some(row) => {
                    let left =
                        (row.expires_at - DB_EPOCH_MS - w.db_clock as i64).clamp(0, self.ttl + 1);
                    out.extend([
                        self.holder(row.holder.as_deref()),
                        self.epoch(Epoch::new(u64::try_from(row.epoch).unwrap_or(0)).into()),
                        left,
                        i64::from(row.incarnation == w.db.incarnation()),
                    ]);
                }
                None => out.push(-9),
            }
        }
        out.extend(
            [w.issued, w.issued_before]
                .map(|e| self.epoch(Epoch::new(u64::try_from(e).unwrap_or(0)).into())),
        );
        out.push(i64::from(w.db.adopted_at(DB_EPOCH_MS + w.db_clock as i64)));
        // The preferred-candidate row, with ranks (DESIGN §3 "Preferred
        // holders"): its candidate and time left.
        if w.ranked {
            let name = crate::sql::preferred_candidate_name(LEASE);
            match w.db.row(&name) {
                Some(row) => {
                    let candidate = row.holder.as_deref().and_then(crate::Candidate::parse);
                    let left =
                        (row.expires_at - DB_EPOCH_MS - w.db_clock as i64).clamp(0, self.ttl + 1);
                    out.extend([
                        self.holder(candidate.as_ref().map(|c| c.holder.as_str())),
                        left,
                    ]);
                }
                None => out.push(-9),
            }
        }
        match &w.stray {
            Some(req) => self.request(out, req),
            None => out.push(-9),
        }
        let mut order = [0usize; 3];
        for (old, &new) in self.perm.iter().enumerate().take(w.nodes.len()) {
            order[new] = old;
        }
        for &i in order.iter().take(w.nodes.len()) {
            self.node(out, i);
        }
    }

    fn node(&self, out: &mut Vec<i64>, i: usize) {
        let n = &self.world.nodes[i];
        out.push(-7);
        out.push(rank(&self.ids[i], n.abandoned_upto));
        out.extend([i64::from(n.to_db.age), i64::from(n.to_db.late)]);
        for req in &n.to_db.queue {
            self.request(out, req);
        }
        out.push(-6);
        match &self.snapshots[i] {
            None => out.push(0),
            Some(s) if s.finished => out.push(1),
            Some(s) => {
                out.extend([2, i64::from(n.paused), i64::from(n.skew)]);
                let anchor = |a: Option<i32>| a.map_or(-99, |a| i64::from(a - n.skew));
                out.extend([anchor(n.anchor_flight), anchor(n.anchor_term)]);
                self.snapshot(out, i, n, s);
                out.extend([
                    self.epoch(n.work),
                    i64::from(n.fenced_out),
                    self.epoch(self.world.outlived[i]),
                ]);
                out.extend([i64::from(n.to_node.age), i64::from(n.to_node.late)]);
                for d in &n.to_node.queue {
                    self.delivery(out, i, d);
                }
            }
        }
    }

    fn snapshot(&self, out: &mut Vec<i64>, i: usize, n: &Node, s: &Snapshot) {
        out.push(self.id(i, RequestId(s.next_request)));
        match s.in_flight {
            Some((id, op, sent)) => {
                out.extend([self.id(i, id), self.local(n, sent)]);
                self.operation(out, op);
            }
            None => out.push(-9),
        }
        match s.leading {
            Some((epoch, deadline)) => {
                out.extend([self.epoch(Some(epoch)), self.local(n, deadline)]);
            }
            None => out.push(-9),
        }
        match s.release_by {
            Some(by) => out.push(self.local(n, by)),
            None => out.push(-9),
        }
        hand_over(
            out,
            s,
            n.now(),
            |e| self.epoch(e),
            |h| self.holder(h),
            |t| self.local(n, t),
        );
        out.push(self.local(n, s.next_attempt));
        out.push(i64::from(s.notice_pending));
        match s.next_announce {
            Some(at) => out.push(self.local(n, at)),
            None => out.push(-9),
        }
        out.push(self.holder(s.preferred.as_ref().map(|h| h.as_str())));
        // Health (DESIGN §5 "Work that fails"): the probe's verdict, and a
        // cool-down's end while still ahead.
        let (probe, cool_down) = s.health;
        out.push(probe.map_or(-9, i64::from));
        match cool_down {
            Some(until) if until > n.now() => out.push(self.local(n, until)),
            _ => out.push(-9),
        }
        match s.shutting_down {
            None => out.push(-9),
            Some(release) => out.push(self.epoch(release)),
        }
        let l = &s.published;
        if l.role != Role::Leader {
            // What a follower last published (holder, epoch, reason) only
            // decides whether its next observation publishes again, and a
            // follower's publication is checked only against running work,
            // which a follower never has unless a demotion already broke
            // gating. Left out: it would tell apart states that differ
            // only in news the driver would print.
            out.push(-8);
            return;
        }
        out.extend([
            i64::from(l.role == Role::Leader),
            self.epoch(l.epoch),
            self.holder(l.holder.as_ref().map(|h| h.as_str())),
            l.reason.map_or(-1, demotion),
        ]);
    }

    fn delivery(&self, out: &mut Vec<i64>, i: usize, d: &Delivery) {
        match d {
            Delivery::Notice => out.push(-5),
            Delivery::Reply(id, answer) => {
                out.push(self.id(i, *id));
                reply(
                    out,
                    answer,
                    |e| self.epoch(Some(e)),
                    |h| self.holder(Some(h)),
                );
            }
        }
    }
}

/// A demotion's reason as a number.
pub(super) fn demotion(d: Demotion) -> i64 {
    match d {
        Demotion::Lost => 0,
        Demotion::Expired => 1,
        Demotion::Released => 2,
        Demotion::Error => 3,
        // Never fed by the checker's world (no database clock steps).
        _ => 4,
    }
}

/// A local instant relative to its node's clock `clock` (ticks), clamped
/// to `horizon` ticks either way: further than any timing of the protocol
/// reaches, the distance no longer matters.
pub(super) fn local(clock: u64, at: Instant, horizon: i64) -> i64 {
    let ticks = i128::from(at.as_nanos()) / TICK.as_nanos() as i128;
    let rel = ticks - i128::from(clock);
    rel.clamp(-i128::from(horizon), i128::from(horizon)) as i64
}

/// A statement as its kind and its epoch, the epoch encoded by `epoch`.
pub(super) fn operation(out: &mut Vec<i64>, op: Operation, epoch: impl Fn(Option<Epoch>) -> i64) {
    let (kind, e) = match op {
        Operation::Acquire => (0, None),
        Operation::Renew { epoch } => (1, Some(epoch)),
        Operation::Release { epoch } => (2, Some(epoch)),
        Operation::HandOver { epoch } => (3, Some(epoch)),
        Operation::Announce => (4, None),
    };
    out.extend([kind, epoch(e)]);
}

/// A single statement's reply, its epoch and holder encoded by `epoch`
/// and `holder` (each model ranks them its own way).
pub(super) fn reply(
    out: &mut Vec<i64>,
    r: &Reply,
    epoch: impl Fn(Epoch) -> i64,
    holder: impl Fn(&str) -> i64,
) {
    match r {
        Reply::Acquired { epoch: e } => out.extend([0, epoch(*e)]),
        Reply::Held {
            holder: h,
            epoch: e,
            expires_in,
        } => out.extend([
            1,
            h.as_ref().map_or(-1, |h| holder(h.as_str())),
            epoch(*e),
            expires_in.as_millis().min(1 << 20) as i64,
        ]),
        Reply::Accepted => out.push(2),
        Reply::Rejected => out.push(3),
        Reply::Failed(Failure::Transient) => out.push(4),
        Reply::Failed(Failure::Fatal) => out.push(5),
        Reply::HandOverAsked { to } => {
            out.extend([6, to.as_ref().map_or(-1, |h| holder(h.as_str()))]);
        }
        Reply::CandidateSeen { candidate } => out.extend([
            7,
            holder(candidate.holder.as_str()),
            i64::from(candidate.rank.priority()),
        ]),
    }
}

/// A machine's planned handover (its term and reservation) and, while
/// still ahead, the instant it steps aside until: shared by the lone
/// lease's and the set's fingerprints.
pub(crate) fn hand_over(
    out: &mut Vec<i64>,
    s: &Snapshot,
    now: Instant,
    epoch: impl Fn(Option<Epoch>) -> i64,
    holder: impl Fn(Option<&str>) -> i64,
    local: impl Fn(Instant) -> i64,
) {
    match &s.hand_over {
        Some((e, to)) => out.extend([epoch(Some(*e)), holder(to.as_ref().map(|h| h.as_str()))]),
        None => out.push(-9),
    }
    // Only a time still ahead changes what the machine does.
    match s.aside_until {
        Some(until) if until > now => out.push(local(until)),
        _ => out.push(-9),
    }
}
