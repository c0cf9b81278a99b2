//! Which database a `--db` URL names.
//!
//! Every command matches on [`Backend`]. The PostgreSQL backend (feature
//! `postgres`, on by default) runs the async driver on a current-thread
//! runtime (see `crate::postgres`); a binary built without it refuses
//! `postgres://` URLs with a clear configuration error.

use std::path::PathBuf;

use picolease::sqlite::{Database, Location};
use picolease::TableName;

use crate::failure::CliError;

/// The database a URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite://PATH` or `sqlite::memory:`.
    Sqlite(Location),
    /// `postgres://…` or `postgresql://…`.
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::Target),
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
            #[cfg(feature = "postgres")]
            return Ok(Backend::Postgres(crate::postgres::Target::parse(url)?));
            #[cfg(not(feature = "postgres"))]
            return Err(CliError::usage(format!(
                "postgres support not built in this picolease binary (--db {scheme}://…; build with the `postgres` feature); use sqlite://PATH"
            )));
        }
        Err(CliError::usage(format!(
            "--db {:?} is not a supported database URL: use sqlite://PATH, sqlite::memory: or postgres://…",
            crate::failure::one_line(&redact(url))
        )))
    }
}

/// The SQLite database at `location` with `table`.
pub fn sqlite(location: &Location, table: &TableName) -> Database {
    Database::new(location.clone()).table(table.clone())
}

/// `url` with any password (between `://user:` and `@`, or a `password=`
/// value) hidden, so that no message prints it.
pub fn redact(url: &str) -> String {
    let mut shown = url.to_string();
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        // The userinfo ends at the last '@' before the path.
        let authority_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                shown = format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &rest[..colon],
                    &rest[at..]
                );
            }
        }
    }
    match shown.find("password=") {
        Some(start) => {
            let value = start + "password=".len();
            let end = shown[value..]
                .find(['&', ' '])
                .map_or(shown.len(), |i| value + i);
            format!("{}***{}", &shown[..value], &shown[end..])
        }
        None => shown,
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
        assert!(Backend::parse("mysql://x").is_err());
        assert!(Backend::parse("sqlite://").is_err());
        let foreign = Backend::parse("mysql://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(!foreign.contains("secret"), "{foreign}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_urls() {
        assert!(matches!(
            Backend::parse("postgres://u:secret@h/db").unwrap(),
            Backend::Postgres(_)
        ));
        assert!(matches!(
            Backend::parse("postgresql://h:5432/db?connect_timeout=2").unwrap(),
            Backend::Postgres(_)
        ));
        let bad = Backend::parse("postgres://u:secret@h:notaport/db").unwrap_err();
        assert!(matches!(bad, CliError::Usage(_)), "{bad:?}");
        assert!(!bad.to_string().contains("secret"), "{bad}");
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn postgres_urls_without_the_feature() {
        let pg = Backend::parse("postgres://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(
            pg.contains("postgres support not built") && !pg.contains("secret"),
            "{pg}"
        );
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            redact("postgres://h/db?password=pw&x=1"),
            "postgres://h/db?password=***&x=1"
        );
    }
}
