//! TLS to PostgreSQL (issue 43), against a private server started by the
//! test (`pg_support::cluster`): `ssl = on` with a certificate from a CA
//! the test makes (`tls_support`), `hostssl` only (`hostnossl … reject`),
//! and one role that logs in by client certificate
//! (`cert clientcert=verify-full`). The server is removed when the test
//! ends, also on failure.
//!
//! `cargo test -p picolease-tests --test integration pg_tls::`

use crate::pg_support;
use crate::tls_support;

use std::time::{Duration, Instant};

use pg_support::cluster::Server;
use pg_support::{config, unique_table};
use picolease::postgres::{PgConnector, PgError, PgLease};
use tls_support::Pki;

/// A private server that takes TLS only, with `pki`'s certificate; role
/// `certuser` logs in by client certificate alone.
fn tls_server(pki: &Pki) -> Server {
    let server = Server::primary(&[
        "ssl = on",
        &format!("ssl_cert_file = '{}'", pki.file("server.pem")),
        &format!("ssl_key_file = '{}'", pki.file("server.key")),
        &format!("ssl_ca_file = '{}'", pki.file("ca.pem")),
    ]);
    server.sql("CREATE ROLE certuser LOGIN SUPERUSER");
    server.set_hba(
        "local all all trust\n\
         hostssl all certuser 127.0.0.1/32 cert clientcert=verify-full\n\
         hostssl all all 127.0.0.1/32 trust\n\
         hostssl replication all 127.0.0.1/32 trust\n\
         hostnossl all all 0.0.0.0/0 reject\n",
    );
    server
}

fn url(server: &Server, host: &str, user: &str, params: &str) -> String {
    format!(
        "postgres://{user}@{host}:{}/postgres?{params}",
        server.port()
    )
}

/// Connects with `url` and reads whether this session is encrypted.
async fn encrypted(url: &str) -> Result<bool, PgError> {
    let client = PgConnector::new(url)?.connect_client().await?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| PgError::Connect {
            reason: e.to_string(),
        })?;
    Ok(row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_connects_encrypted_and_every_refusal_names_its_cause() {
    let pki = Pki::new("postgres", "certuser");
    let server = tls_server(&pki);
    let ca = pki.file("ca.pem");
    let foreign = pki.file("foreign.pem");

    // require (nothing checked), verify-ca (a host name the certificate
    // does not name is fine), verify-full (the name it names), and the
    // default `prefer`: all encrypted.
    for (host, params) in [
        ("127.0.0.1", "sslmode=require".to_string()),
        ("localhost", format!("sslmode=verify-ca&sslrootcert={ca}")),
        ("127.0.0.1", format!("sslmode=verify-full&sslrootcert={ca}")),
        ("127.0.0.1", String::new()),
    ] {
        let url = url(&server, host, "postgres", &params);
        assert_eq!(encrypted(&url).await, Ok(true), "{url}");
    }

    // A foreign CA, a host name the certificate does not name: refused,
    // as TLS errors (fatal: not retried), naming the cause.
    for (host, params, cause) in [
        (
            "127.0.0.1",
            format!("sslmode=verify-ca&sslrootcert={foreign}"),
            "UnknownIssuer",
        ),
        (
            "127.0.0.1",
            format!("sslmode=require&sslrootcert={foreign}"),
            "UnknownIssuer",
        ),
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            "not valid for name \"localhost\"",
        ),
    ] {
        let url = url(&server, host, "postgres", &params);
        match encrypted(&url).await {
            Err(e @ PgError::Tls { .. }) => {
                assert!(e.to_string().contains(cause), "{url}: {e}");
                assert_eq!(e.failure(), picolease_core::Failure::Fatal, "{e}");
            }
            other => panic!("{url}: expected a TLS refusal, got {other:?}"),
        }
    }

    // Plain text at a server that takes TLS only: refused by the server.
    let plain = url(&server, "127.0.0.1", "postgres", "sslmode=disable");
    match encrypted(&plain).await {
        Err(PgError::Login { code, reason }) => {
            assert_eq!(code, "28000", "{reason}");
            assert!(reason.contains("no encryption"), "{reason}");
        }
        other => panic!("plain text was not refused: {other:?}"),
    }

    // A missing key file: named when the connector is built.
    let missing = url(
        &server,
        "127.0.0.1",
        "certuser",
        &format!("sslmode=verify-full&sslrootcert={ca}&sslcert=/nonexistent/c.pem&sslkey=/nonexistent/c.key"),
    );
    match PgConnector::new(&missing) {
        Err(e @ PgError::Tls { .. }) => {
            assert!(e.to_string().contains("sslcert /nonexistent/c.pem"), "{e}")
        }
        other => panic!("expected the missing file named, got {other:?}"),
    }
}

/// A user's own rustls configuration (its roots) on every connection:
/// trusted, encrypted; with a root that did not sign the server's
/// certificate, refused as a TLS error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn your_own_rustls_configuration_is_used() {
    use picolease::postgres::{PgTlsConnector, SslMode};
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let pki = Pki::new("postgres", "certuser");
    let server = tls_server(&pki);
    let plain_url = url(&server, "127.0.0.1", "postgres", "");
    let own = |root: &str| {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(pki.path(root)).unwrap())
            .unwrap();
        #[allow(deprecated)]
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        PgConnector::new(&plain_url).unwrap().with_tls_connector(
            SslMode::Require,
            PgTlsConnector::from_rustls(std::sync::Arc::new(config)),
        )
    };
    let client = own("ca.pem").connect_client().await.unwrap();
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));
    match own("foreign.pem").connect_client().await {
        Err(PgError::Tls { reason, .. }) => assert!(reason.contains("UnknownIssuer"), "{reason}"),
        other => panic!("expected a TLS refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_login_works_and_without_a_certificate_is_refused() {
    let pki = Pki::new("postgres", "certuser");
    let server = tls_server(&pki);
    let ca = pki.file("ca.pem");
    let with_cert = url(
        &server,
        "127.0.0.1",
        "certuser",
        &format!(
            "sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
            pki.file("client.pem"),
            pki.file("client.key")
        ),
    );
    assert_eq!(encrypted(&with_cert).await, Ok(true));
    let without = url(
        &server,
        "127.0.0.1",
        "certuser",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    assert!(
        encrypted(&without).await.is_err(),
        "certuser logged in without a certificate"
    );
}

/// Two contenders over verify-full TLS: one leads, a clean shutdown hands
/// over at the next epoch within a fraction of the ttl (the release
/// notice came through the TLS `LISTEN` connection), every picolease
/// session on the server is encrypted, a fenced transaction is cut at its
/// deadline, and the connector's cancel request works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_lead_hand_over_and_cancel_over_tls() {
    let pki = Pki::new("postgres", "certuser");
    let server = tls_server(&pki);
    let url = url(
        &server,
        "127.0.0.1",
        "postgres",
        &format!("sslmode=verify-full&sslrootcert={}", pki.file("ca.pem")),
    );
    let table = unique_table("tls");
    let ttl = Duration::from_secs(4);
    let start = |holder: &str| {
        PgLease::builder(config("tls", holder, ttl), PgConnector::new(&url).unwrap())
            .table(table.clone())
            .start()
            .unwrap()
    };
    let a = start("a");
    assert!(
        a.wait_for(Duration::from_secs(10), |l| l.is_leader())
            .is_some(),
        "a leads over TLS"
    );
    let b = start("b");
    let epoch = a.leadership().epoch.unwrap();
    // b's listening connection is up once b has answered.
    assert!(b
        .wait_for(Duration::from_secs(10), |l| l.epoch.is_some())
        .is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;

    let sessions = server.sql(
        "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
         FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
         WHERE a.application_name = 'picolease'",
    );
    let counts: Vec<u64> = sessions
        .trim()
        .split('|')
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(counts[0] >= 3, "statement and LISTEN sessions: {sessions}");
    assert_eq!(
        counts[1], 0,
        "a picolease session in plain text: {sessions}"
    );

    // A fenced transaction whose statement outlives the deadline is cut
    // then: by the driver's cancel or by the server's own bound, which
    // race.
    let mut client = PgConnector::new(&url)
        .unwrap()
        .connect_client()
        .await
        .unwrap();
    let fence = a.fence().expect("a leads");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
    let tx = fence.transaction(&mut client, deadline).await.unwrap();
    let cut = Instant::now();
    let slept = tx.execute("SELECT pg_sleep(10)", &[]).await;
    assert!(
        matches!(&slept, Err(PgError::Fenced { .. }))
            || matches!(&slept, Err(PgError::Database { code, .. }) if code == "57014"),
        "{slept:?}"
    );
    assert!(
        cut.elapsed() < Duration::from_secs(3),
        "cut at its deadline"
    );
    drop(tx);

    // The connector's cancel request (made with its TLS connector) stops
    // a running statement "due to user request". PostgreSQL takes cancel
    // requests without a pg_hba.conf check, so this cannot tell TLS from
    // plain text; that it is TLS is `PgConnector::cancel`'s code.
    {
        use picolease::postgres::Connect;
        let connector = PgConnector::new(&url).unwrap();
        let client = connector.connect_client().await.unwrap();
        let token = client.cancel_token();
        let sleeping =
            tokio::spawn(async move { client.simple_query("SELECT pg_sleep(10)").await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let asked = Instant::now();
        connector
            .cancel(token)
            .await
            .expect("the cancel request is sent");
        let ended = sleeping.await.unwrap();
        let err = ended.expect_err("the statement was cancelled");
        let db = err.as_db_error().expect("the server's error");
        assert_eq!(db.code().code(), "57014", "{db:?}");
        assert!(
            db.message().contains("user request"),
            "cancelled by the request, not a timeout: {db:?}"
        );
        assert!(asked.elapsed() < Duration::from_secs(2));
    }

    let handed = Instant::now();
    a.shutdown().await.unwrap();
    let led = b.wait_for(Duration::from_secs(10), |l| l.is_leader());
    let took = handed.elapsed();
    let led = led.expect("b leads after a's release");
    assert!(led.epoch.unwrap().get() > epoch.get());
    assert!(
        took < ttl / 2,
        "the release notice came over TLS: {took:?} (a poll would take an interval)"
    );
    b.shutdown().await.unwrap();
}
