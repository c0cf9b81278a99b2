//! The fair share of a lease set (DESIGN §9): how many leases each live
//! node aims for, and which leases a node prefers to take or give up.

use crate::names::HolderId;

/// How many of `leases` leases a node aims to hold when `members` nodes are
/// live and it ranks `rank` among them by holder id (0 = first): the
/// `leases mod members` nodes ranked first aim for ⌈N/n⌉, the others for
/// ⌊N/n⌋, so the targets of all live nodes add up to N exactly.
///
/// `members` counts this node, so it is at least 1 (0 is treated as 1).
pub fn target(leases: usize, members: usize, rank: usize) -> usize {
    let members = members.max(1);
    leases / members + usize::from(rank < leases % members)
}

/// A node's preference for a lease: a rendezvous (highest-random-weight)
/// hash of the holder id and the lease name. Nodes take the free leases
/// they prefer most first and give up those they prefer least first, so
/// two nodes under their share rarely reach for the same lease, and the
/// leases a node keeps do not depend on the order it saw them in.
pub fn preference(holder: &HolderId, lease: &str) -> u64 {
    // FNV-1a over both names with a separator, then a splitmix64
    // finaliser so that names differing in one character spread.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in holder
        .as_str()
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(lease.bytes())
    {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Which of `members` (sorted by holder id, as the share ranks them) each
/// of `leases` is assigned to: rendezvous hashing with bounded loads.
/// Leases go in byte order of their names, each to the member that
/// prefers it most among those still under their [`target`], so every
/// member is assigned exactly its target and every node that reads the
/// same members computes the same assignment, whatever order it lists
/// its leases in. Nodes short of their share try the free leases assigned
/// to them first: with plain rendezvous ranking (each lease to the member
/// that prefers it most) a node ranks first for its share ± a few dozen
/// leases in a thousand, so the surplus of one went untried while the
/// others, short by as many, probed leases held elsewhere `need` at a
/// time: 10 processes over 10,000 leases held 9,957 within 1.5 s and the
/// last 43 up to 5 s later (`bench --leases 10000 --nodes 10 --ttl 2s
/// --by-liveness`). O(leases × members).
pub fn assign(members: &[HolderId], leases: &[&str]) -> Vec<usize> {
    let mut room: Vec<usize> = (0..members.len())
        .map(|k| target(leases.len(), members.len(), k))
        .collect();
    let mut order: Vec<usize> = (0..leases.len()).collect();
    order.sort_unstable_by(|&a, &b| leases[a].cmp(leases[b]));
    let mut assigned = vec![0; leases.len()];
    for i in order {
        let best = members
            .iter()
            .enumerate()
            .filter(|&(k, _)| room[k] > 0)
            .max_by_key(|&(_, m)| preference(m, leases[i]))
            .map(|(k, _)| k);
        if let Some(k) = best {
            room[k] -= 1;
            assigned[i] = k;
        }
    }
    assigned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_add_up_to_the_number_of_leases_and_differ_by_at_most_one() {
        for leases in [0usize, 1, 2, 7, 10, 199, 200, 10_000] {
            for members in 1..=13 {
                let targets: Vec<usize> =
                    (0..members).map(|r| target(leases, members, r)).collect();
                assert_eq!(
                    targets.iter().sum::<usize>(),
                    leases,
                    "{leases} over {members}"
                );
                let (min, max) = (targets.iter().min().unwrap(), targets.iter().max().unwrap());
                assert!(max - min <= 1, "{leases} over {members}: {targets:?}");
                // The first-ranked nodes take the larger share.
                assert!(targets.windows(2).all(|w| w[0] >= w[1]));
            }
        }
    }

    #[test]
    fn each_member_is_assigned_its_target_whatever_the_order_of_the_leases() {
        let members: Vec<HolderId> = (0..10)
            .map(|k| HolderId::new(&format!("n{k}")).unwrap())
            .collect();
        let names: Vec<String> = (0..10_003).map(|i| format!("s{i}")).collect();
        let leases: Vec<&str> = names.iter().map(String::as_str).collect();
        let assigned = assign(&members, &leases);
        for k in 0..members.len() {
            let count = assigned.iter().filter(|&&a| a == k).count();
            assert_eq!(count, target(leases.len(), members.len(), k), "member {k}");
        }
        // Plain rendezvous ranking misses the targets by dozens.
        let first = |lease: &str| {
            (0..members.len())
                .max_by_key(|&k| preference(&members[k], lease))
                .unwrap()
        };
        let spread: Vec<usize> = (0..members.len())
            .map(|k| leases.iter().filter(|l| first(l) == k).count())
            .collect();
        assert!(spread.iter().any(|&c| c.abs_diff(1_000) > 10), "{spread:?}");
        // Listed in another order, the same assignment.
        let reversed: Vec<&str> = leases.iter().rev().copied().collect();
        let again = assign(&members, &reversed);
        assert!(again.iter().rev().eq(assigned.iter()));
        // Most leases go to the member that prefers them most.
        let to_first = (0..leases.len())
            .filter(|&i| assigned[i] == first(leases[i]))
            .count();
        assert!(to_first > 9_000, "{to_first}");
    }

    #[test]
    fn preferences_differ_between_nodes() {
        let a = HolderId::new("node-a").unwrap();
        let b = HolderId::new("node-b").unwrap();
        let names: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
        let best = |h: &HolderId| {
            names
                .iter()
                .max_by_key(|n| preference(h, n))
                .unwrap()
                .clone()
        };
        assert_ne!(best(&a), best(&b));
        assert_eq!(preference(&a, "s1"), preference(&a, "s1"));
    }
}
