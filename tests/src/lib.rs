//! picolease's integration suites that need real databases or processes.
//!
//! - `model_vs_sqlite`, `model_vs_postgres`: the simulator's model database
//!   against the real statements on SQLite and PostgreSQL.
//! - `conformance_sqlite`, `conformance_postgres`: one driver conformance
//!   suite (`conformance/mod.rs`, cases 1–11) run on both drivers, plus each
//!   driver's own cases.
//! - `pg_fence`: fenced transactions on PostgreSQL (lock modes, bounds).
//! - `pg_pooler`: the driver behind a private PgBouncer in transaction mode.
//! - `suspend`: a suspend-like clock jump stops gated work at once.
//! - `watch_pause`: a paused leader's `watch()` ends its term at SIGCONT
//!   (its contender is the binary `watch_contender`).
//! - `pg_faults`, `pg_handover`, `pg_many`: the async driver behind a TCP
//!   proxy (stall, reset, latency), clean handovers, 50 contenders.
//! - `fuzz_corpus`: replays the committed fuzz corpus on stable.
//!
//! The simulator's property tests (DESIGN §6) live in
//! `core/tests/properties.rs`, beside the code they check.
