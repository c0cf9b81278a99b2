//! What `run` does for each term, shared by the command and the backends:
//! CMD under its guard, started and stopped with the term (`child.rs`:
//! `Gated`, the work every backend runs; `guard_link.rs`: `run`'s end of
//! the socket to the guard, `Guard` and the guard's `Report`s), and the
//! event lines it prints (`events.rs`: `Printer`, and `Printed`, which a
//! term's end waits on so its `follower` line precedes the release), and
//! how CMD ended (`status.rs`: `ChildStatus`, which the other three speak,
//! so none of them imports another for it), and the health probe
//! (`probe.rs`: `--health-cmd`, and `WorkHealth`, what `/healthz` reports
//! of the work).
//!
//! It sits outside `commands/` so that the backends, which run the gated
//! work, depend on it without depending on the commands that start them:
//! `commands → backend → term`, and `commands → term`, with no cycle.

pub mod child;
pub mod events;
mod guard_link;
pub mod probe;
mod restart;
pub mod status;
