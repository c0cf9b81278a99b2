//! `picolease demo --leases N`, from outside: the shares settle, a crash
//! is taken over, a joiner gets exactly its share with nothing moved
//! between the others, a clean shutdown hands over, and no lease's work
//! ever ran on two nodes at once (exit 0).

use crate::support;

use support::picolease;

/// The share rows (time, then one column per node) of the output.
fn share_rows(stdout: &str) -> Vec<Vec<Option<usize>>> {
    stdout
        .lines()
        .filter(|l| !l.contains("--") && !l.trim_start().starts_with('t'))
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let time = cols.next()?;
            if !time.ends_with('s') {
                return None;
            }
            cols.map(|c| match c {
                "-" => Some(None),
                n => n.parse().ok().map(Some),
            })
            .collect()
        })
        .filter(|row: &Vec<Option<usize>>| !row.is_empty())
        .collect()
}

#[test]
fn the_share_moves_as_nodes_crash_join_and_leave() {
    let out = picolease(&["demo", "--leases", "10", "--nodes", "3", "--ttl", "1s"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for says in [
        "settled: every lease held, every node at its share",
        "taken over and balanced",
        "moved between the others: 0",
        "a lease's work on two nodes at once: never",
        "work left running after shutdown: 0",
    ] {
        assert!(stdout.contains(says), "missing {says:?} in\n{stdout}");
    }
    // The joiner (node-4) got 10 / 3 leases, rounded by rank, and as many
    // moved.
    let moved = stdout
        .lines()
        .find(|l| l.contains("leases moved, all to node-4"))
        .unwrap_or_else(|| panic!("no join line in\n{stdout}"));
    let count: usize = moved
        .split("--")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((3..=4).contains(&count), "{moved}");
    // Settled rows hold all ten leases: the first after start over three
    // nodes, the last over the two left.
    let rows = share_rows(&stdout);
    let last = rows.last().expect("share rows");
    assert_eq!(last.iter().flatten().sum::<usize>(), 10, "{stdout}");
    assert_eq!(last.iter().flatten().count(), 2, "{stdout}");
    assert!(
        rows.iter().any(|r| r.len() == 3
            && r.iter().flatten().count() == 3
            && r.iter().flatten().sum::<usize>() == 10),
        "{stdout}"
    );
}
