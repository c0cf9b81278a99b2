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
