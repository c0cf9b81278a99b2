//! Which database a `--db` URL names.
//!
//! Every command matches on [`Backend`]. The PostgreSQL backend will plug in
//! as another variant (behind a `postgres` feature of this package, using
//! the async driver on a runtime); until then its URLs are refused with a
//! clear configuration error.

use std::path::PathBuf;

use picolease::sqlite::{Database, Location};
use picolease::TableName;

use crate::failure::CliError;

/// The database a URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite://PATH` or `sqlite::memory:`.
    Sqlite(Location),
}

impl Backend {
    /// Parses `--db`. Accepts `sqlite://PATH` (relative or absolute:
    /// `sqlite:///tmp/x.db`), `sqlite:PATH` and `sqlite::memory:`.
    pub fn parse(url: &str) -> Result<Self, CliError> {
        if url == "sqlite::memory:" || url == "sqlite://:memory:" {
            return Ok(Backend::Sqlite(Location::Memory));
        }
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(CliError::usage(format!(
                    "--db {url:?} has no path: use sqlite://PATH or sqlite::memory:"
                )));
            }
            return Ok(Backend::Sqlite(Location::File(PathBuf::from(path))));
        }
        let scheme = url.split("://").next().unwrap_or(url);
        if url.contains("://") && (scheme == "postgres" || scheme == "postgresql") {
            return Err(CliError::usage(format!(
                "postgres support not built yet in this picolease binary (--db {scheme}://…); use sqlite://PATH"
            )));
        }
        Err(CliError::usage(format!(
            "--db {:?} is not a supported database URL: use sqlite://PATH or sqlite::memory:",
            crate::failure::one_line(url)
        )))
    }

    /// The SQLite database with `table`.
    pub fn sqlite(&self, table: &TableName) -> Database {
        match self {
            Backend::Sqlite(location) => Database::new(location.clone()).table(table.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            Backend::parse("sqlite://picolease.db").unwrap(),
            Backend::Sqlite(Location::file("picolease.db"))
        );
        assert_eq!(
            Backend::parse("sqlite:///tmp/a.db").unwrap(),
            Backend::Sqlite(Location::file("/tmp/a.db"))
        );
        assert_eq!(
            Backend::parse("sqlite::memory:").unwrap(),
            Backend::Sqlite(Location::Memory)
        );
        let pg = Backend::parse("postgres://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(
            pg.contains("postgres support not built yet") && !pg.contains("secret"),
            "{pg}"
        );
        assert!(Backend::parse("mysql://x").is_err());
        assert!(Backend::parse("sqlite://").is_err());
    }
}
