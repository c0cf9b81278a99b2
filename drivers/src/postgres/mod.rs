//! The async driver on PostgreSQL (tokio-postgres). Being written: see issue 4.
