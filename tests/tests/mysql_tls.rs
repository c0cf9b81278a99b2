//! TLS to MariaDB (issue 43), against a private server started by the
//! test (never the shared one at 127.0.0.1:3306, whose settings no test
//! changes): `mariadb-install-db` into a temporary directory, `mariadbd`
//! as the `mysql` user on a free port with a certificate from a CA the
//! test makes (`tls_support`) and `require_secure_transport = ON`; a
//! user `certuser` that must present a client certificate (`REQUIRE
//! X509`). The server is killed and its directory removed when the test
//! ends, also on failure.
//!
//! `cargo test -p picolease-tests --test integration mysql_tls::`

use crate::mysql_support;
use crate::tls_support;

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_support::Server;
use picolease::mysql::{MysqlConnector, MysqlError, MysqlLease};
use picolease::{Config, HolderId, LeaseName, TableName};
use tls_support::Pki;

/// A private MariaDB that takes TLS only, with the users the tests log in
/// as: `picolease` (password-less) and `certuser` (a client certificate
/// required).
fn tls_server(pki: &Pki) -> Server {
    let server = Server::start(&[
        format!("--ssl-ca={}", pki.file("ca.pem")),
        format!("--ssl-cert={}", pki.file("server.pem")),
        format!("--ssl-key={}", pki.file("server.key")),
        "--require-secure-transport=ON".to_string(),
        "--skip-log-bin".to_string(),
    ]);
    server.sql("CREATE USER 'certuser'@'%' REQUIRE X509; GRANT ALL ON *.* TO 'certuser'@'%';");
    server
}

/// Connects with `url` and reads this session's cipher (empty: plain).
async fn cipher(url: &str) -> Result<String, MysqlError> {
    let mut conn = MysqlConnector::new(url)?.connect_client().await?;
    let row: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .map_err(|e| MysqlError::Connect {
            reason: e.to_string(),
        })?;
    Ok(row.map(|(_, cipher)| cipher).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_connects_encrypted_and_every_refusal_names_its_cause() {
    let pki = Pki::new("mysql", "certuser");
    let server = tls_server(&pki);
    let ca = pki.file("ca.pem");
    let foreign = pki.file("foreign.pem");

    for (host, params) in [
        ("127.0.0.1", String::new()),
        ("127.0.0.1", "ssl-mode=REQUIRED".to_string()),
        ("127.0.0.1", format!("ssl-mode=VERIFY_CA&ssl-ca={ca}")),
        ("127.0.0.1", format!("ssl_mode=VERIFY_IDENTITY&ssl_ca={ca}")),
    ] {
        let url = server.url(host, "picolease", &params);
        let cipher = cipher(&url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(!cipher.is_empty(), "{url}: not encrypted");
    }

    for (host, params, cause) in [
        (
            "127.0.0.1",
            format!("ssl-mode=VERIFY_CA&ssl-ca={foreign}"),
            "UnknownIssuer",
        ),
        (
            "127.0.0.1",
            format!("ssl-mode=REQUIRED&ssl-ca={foreign}"),
            "UnknownIssuer",
        ),
        (
            "localhost",
            format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
            "not valid for name",
        ),
        // VERIFY_CA checks the host name too, for now: mysql_async 0.37.1
        // skips the name check by looking for "NotValidForName" in the
        // error's text, which rustls 0.23.48 no longer writes. Stricter
        // than asked, never weaker; this case tells when it changes.
        (
            "localhost",
            format!("ssl-mode=VERIFY_CA&ssl-ca={ca}"),
            "not valid for name",
        ),
    ] {
        let url = server.url(host, "picolease", &params);
        match cipher(&url).await {
            Err(e @ MysqlError::Tls { .. }) => {
                assert!(e.to_string().contains(cause), "{url}: {e}");
                assert_eq!(e.failure(), picolease_core::Failure::Fatal, "{e}");
            }
            other => panic!("{url}: expected a TLS refusal, got {other:?}"),
        }
    }

    // Plain text at a server that takes TLS only: refused by the server
    // (MariaDB 10.11 answers "Access denied" to a plain-text login under
    // require_secure_transport; MySQL's 3159 is a TLS error).
    let plain = server.url("127.0.0.1", "picolease", "ssl-mode=DISABLED");
    match cipher(&plain).await {
        Err(MysqlError::Login { code: 1045, .. } | MysqlError::Tls { .. }) => {}
        other => panic!("plain text was not refused: {other:?}"),
    }

    // A missing file: named when the connector is built.
    let missing = server.url(
        "127.0.0.1",
        "picolease",
        "ssl-mode=VERIFY_CA&ssl-ca=/nonexistent/ca.pem",
    );
    match MysqlConnector::new(&missing) {
        Err(e @ MysqlError::Tls { .. }) => {
            assert!(e.to_string().contains("ssl-ca /nonexistent/ca.pem"), "{e}")
        }
        other => panic!("expected the missing file named, got {other:?}"),
    }

    // Your own mysql_async TLS options: used, no fall back.
    let own = MysqlConnector::new(&server.url("127.0.0.1", "picolease", ""))
        .unwrap()
        .with_ssl_opts(
            mysql_async::SslOpts::default()
                .with_root_certs(vec![pki.path("ca.pem").into()])
                .with_disable_built_in_roots(true),
        );
    let mut conn = own.connect_client().await.unwrap();
    let row: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .unwrap();
    assert!(row.is_some_and(|(_, cipher)| !cipher.is_empty()));

    // A client certificate for the user that requires one; without it,
    // refused.
    let with_cert = server.url(
        "127.0.0.1",
        "certuser",
        &format!(
            "ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}&ssl-cert={}&ssl-key={}",
            pki.file("client.pem"),
            pki.file("client.key")
        ),
    );
    assert!(!cipher(&with_cert).await.unwrap().is_empty());
    let without = server.url(
        "127.0.0.1",
        "certuser",
        &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
    );
    assert!(
        cipher(&without).await.is_err(),
        "certuser got in without a certificate"
    );
}

/// Two contenders over VERIFY_IDENTITY: one leads, a clean shutdown hands
/// over at the next epoch well within the ttl (the wake-up connection's
/// lock came through TLS), every picolease session is encrypted, and a
/// fenced transaction cut at its deadline is killed from a TLS connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_lead_hand_over_and_kill_over_tls() {
    let pki = Pki::new("mysql", "certuser");
    let server = tls_server(&pki);
    let url = server.url(
        "127.0.0.1",
        "picolease",
        &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", pki.file("ca.pem")),
    );
    let ttl = Duration::from_secs(4);
    let table = TableName::new("tls_leases").unwrap();
    let start = |holder: &str| {
        let config = Config::with_ttl(
            LeaseName::new("tls").unwrap(),
            HolderId::new(holder).unwrap(),
            ttl,
        );
        MysqlLease::builder(config, MysqlConnector::new(&url).unwrap())
            .table(table.clone())
            .start()
            .unwrap()
    };
    let a = start("a");
    assert!(a
        .wait_for(Duration::from_secs(10), |l| l.is_leader())
        .is_some());
    let b = start("b");
    assert!(b
        .wait_for(Duration::from_secs(10), |l| l.epoch.is_some())
        .is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let epoch = a.leadership().epoch.unwrap();

    // Every TCP session from picolease (the program name it sets) is
    // encrypted: performance_schema is off on this small server, so
    // read each session's cipher from the sessions' own status.
    let sessions =
        server.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'picolease'");
    assert!(
        sessions.trim().parse::<u32>().unwrap() >= 3,
        "statement and wake-up sessions: {sessions}"
    );
    // require_secure_transport refuses any plain TCP session, so these
    // are all encrypted; the refusal itself is checked above.

    let mut conn = MysqlConnector::new(&url)
        .unwrap()
        .connect_client()
        .await
        .unwrap();
    let fence = a.fence().expect("a leads");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
    let mut tx = fence.transaction(&mut conn, deadline).await.unwrap();
    let cut = Instant::now();
    let slept = tx.query_drop("SELECT SLEEP(10)").await;
    assert!(slept.is_err(), "the statement ran past its deadline");
    assert!(
        cut.elapsed() < Duration::from_secs(3),
        "cut at its deadline"
    );
    drop(tx);

    let handed = Instant::now();
    a.shutdown().await.unwrap();
    let led = b
        .wait_for(Duration::from_secs(10), |l| l.is_leader())
        .expect("b leads after a's release");
    assert!(led.epoch.unwrap().get() > epoch.get());
    assert!(
        handed.elapsed() < ttl / 2,
        "the wake-up came over TLS: {:?}",
        handed.elapsed()
    );
    b.shutdown().await.unwrap();
}
