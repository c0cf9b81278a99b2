//! Runs the exhaustive model checker and prints its progress and report.
//!
//! ```text
//! cargo run --release -p picolease-core --features sim --example check -- [NODES] [FAULTS] [DEPTH]
//! cargo run --release -p picolease-core --features mutants --example check -- 2 1 120 deadline-from-reply
//! ```
//!
//! Mutations (feature `mutants`): deadline-from-reply, no-deadline,
//! stale-reply, renew-ignores-epoch, work-kept, set-yield-keeps-work,
//! acquire-batch-takes-held.
//!
//! `LEASES=N` checks lease sets of N leases instead (`Bounds::for_set`):
//!
//! ```text
//! LEASES=2 cargo run --release -p picolease-core --features sim --example check -- 2 0 60
//! ```

use picolease_core::check::{check, replay, Bounds, Budget};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| args.get(i).and_then(|a| a.parse::<usize>().ok());
    let nodes = number(0).unwrap_or(2);
    let leases = std::env::var("LEASES")
        .ok()
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(0);
    let mut bounds = if leases > 0 {
        Bounds::for_set(nodes, leases)
    } else {
        Bounds::default_for(nodes)
    };
    if let Some(f) = number(1) {
        bounds.faults = f;
    }
    if let Some(d) = number(2) {
        bounds.depth = d;
    }
    #[allow(unused_mut)]
    let mut budget = Budget::default();
    #[cfg(feature = "mutants")]
    if let Some(name) = args.get(3) {
        use picolease_core::Mutation;
        bounds.mutation = match name.as_str() {
            "deadline-from-reply" => Mutation::DeadlineFromReply,
            "no-deadline" => Mutation::NoDeadline,
            "stale-reply" => Mutation::StaleReplyAccepted,
            "renew-ignores-epoch" => Mutation::RenewIgnoresEpoch,
            "work-kept" => Mutation::WorkKeptOnDemotion,
            "set-yield-keeps-work" => Mutation::SetYieldKeepsWork,
            "acquire-batch-takes-held" => Mutation::AcquireBatchTakesHeld,
            other => {
                eprintln!("unknown mutation {other}");
                std::process::exit(2);
            }
        };
        budget.stop_at_first_violation = true;
    }
    if let Ok(trace) = std::env::var("REPLAY") {
        match replay(&trace, &bounds) {
            Ok(r) => println!("{r}"),
            Err(e) => println!("replay failed: {e}"),
        }
        return;
    }
    let report = check(&bounds, budget, |p| {
        eprintln!(
            "depth {:>3}: {:>10} states, {:>11} transitions, frontier {:>9}, {:.1?}",
            p.depth, p.states, p.transitions, p.frontier, p.elapsed
        );
    });
    match report {
        Ok(report) => {
            println!("{report}");
            if let Some(v) = report.violations.first() {
                match replay(&v.trace, &bounds) {
                    Ok(r) => println!("\nreplay:\n{r}"),
                    Err(e) => println!("replay failed: {e}"),
                }
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
}
