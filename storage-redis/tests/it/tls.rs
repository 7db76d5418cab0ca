//! `rediss://`: the library over TLS against a real `redis-server` listening with TLS, its
//! certificate signed by a CA the test generates.

use sluicegate_core::{Request, TokenBucket, SECOND};
use sluicegate_redis::{client, connect_async, Error, Reconnecting, RedisLimiter, DEFAULT_TIMEOUT};

use crate::common::{self, Certs, Server};

const EPOCH: u64 = 1_790_000_000_000_000;

fn limiter() -> RedisLimiter<TokenBucket> {
    RedisLimiter::new(TokenBucket::new(5, 2, SECOND).unwrap()).unwrap()
}

/// A trace of (time, cost) from `EPOCH` on, mixing admissions and denials.
fn trace() -> impl Iterator<Item = (u64, u64)> {
    (0..60u64).scan(EPOCH, |now, i| {
        *now += (i * 7919) % 700_000;
        Some((*now, 1 + i % 3))
    })
}

#[test]
fn decisions_over_tls_equal_those_over_plain_tcp() {
    let server = Server::start_tls();
    let limiter = limiter();
    let mut tls = Reconnecting::new(common::tls_client(&server));
    let mut plain = Reconnecting::new(server.client());
    for (now, cost) in trace() {
        let over_tls = limiter
            .check_request(&mut tls, &Request::new(b"tls").cost(cost).at(now))
            .unwrap();
        let over_tcp = limiter
            .check_request(&mut plain, &Request::new(b"tcp").cost(cost).at(now))
            .unwrap();
        assert_eq!(over_tls, over_tcp);
        let stored: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
            .arg("tls")
            .arg("tcp")
            .query(&mut plain)
            .unwrap();
        assert_eq!(stored[0], stored[1]);
    }
    // The server's clock over TLS too: a fresh key admits.
    assert!(limiter.check(&mut tls, b"clock", 1).unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_connection_speaks_tls() {
    let server = Server::start_tls();
    let limiter = limiter();
    let mut tls = connect_async(common::tls_client(&server), DEFAULT_TIMEOUT).unwrap();
    let mut plain = Reconnecting::new(server.client());
    for (now, cost) in trace() {
        let over_tls = limiter
            .check_request_async(&mut tls, &Request::new(b"tls").cost(cost).at(now))
            .await;
        let over_tcp = limiter
            .check_request(&mut plain, &Request::new(b"tcp").cost(cost).at(now))
            .unwrap();
        assert_eq!(over_tls.unwrap(), over_tcp);
    }
}

fn assert_tls_error<T: std::fmt::Debug>(result: Result<T, Error>, words: &str) {
    match result {
        Err(Error::Tls(reason)) => assert!(reason.contains(words), "{reason}"),
        other => panic!("expected a TLS error mentioning {words:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_the_ca_did_not_sign_is_a_typed_tls_error() {
    let server = Server::start_tls();
    let other = tempdir("other-ca");
    let stranger = Certs::generate(&other);
    let untrusting = client(&server.tls_url(), Some(&stranger.ca_pem())).unwrap();
    let limiter = limiter();

    let mut con = Reconnecting::new(untrusting.clone());
    assert_tls_error(limiter.check(&mut con, b"k", 1), "invalid peer certificate");
    // Not an outage: a fail-open policy does not apply to it.
    assert!(!limiter
        .check(&mut con, b"k", 1)
        .unwrap_err()
        .is_unavailable());
    let mut con = connect_async(untrusting, DEFAULT_TIMEOUT).unwrap();
    assert_tls_error(
        limiter.check_async(&mut con, b"k", 1).await,
        "invalid peer certificate",
    );
    // Nothing was written.
    let exists: u64 = redis::cmd("EXISTS")
        .arg("k")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(exists, 0);
    let _ = std::fs::remove_dir_all(other);
}

#[test]
fn a_ca_that_is_not_pem_or_not_for_tls_is_refused_at_once() {
    let url = "rediss://127.0.0.1:1/";
    assert_tls_error(
        client(url, Some(b"not a certificate")),
        "no PEM certificate",
    );
    let truncated = b"-----BEGIN CERTIFICATE-----\nAAAA";
    assert_tls_error(client(url, Some(truncated)), "not valid PEM");
    let dir = tempdir("ca");
    let ca = Certs::generate(&dir).ca_pem();
    assert_tls_error(
        client("redis://127.0.0.1:1/", Some(&ca)),
        "not a rediss:// URL",
    );
    assert!(client(url, Some(&ca)).is_ok());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn tls_to_a_plain_port_is_a_typed_error_within_the_timeout() {
    let server = Server::start_tls();
    let (_, certs) = server.tls.as_ref().unwrap();
    let wrong = format!("rediss://127.0.0.1:{}/", server.port);
    let mut con = Reconnecting::new(client(&wrong, Some(&certs.ca_pem())).unwrap());
    let started = std::time::Instant::now();
    let result = limiter().check(&mut con, b"k", 1);
    // The 250 ms timeout 1.75 s late on a loaded machine; a hello with no timeout hangs.
    assert!(
        started.elapsed() < DEFAULT_TIMEOUT * 8,
        "{:?}",
        started.elapsed()
    );
    // A plain server never answers a TLS hello: no reply within the timeout.
    assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
}

fn tempdir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("sluicegate-tls-{name}-{}", std::process::id()))
}
