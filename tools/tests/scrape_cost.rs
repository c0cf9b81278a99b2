//! The cost of serving `/metrics`: how long a scrape takes to answer, and
//! that scraping does not delay renewals. In one process, as `run
//! --listen` does it (the same recorder, the same tiny_http server thread
//! and render call) with a SQLite leader renewing every 100 ms: renew
//! latency percentiles for a window without scrapes, then for a window of
//! 1,000 scrapes. Prints the figures:
//! `cargo test -p picolease-cli --test cli scrape_cost:: -- --nocapture`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use picolease::sqlite::{Database, SqliteLease};
use picolease::{Config, HolderId, LeaseName};

const SCRAPES: usize = 1_000;
const WINDOW: Duration = Duration::from_secs(5);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn show(label: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{label}: n {}, p50 {:.0}µs, p90 {:.0}µs, p99 {:.0}µs, max {:.0}µs",
        samples.len(),
        us(percentile(&samples, 0.5)),
        us(percentile(&samples, 0.9)),
        us(percentile(&samples, 0.99)),
        us(*samples.last().unwrap())
    );
    percentile(&samples, 0.5)
}

fn scrape(addr: &str) -> usize {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    assert!(response.starts_with(b"HTTP/1.1 200"));
    response.len()
}

#[test]
fn scraping_metrics_is_cheap_and_does_not_delay_renewals() {
    // As `run --listen` configures it: buckets for the statement histogram.
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("picolease_statement_duration_seconds".into()),
            &[
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5,
            ],
        )
        .unwrap()
        .install_recorder()
        .unwrap();
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let addr = server.server_addr().to_ip().unwrap().to_string();
    std::thread::spawn(move || {
        for request in server.incoming_requests() {
            let _ = request.respond(tiny_http::Response::from_string(handle.render()));
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let db = Database::file(dir.path().join("leases.db"));
    let config = Config::with_ttl(
        LeaseName::new("scraped").unwrap(),
        HolderId::new("leader").unwrap(),
        Duration::from_secs(1),
    )
    .interval(Duration::from_millis(100));
    let lease = SqliteLease::builder(config, db).start().unwrap();
    lease
        .wait_for(Duration::from_secs(15), |l| l.is_leader())
        .expect("leads");

    // Without scrapes.
    let before = lease.renew_latencies().len();
    std::thread::sleep(WINDOW);
    let quiet: Vec<Duration> = lease.renew_latencies()[before..].to_vec();

    // With 1,000 scrapes spread over the same window.
    let before = lease.renew_latencies().len();
    let pace = WINDOW / SCRAPES as u32;
    let start = Instant::now();
    let mut scrapes = Vec::with_capacity(SCRAPES);
    let mut bytes = 0;
    for i in 0..SCRAPES {
        let at = start + pace * i as u32;
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        let t = Instant::now();
        bytes = scrape(&addr);
        scrapes.push(t.elapsed());
    }
    let busy: Vec<Duration> = lease.renew_latencies()[before..].to_vec();
    assert!(lease.leadership().is_leader(), "still leading");
    lease.shutdown().unwrap();

    println!("ttl 1s, renew every 100ms, {SCRAPES} scrapes over {WINDOW:?} ({bytes} bytes each)");
    show("scrape (GET /metrics, connect to last byte)", scrapes);
    let quiet_p50 = show("renew latency without scrapes", quiet);
    let busy_p50 = show("renew latency with scrapes   ", busy);
    // Generous: the figures are the point; this only catches a gross delay.
    assert!(
        busy_p50 < quiet_p50 * 10 + Duration::from_millis(5),
        "{busy_p50:?} vs {quiet_p50:?}"
    );
}
