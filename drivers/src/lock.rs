//! The one way the drivers take a mutex.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data of a poisoned mutex as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a few assignments: a panic cannot
    // leave the data inconsistent, so poisoning is ignored.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
