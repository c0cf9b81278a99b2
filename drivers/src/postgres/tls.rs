//! TLS for every PostgreSQL connection picolease opens (statements,
//! `LISTEN`, cancel requests, admin commands), configured with libpq's
//! names: `sslmode`, `sslrootcert`, `sslcert`, `sslkey` in the URL, or
//! `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY` where the URL is
//! silent. Pure Rust (rustls with the ring provider): no system OpenSSL,
//! the same behaviour on every platform.
//!
//! What each mode protects against, as libpq's documentation defines them
//! (its section "SSL Support", table "SSL Mode Descriptions"):
//! `disable` never encrypts; `prefer` (the default) encrypts when the
//! server offers TLS and checks nothing; `require` always encrypts and
//! refuses a server without TLS, but checks the certificate only when a
//! root certificate is named (it then acts as `verify-ca`); `verify-ca`
//! also checks that a trusted CA signed the server's certificate;
//! `verify-full` also checks that the certificate names the host
//! connected to (each host of a multi-host URL). `sslrootcert=system`
//! trusts the platform's roots and, as in libpq, asks for `verify-full`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::tls_connect::PgTlsConnector;
use super::tls_verify::{AnyName, Unchecked};

/// How hard a connection insists on TLS and what it checks: libpq's
/// `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    /// Plain text only.
    Disable,
    /// TLS when the server offers it, nothing checked (libpq's default).
    Prefer,
    /// TLS or no connection; the certificate is checked only against a
    /// named root certificate (then as [`SslMode::VerifyCa`]).
    Require,
    /// TLS, and the server's certificate signed by a trusted CA.
    VerifyCa,
    /// TLS, a trusted CA, and the certificate names the host.
    VerifyFull,
}

impl SslMode {
    /// libpq's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            // libpq's `allow` tries plain text first: picolease treats it
            // as `prefer` (it encrypts more, never less).
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// Where trusted root certificates come from: libpq's `sslrootcert`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootCerts {
    /// A PEM file of one or more CA certificates.
    File(PathBuf),
    /// The platform's trust store (`sslrootcert=system`).
    System,
}

/// The TLS settings of a PostgreSQL connection string, in libpq's terms.
/// [`PgConnector::new`](super::PgConnector::new) reads them from the URL
/// (and the environment); [`PgTls::connector`] turns them into the
/// tokio-postgres connector every picolease connection is made with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgTls {
    /// `sslmode`.
    pub mode: SslMode,
    /// `sslrootcert`.
    pub root: Option<RootCerts>,
    /// `sslcert`: a client certificate chain (PEM), for certificate login.
    pub cert: Option<PathBuf>,
    /// `sslkey`: the client certificate's private key (PEM).
    pub key: Option<PathBuf>,
}

/// The connection string's TLS keys, the ones taken out before
/// tokio-postgres reads it (it knows `sslmode` only as far as `require`).
pub(crate) const TLS_PARAMS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

impl Default for PgTls {
    fn default() -> Self {
        PgTls {
            mode: SslMode::Prefer,
            root: None,
            cert: None,
            key: None,
        }
    }
}

impl PgTls {
    /// The settings from a connection string's TLS pairs (`pairs`, already
    /// taken out of it), each falling back to its libpq environment
    /// variable (read through `env`) when the string is silent. A value
    /// libpq would refuse is an error naming it.
    pub(crate) fn from_params(
        pairs: &[(String, String)],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<PgTls, String> {
        let get = |key: &str, var: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .or_else(|| env(var).filter(|v| !v.is_empty()))
        };
        let mode = get("sslmode", "PGSSLMODE");
        let root = get("sslrootcert", "PGSSLROOTCERT").map(|root| match root.as_str() {
            "system" => RootCerts::System,
            _ => RootCerts::File(PathBuf::from(root)),
        });
        let mode = match mode {
            Some(mode) => SslMode::parse(&mode).ok_or_else(|| {
                format!(
                    "sslmode must be disable, allow, prefer, require, verify-ca or verify-full, not {mode:?}"
                )
            })?,
            // libpq: `sslrootcert=system` makes `verify-full` the default.
            None if root == Some(RootCerts::System) => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if root == Some(RootCerts::System) && mode != SslMode::VerifyFull {
            return Err(format!(
                "sslrootcert=system needs sslmode=verify-full (as in libpq), not sslmode={}",
                mode.as_str()
            ));
        }
        let cert = get("sslcert", "PGSSLCERT").map(PathBuf::from);
        let key = get("sslkey", "PGSSLKEY").map(PathBuf::from);
        if cert.is_some() != key.is_some() {
            return Err("sslcert and sslkey go together: name both files or neither".into());
        }
        Ok(PgTls {
            mode,
            root,
            cert,
            key,
        })
    }

    /// What tokio-postgres is told: it negotiates TLS for `prefer` and
    /// insists for `require` and stronger; the checks are the connector's.
    pub(crate) fn tokio_mode(&self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Tokio;
        match self.mode {
            SslMode::Disable => Tokio::Disable,
            SslMode::Prefer => Tokio::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Tokio::Require,
        }
    }

    /// The connector for these settings: the root certificates, client
    /// certificate and key are read now, so a missing or unreadable file
    /// is an error here (naming it), not at every connection attempt.
    pub fn connector(&self) -> Result<PgTlsConnector, String> {
        if self.mode == SslMode::Disable {
            return Ok(PgTlsConnector::new(None));
        }
        // ring, not aws-lc-rs: pure Rust and assembly, no C toolchain or
        // cmake in the build, the same provider mysql_async is built with.
        // rustls 0.23.48 deprecates it for lacking post-quantum key
        // exchange, which PostgreSQL 15's OpenSSL does not offer either.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?;
        // `require` with a root certificate named checks as `verify-ca`,
        // as libpq does.
        let check = match (self.mode, &self.root) {
            (SslMode::VerifyFull, _) => Check::Full,
            (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Check::Ca,
            _ => Check::Nothing,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            Check::Nothing => Arc::new(Unchecked(provider.signature_verification_algorithms)),
            Check::Ca | Check::Full => {
                let roots = self.roots()?;
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|e| format!("TLS root certificates: {e}"))?;
                match check {
                    Check::Full => webpki,
                    _ => Arc::new(AnyName(webpki)),
                }
            }
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "sslcert")?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("sslkey {}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("sslcert and sslkey do not make a client identity: {e}"))?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(PgTlsConnector::new(Some(Arc::new(config))))
    }

    /// The trust anchors `verify-ca` and `verify-full` check against: the
    /// named file, the platform's store, or libpq's default file
    /// (`~/.postgresql/root.crt`) when none is named.
    fn roots(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        match &self.root {
            Some(RootCerts::System) => {
                let found = rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    // One unusable certificate in a system store is no
                    // reason to refuse the others.
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    return Err(
                        "sslrootcert=system: the platform's trust store has no usable certificates"
                            .into(),
                    );
                }
            }
            Some(RootCerts::File(path)) => {
                for cert in read_certs(path, "sslrootcert")? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                }
            }
            None => {
                let default = std::env::var_os("HOME")
                    .map(|home| Path::new(&home).join(".postgresql/root.crt"))
                    .filter(|path| path.exists());
                let Some(path) = default else {
                    return Err(format!(
                        "sslmode={} needs a root certificate to check the server's against: \
                         set sslrootcert=FILE (a PEM file of the CA), or sslrootcert=system \
                         with sslmode=verify-full",
                        self.mode.as_str()
                    ));
                };
                for cert in read_certs(&path, "sslrootcert")? {
                    let _ = roots.add(cert);
                }
            }
        }
        Ok(roots)
    }
}

/// What a handshake checks of the server's certificate.
#[derive(Clone, Copy)]
enum Check {
    Nothing,
    Ca,
    Full,
}

/// The certificates of a PEM file, at least one; errors name the key
/// (`what`) and the file.
fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn libpq_defaults_prefer_and_system_roots_ask_for_verify_full() {
        assert_eq!(PgTls::from_params(&[], no_env).unwrap(), PgTls::default());
        let system = PgTls::from_params(&pairs(&[("sslrootcert", "system")]), no_env).unwrap();
        assert_eq!(system.mode, SslMode::VerifyFull);
        assert_eq!(system.root, Some(RootCerts::System));
        let err = PgTls::from_params(
            &pairs(&[("sslrootcert", "system"), ("sslmode", "require")]),
            no_env,
        )
        .unwrap_err();
        assert!(err.contains("verify-full"), "{err}");
    }

    #[test]
    fn bad_values_are_named_and_the_environment_fills_silences() {
        let err = PgTls::from_params(&pairs(&[("sslmode", "strict")]), no_env).unwrap_err();
        assert!(err.contains("\"strict\""), "{err}");
        let err = PgTls::from_params(&pairs(&[("sslcert", "/c.pem")]), no_env).unwrap_err();
        assert!(err.contains("sslkey"), "{err}");
        let env = |var: &str| (var == "PGSSLMODE").then(|| "verify-ca".to_string());
        assert_eq!(
            PgTls::from_params(&[], env).unwrap().mode,
            SslMode::VerifyCa
        );
        // The URL wins over the environment.
        let url = pairs(&[("sslmode", "disable")]);
        assert_eq!(
            PgTls::from_params(&url, env).unwrap().mode,
            SslMode::Disable
        );
    }

    #[test]
    fn missing_files_are_refused_when_the_connector_is_built_naming_them() {
        let tls = PgTls {
            mode: SslMode::VerifyFull,
            root: Some(RootCerts::File("/nonexistent/ca.pem".into())),
            cert: None,
            key: None,
        };
        let err = tls.connector().unwrap_err();
        assert!(err.contains("sslrootcert /nonexistent/ca.pem"), "{err}");
        let tls = PgTls {
            mode: SslMode::Require,
            root: None,
            cert: Some("/nonexistent/c.pem".into()),
            key: Some("/nonexistent/k.pem".into()),
        };
        let err = tls.connector().unwrap_err();
        assert!(err.contains("sslcert /nonexistent/c.pem"), "{err}");
        // Nothing to read: require without a root, prefer, disable.
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            let tls = PgTls {
                mode,
                ..PgTls::default()
            };
            tls.connector().unwrap();
        }
    }
}
