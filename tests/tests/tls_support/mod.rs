//! A certificate authority made at run time for the TLS tests (nothing
//! committed): a CA, a server certificate for `127.0.0.1` only (so that
//! `localhost` is a host name it does not name), a client certificate
//! whose common name is a database user, and a second, foreign CA. The
//! files are written into a temporary directory owned by `owner` (the
//! server's user: PostgreSQL refuses a key others can read), keys 0600.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// The files of one test's certificate authority.
pub struct Pki {
    dir: tempfile::TempDir,
}

fn ca(name: &str) -> (Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("CA certificate");
    (cert, key)
}

fn leaf(
    sans: Vec<String>,
    common_name: &str,
    issuer: &Certificate,
    issuer_key: &KeyPair,
) -> (Certificate, KeyPair) {
    let mut params = CertificateParams::new(sans).expect("leaf params");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    let key = KeyPair::generate().expect("leaf key");
    let cert = params
        .signed_by(&key, issuer, issuer_key)
        .expect("leaf certificate");
    (cert, key)
}

impl Pki {
    /// A CA, a server certificate for 127.0.0.1, a client certificate for
    /// `client_user`, and a foreign CA; owned by `owner` (`postgres`,
    /// `mysql`).
    pub fn new(owner: &str, client_user: &str) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("picolease-tlstest-")
            .tempdir()
            .expect("a temporary directory");
        let pki = Pki { dir };
        let (ca_cert, ca_key) = ca("picolease test CA");
        let (server, server_key) = leaf(vec!["127.0.0.1".into()], "127.0.0.1", &ca_cert, &ca_key);
        let (client, client_key) = leaf(Vec::new(), client_user, &ca_cert, &ca_key);
        let (foreign, _) = ca("a CA nobody trusts");
        pki.write("ca.pem", &ca_cert.pem(), 0o644);
        pki.write("server.pem", &server.pem(), 0o644);
        pki.write("server.key", &server_key.serialize_pem(), 0o600);
        pki.write("client.pem", &client.pem(), 0o644);
        pki.write("client.key", &client_key.serialize_pem(), 0o600);
        pki.write("foreign.pem", &foreign.pem(), 0o644);
        let status = Command::new("chown")
            .args(["-R", &format!("{owner}:{owner}")])
            .arg(pki.dir.path())
            .status()
            .expect("chown");
        assert!(status.success(), "chown of {}", pki.dir.path().display());
        // The client's key stays the test's own (it runs as root).
        let status = Command::new("chown")
            .args(["root:root"])
            .arg(pki.path("client.key"))
            .status()
            .expect("chown");
        assert!(status.success());
        pki
    }

    fn write(&self, name: &str, text: &str, mode: u32) {
        let path = self.path(name);
        std::fs::write(&path, text).expect("certificate written");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("mode");
    }

    /// One of the files: `ca.pem`, `server.pem`, `server.key`,
    /// `client.pem`, `client.key`, `foreign.pem`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// [`Pki::path`] as a string, for URLs and settings.
    pub fn file(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
