//! How CMD ended, as the guard reports it and `run` prints it: the one
//! word that the supervisor (`child.rs`), the guard's socket
//! (`guard_link.rs`) and the event lines (`events.rs`) all speak. It has
//! a module of its own so that none of those imports another for it (they
//! formed import circles: `child` <-> `events`, `child` <-> `guard_link`).

/// How CMD ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it (by name, e.g. `SIGKILL`).
    Signal(String),
}

impl ChildStatus {
    /// The exit code that mirrors it (128 + signal number when killed).
    pub fn exit_code(&self) -> u8 {
        match self {
            ChildStatus::Code(code) => u8::try_from(*code).unwrap_or(1),
            ChildStatus::Signal(name) => name
                .parse::<nix::sys::signal::Signal>()
                .ok()
                .and_then(|s| u8::try_from(128 + s as i32).ok())
                .unwrap_or(1),
        }
    }
}
