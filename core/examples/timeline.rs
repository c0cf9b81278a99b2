//! Prints a simulated cluster's timeline: election, a crash of the leader,
//! a clean handover. `cargo run -p picolease-core --features sim --example timeline [SEED]`
use picolease_core::sim::{Fault, SimConfig, Simulation};
use std::time::Duration;

fn main() {
    let seed = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut config = SimConfig::new(3, seed);
    config.duration = Duration::from_secs(45);
    config.faults = Fault::parse_list("crash@12s,shutdown@30s").expect("valid faults");
    let verbose = std::env::var_os("VERBOSE").is_some();
    let trace = Simulation::new(config).expect("valid config").run();
    print!("{}", trace.timeline(verbose));
    for h in trace.handovers() {
        println!("{h:?}");
    }
    println!("safety: {:?}", trace.check_safety());
}
