//! The shared test support (a real `redis-server`, killed when dropped), and what only
//! these tests need: a TLS client made by this crate, and the proptest strategies.
#![allow(dead_code, unused_imports)]

pub mod strategy;

pub use sluicegate_test_support::*;

use redis::ConnectionLike;
use sluicegate_core::{Request, Ticks};
use sluicegate_redis::{LuaAlgorithm, RedisLimiter};

/// A client of a [`Server::start_tls`] server over TLS, trusting its CA.
pub fn tls_client(server: &Server) -> redis::Client {
    let (_, certs) = server.tls.as_ref().expect("a TLS server");
    sluicegate_redis::client(&server.tls_url(), Some(&certs.ca_pem())).expect("TLS client")
}

/// A multiplexed connection to `server`, for a `#[tokio::test]`'s asynchronous calls.
pub async fn connect_multiplexed(server: &Server) -> redis::aio::MultiplexedConnection {
    let client = server.client();
    let con = client.get_multiplexed_async_connection().await;
    con.expect("a multiplexed connection")
}

/// Whether `limiter` allows a request of cost 1 on `key` at `at`.
pub fn allowed_at<A: LuaAlgorithm, K: AsRef<[u8]> + ?Sized>(
    limiter: &RedisLimiter<A>,
    con: &mut impl ConnectionLike,
    key: &K,
    at: Ticks,
) -> bool {
    let decision = limiter.check_request(con, &Request::new(key).at(at));
    decision.unwrap().allowed
}
