//! The blocking driver on SQLite (rusqlite). Being written: see issue 3.
