//! picolease's own parameters in a PostgreSQL connection string
//! ([`POOLER_PARAM`](super::POOLER_PARAM),
//! [`NOTIFY_URL_PARAM`](super::NOTIFY_URL_PARAM)) and libpq's TLS ones
//! (which picolease carries out itself), taken out before the rest goes
//! to tokio-postgres; a bad value is refused naming it, with
//! any password hidden.

use super::error::PgError;
use super::pooler::{Pooler, NOTIFY_URL_PARAM, POOLER_PARAM};
use super::tls::TLS_PARAMS;
use crate::redact_url;

/// A connection string with picolease's own parameters taken out (the
/// rest is tokio-postgres's), and their values.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct OwnParams {
    pub(crate) rest: String,
    pub(crate) pooler: Pooler,
    pub(crate) notify_url: Option<String>,
    /// libpq's TLS pairs (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`),
    /// in order: tokio-postgres knows only part of `sslmode`, and the
    /// connector makes the checks ([`super::tls::PgTls`]).
    pub(crate) tls: Vec<(String, String)>,
}

/// Splits `url` (a `postgres://` URL or a `key=value` string) into
/// tokio-postgres's part and picolease's parameters; a bad value is
/// [`PgError::InvalidUrl`] naming it.
pub(crate) fn own_params(url: &str) -> Result<OwnParams, PgError> {
    let (rest, pairs) = if url.contains("://") {
        crate::url::split_query(url, is_own)
    } else {
        split_words(url)
    };
    let mut own = OwnParams {
        rest,
        pooler: Pooler::Unannounced,
        notify_url: None,
        tls: Vec::new(),
    };
    for (key, value) in pairs {
        if TLS_PARAMS.contains(&key.as_str()) {
            own.tls.push((key, value));
        } else if key == POOLER_PARAM {
            own.pooler = match value.as_str() {
                "transaction" => Pooler::Transaction,
                "none" | "session" => Pooler::None,
                other => {
                    return Err(PgError::InvalidUrl {
                        url: redact_url(url),
                        reason: format!(
                            "{POOLER_PARAM} must be `transaction` or `none`, not {other:?}"
                        ),
                    })
                }
            };
        } else {
            own.notify_url = Some(value);
        }
    }
    Ok(own)
}

fn is_own(key: &str) -> bool {
    key == POOLER_PARAM || key == NOTIFY_URL_PARAM || TLS_PARAMS.contains(&key)
}

/// `host=h picolease_pooler=transaction` → (`host=h`, the own pairs).
/// Own values are plain words there (a notice URL has no spaces).
fn split_words(url: &str) -> (String, Vec<(String, String)>) {
    let mut kept = Vec::new();
    let mut own = Vec::new();
    for word in url.split_whitespace() {
        match word.split_once('=') {
            Some((key, value)) if is_own(key) => own.push((key.to_string(), value.to_string())),
            _ => kept.push(word),
        }
    }
    (kept.join(" "), own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_parameters_leave_the_url_and_the_rest_stays() {
        let own = own_params(
            "postgres://u:pw@bouncer:6432/db?sslmode=disable&picolease_pooler=transaction\
             &picolease_notify_url=postgres%3A%2F%2Fu%3Apw%40db%3A5432%2Fdb&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(
            own,
            OwnParams {
                rest: "postgres://u:pw@bouncer:6432/db?connect_timeout=3".to_string(),
                pooler: Pooler::Transaction,
                notify_url: Some("postgres://u:pw@db:5432/db".to_string()),
                tls: vec![("sslmode".to_string(), "disable".to_string())],
            }
        );
        let own = own_params("postgres://u@h/db?picolease_pooler=none").unwrap();
        assert_eq!(
            (own.rest.as_str(), own.pooler),
            ("postgres://u@h/db", Pooler::None)
        );
        let silent = own_params("postgres://u@h/db").unwrap();
        assert_eq!(
            silent.pooler,
            Pooler::Unannounced,
            "unnamed unless promised"
        );
        let own = own_params("host=h dbname=d picolease_pooler=transaction").unwrap();
        assert_eq!(
            (own.rest.as_str(), own.pooler),
            ("host=h dbname=d", Pooler::Transaction)
        );
        let plain = own_params("postgres://u@h/db?x=%41").unwrap();
        assert_eq!(
            plain.rest, "postgres://u@h/db?x=%41",
            "others' escapes stay"
        );
    }

    #[test]
    fn a_bad_pooler_value_is_named_and_the_password_hidden() {
        let error = own_params("postgres://u:secret@h/db?picolease_pooler=statement").unwrap_err();
        let message = error.to_string();
        assert!(message.contains("\"statement\""), "{message}");
        assert!(!message.contains("secret"), "{message}");
    }
}
