//! picolease's integration suites that need real databases or processes.
//!
//! - `model_vs_sqlite`, `model_vs_postgres`: the simulator's model database
//!   against the real statements on SQLite and PostgreSQL.
//! - `sqlite_conformance`, `pg_conformance`: the driver conformance cases
//!   (numbered 1–8 in each file) on both drivers.
//! - `pg_faults`, `pg_handover`, `pg_many`: the async driver behind a TCP
//!   proxy (stall, reset, latency), clean handovers, 50 contenders.
//! - `fuzz_corpus`: replays the committed fuzz corpus on stable.
//!
//! The simulator's property tests (DESIGN §6) live in
//! `core/tests/properties.rs`, beside the code they check.
