//! TLS for every MySQL/MariaDB connection picolease opens (statements,
//! the wake-up connection, the one that `KILL`s a fenced transaction at
//! its deadline, admin commands), configured with the mysql client's
//! names in the URL: `ssl-mode` (`DISABLED`, `PREFERRED`, `REQUIRED`,
//! `VERIFY_CA`, `VERIFY_IDENTITY`), `ssl-ca`, `ssl-cert`, `ssl-key`
//! (`ssl_mode` and the other underscore spellings too). mysql_async's own
//! rustls support (ring provider) makes the sessions: pure Rust, no
//! system OpenSSL.
//!
//! What each mode protects against, as the mysql client's documentation
//! defines them (its "Command Options for Encrypted Connections"):
//! `DISABLED` never encrypts; `PREFERRED` (the default) encrypts when the
//! server offers TLS and checks nothing; `REQUIRED` always encrypts and
//! refuses a server without TLS, checking nothing unless `ssl-ca` is
//! named (then as `VERIFY_CA`, as libpq's `require` does); `VERIFY_CA`
//! also checks that a trusted CA signed the server's certificate
//! (`ssl-ca`, or the Mozilla roots built into picolease when none is
//! named); `VERIFY_IDENTITY` also checks that it names the host.

use std::path::{Path, PathBuf};

use mysql_async::{ClientIdentity, SslOpts};

/// How hard a connection insists on TLS and what it checks: the mysql
/// client's `--ssl-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    /// Plain text only.
    Disabled,
    /// TLS when the server offers it, nothing checked (the default).
    Preferred,
    /// TLS or no connection; nothing checked unless `ssl-ca` is named.
    Required,
    /// TLS, and the server's certificate signed by a trusted CA.
    VerifyCa,
    /// TLS, a trusted CA, and the certificate names the host.
    VerifyIdentity,
}

impl SslMode {
    /// The mysql client's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disabled => "DISABLED",
            SslMode::Preferred => "PREFERRED",
            SslMode::Required => "REQUIRED",
            SslMode::VerifyCa => "VERIFY_CA",
            SslMode::VerifyIdentity => "VERIFY_IDENTITY",
        }
    }

    fn parse(value: &str) -> Option<SslMode> {
        Some(
            match value.to_ascii_uppercase().replace('-', "_").as_str() {
                "DISABLED" => SslMode::Disabled,
                "PREFERRED" => SslMode::Preferred,
                "REQUIRED" => SslMode::Required,
                "VERIFY_CA" => SslMode::VerifyCa,
                "VERIFY_IDENTITY" => SslMode::VerifyIdentity,
                _ => return None,
            },
        )
    }
}

/// The TLS settings of a MySQL URL, in the mysql client's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MysqlTls {
    /// `ssl-mode`.
    pub mode: SslMode,
    /// `ssl-ca`: a PEM file of trusted CA certificates.
    pub ca: Option<PathBuf>,
    /// `ssl-cert`: a client certificate chain (PEM).
    pub cert: Option<PathBuf>,
    /// `ssl-key`: its private key (PEM).
    pub key: Option<PathBuf>,
}

impl Default for MysqlTls {
    fn default() -> Self {
        MysqlTls {
            mode: SslMode::Preferred,
            ca: None,
            cert: None,
            key: None,
        }
    }
}

/// Whether a URL key is one of the TLS keys, in either spelling.
pub(crate) fn is_tls_key(key: &str) -> bool {
    matches!(
        key.replace('_', "-").as_str(),
        "ssl-mode" | "ssl-ca" | "ssl-cert" | "ssl-key"
    )
}

impl MysqlTls {
    /// The settings from a URL's TLS pairs (already taken out of it: the
    /// MySQL client library knows none of them). A bad value is an error
    /// naming it; the files are read by [`MysqlTls::check_files`].
    pub(crate) fn from_params(pairs: &[(String, String)]) -> Result<MysqlTls, String> {
        let mut tls = MysqlTls::default();
        for (key, value) in pairs {
            match key.replace('_', "-").as_str() {
                "ssl-mode" => {
                    tls.mode = SslMode::parse(value).ok_or_else(|| {
                        format!(
                            "ssl-mode must be DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY, not {value:?}"
                        )
                    })?
                }
                "ssl-ca" => tls.ca = Some(PathBuf::from(value)),
                "ssl-cert" => tls.cert = Some(PathBuf::from(value)),
                "ssl-key" => tls.key = Some(PathBuf::from(value)),
                _ => {}
            }
        }
        // The mysql client: a CA named under REQUIRED checks it.
        if tls.mode == SslMode::Required && tls.ca.is_some() {
            tls.mode = SslMode::VerifyCa;
        }
        if tls.cert.is_some() != tls.key.is_some() {
            return Err("ssl-cert and ssl-key go together: name both files or neither".into());
        }
        Ok(tls)
    }

    /// Every file named can be read and holds PEM: checked when the
    /// connector is built, so a wrong path is one clear error, not a
    /// failure at every connection attempt.
    pub(crate) fn check_files(&self) -> Result<(), String> {
        for (what, path) in [
            ("ssl-ca", &self.ca),
            ("ssl-cert", &self.cert),
            ("ssl-key", &self.key),
        ] {
            if let Some(path) = path {
                check_pem(what, path)?;
            }
        }
        Ok(())
    }

    /// mysql_async's options for these settings: `None` for plain text.
    pub(crate) fn ssl_opts(&self) -> Option<SslOpts> {
        let opts = match self.mode {
            SslMode::Disabled => return None,
            SslMode::Preferred | SslMode::Required => {
                SslOpts::default().with_danger_accept_invalid_certs(true)
            }
            SslMode::VerifyCa => SslOpts::default().with_danger_skip_domain_validation(true),
            SslMode::VerifyIdentity => SslOpts::default(),
        };
        let opts = match &self.ca {
            // Only the named CA is trusted, as by the mysql client.
            Some(ca) => opts
                .with_root_certs(vec![ca.clone().into()])
                .with_disable_built_in_roots(true),
            None => opts,
        };
        Some(match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => opts.with_client_identity(Some(ClientIdentity::new(
                cert.clone().into(),
                key.clone().into(),
            ))),
            _ => opts,
        })
    }
}

/// `path` is readable and holds PEM.
fn check_pem(what: &str, path: &Path) -> Result<(), String> {
    let text = std::fs::read(path).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if !text.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(format!("{what} {}: not a PEM file", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_mysql_clients_names_in_either_spelling_and_its_defaults() {
        assert_eq!(MysqlTls::from_params(&[]).unwrap(), MysqlTls::default());
        for key in ["ssl-mode", "ssl_mode"] {
            let tls = MysqlTls::from_params(&pairs(&[(key, "verify_identity")])).unwrap();
            assert_eq!(tls.mode, SslMode::VerifyIdentity);
        }
        assert!(is_tls_key("ssl_ca") && is_tls_key("ssl-key") && !is_tls_key("ssl"));
        assert_eq!(MysqlTls::default().ssl_opts().map(|_| ()), Some(()));
        let disabled = MysqlTls::from_params(&pairs(&[("ssl-mode", "DISABLED")])).unwrap();
        assert!(disabled.ssl_opts().is_none());
    }

    #[test]
    fn bad_values_and_missing_files_are_named() {
        let err = MysqlTls::from_params(&pairs(&[("ssl-mode", "STRICT")])).unwrap_err();
        assert!(err.contains("\"STRICT\""), "{err}");
        let tls = MysqlTls::from_params(&pairs(&[("ssl-ca", "/nonexistent/ca.pem")])).unwrap();
        let err = tls.check_files().unwrap_err();
        assert!(err.contains("ssl-ca /nonexistent/ca.pem"), "{err}");
        let err = MysqlTls::from_params(&pairs(&[("ssl-cert", "/c.pem")])).unwrap_err();
        assert!(err.contains("ssl-key"), "{err}");
    }
}
