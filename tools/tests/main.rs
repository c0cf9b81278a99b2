//! Every test of the `picolease` binary from outside, in one test binary:
//! one module per file (each file's own docs say what it covers), over the
//! shared `support`. One binary, not one per file: each file built as a
//! test crate of its own compiled and linked `support` and its
//! dependencies again, 35 times (188 s of CPU in CI's build).
//!
//! `scripts/test` runs the binary once per module (`cargo test -p
//! picolease-cli --test cli MODULE::`), so that each file's tests run
//! beside each other only, as they did as binaries of their own; run
//! whole, all modules' processes share the machine at once.

mod support;

mod cli_after_failover;
mod cli_bad_input;
mod cli_bench;
mod cli_chaos;
mod cli_check_set;
mod cli_demo_set;
mod cli_forced_release;
mod cli_handover;
mod cli_handover_order;
mod cli_handover_set;
mod cli_listen;
mod cli_listen_postgres;
mod cli_mysql;
mod cli_partition;
mod cli_pause;
mod cli_pooler;
mod cli_postgres;
mod cli_preference_set;
mod cli_processes;
mod cli_set;
mod cli_set_health;
mod cli_set_liveness;
mod cli_set_member_health;
mod cli_set_postgres;
mod cli_simulate_budget;
mod cli_sql;
mod cli_start_during_failover;
mod cli_status_paths;
mod cli_term_end;
mod cli_term_race;
mod cli_timeline;
mod cli_watch;
mod cli_work_failures;
mod operations_guide;
mod scrape_cost;
