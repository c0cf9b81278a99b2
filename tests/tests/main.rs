//! Every integration test of `picolease-tests`, in one binary: one module
//! per file (each file's own docs say what it covers), over the support
//! modules they share. One binary, not one per file: each file built as a
//! test crate of its own compiled and linked the drivers' generic code and
//! the support modules again, 40 times (367 s of CPU, half of CI's build).
//!
//! `scripts/test` runs the binary once per module (`cargo test -p
//! picolease-tests --test integration MODULE::`), so that each file's tests
//! run beside each other only, as they did as binaries of their own; run
//! whole, all modules' tests share the process and its test threads.

#[macro_use]
mod conformance;
mod failover_support;
mod forward_support;
mod model_vs;
mod mysql_support;
mod pg_support;
mod tls_support;

mod conformance_mysql;
mod conformance_postgres;
mod conformance_sqlite;
mod fence_in_your_client;
mod fuzz_corpus;
mod model_vs_mysql;
mod model_vs_postgres;
mod model_vs_sqlite;
mod mysql_failover;
mod mysql_fence;
mod mysql_galera;
mod mysql_liveness_race;
mod mysql_tls;
mod mysql_wake;
mod pg_failover;
mod pg_faults;
mod pg_fence;
mod pg_handover;
mod pg_leader_until;
mod pg_liveness_race;
mod pg_many;
mod pg_patroni;
mod pg_pooler;
mod pg_set;
mod pg_set_faults;
mod pg_set_fence;
mod pg_term_end;
mod pg_tls;
mod quick_start;
mod sqlite_blocked;
mod sqlite_clock_step;
mod sqlite_set;
mod sqlite_set_health;
mod sqlite_term_end;
mod suspend;
mod watch_pause;
mod work_failures;
