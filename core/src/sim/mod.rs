//! Deterministic simulation (feature `sim`): a model database and, built on
//! it, a cluster of `LeaseState`s on virtual time with faults.

mod model;

pub use model::{ModelDb, ModelRow};
