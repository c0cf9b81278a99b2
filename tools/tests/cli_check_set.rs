//! `picolease check --leases N`: the model check over lease sets, from
//! outside (and the lone-lease contract of `--json` unchanged).

use std::process::{Command, Output};

fn picolease(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_picolease"))
        .args(args)
        .output()
        .expect("run picolease")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn a_shallow_set_check_completes_clean_and_names_its_leases() {
    let out = picolease(&[
        "check", "--nodes", "2", "--leases", "2", "--depth", "22", "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("each a lease set of 2 leases"),
        "progress says what is checked: {stderr}"
    );
    let report = json(&out);
    assert_eq!(report["leases"], 2);
    assert_eq!(report["nodes"], 2);
    assert_eq!(report["depth"], 22);
    assert_eq!(report["complete"], true);
    assert_eq!(report["violations"], serde_json::json!([]));
    assert!(report["states"].as_u64().unwrap() > 10_000, "{report}");
}

#[test]
fn the_lone_lease_checks_json_keeps_exactly_its_keys() {
    let out = picolease(&["check", "--nodes", "2", "--depth", "8", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    let mut keys: Vec<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "complete",
            "depth",
            "nodes",
            "states",
            "transitions",
            "violations"
        ]
    );
}

#[test]
fn bad_set_bounds_are_refused_with_exit_2_naming_the_value() {
    let out = picolease(&["check", "--nodes", "2", "--leases", "9"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains('9') && stderr.contains("lease"), "{stderr}");
    // `--leases` on `simulate` only goes with a replay.
    let out = picolease(&["simulate", "--leases", "2"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_set_check_with_handovers_says_so_and_completes_clean() {
    let out = picolease(&[
        "check",
        "--nodes",
        "2",
        "--leases",
        "1",
        "--handover",
        "--faults",
        "1",
        "--depth",
        "16",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("a leader of s0 may hand it over to the next node"),
        "progress names the handover step: {stderr}"
    );
    let report = json(&out);
    assert_eq!(report["leases"], 1);
    assert_eq!(report["complete"], true);
    assert_eq!(report["violations"], serde_json::json!([]));
}

/// A check that would outgrow its memory budget stops cleanly (issue 48):
/// exit 1, the depth whose every path it checked, and a peak within the
/// budget (and the few megabytes the search may add between two readings),
/// as the command prints it from the kernel's own figure (`VmHWM`).
/// Without the budget this search completes in 1.2 GiB (DESIGN §6
/// "Memory"; it took more than the machine has before the states to
/// explore were rebuilt from their paths).
#[test]
fn a_check_that_outgrows_its_memory_budget_stops_cleanly_within_it() {
    let out = picolease(&[
        "check", "--nodes", "2", "--leases", "2", "--depth", "26", "--faults", "1", "--memory",
        "64MiB",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("NOT complete"), "{stdout}");
    let completed: usize = stdout
        .split("every path of ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no completed depth: {stdout}"));
    assert!((1..26).contains(&completed), "{stdout}");
    assert!(stdout.contains("stopped at the memory budget"), "{stdout}");
    assert!(stderr.contains("memory budget 64 MiB"), "{stderr}");
    let peak_mib: u64 = stderr
        .split("peak memory ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no peak printed: {stderr}"));
    assert!(peak_mib <= 64 + 32, "peak {peak_mib} MiB: {stderr}");
}

#[test]
fn a_bad_memory_budget_is_refused_with_exit_2_naming_the_value() {
    for bad in ["8", "10MiB", "lots"] {
        let out = picolease(&["check", "--memory", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains(&format!("{bad:?}")), "{bad}: {stderr}");
    }
}
