//! The shared test support (a real `redis-server`, killed when dropped), and what only
//! these tests need: a TLS client made by this crate, and the proptest strategies.
#![allow(dead_code, unused_imports)]

pub mod strategy;

pub use sluicegate_test_support::*;

/// A client of a [`Server::start_tls`] server over TLS, trusting its CA.
pub fn tls_client(server: &Server) -> redis::Client {
    let (_, certs) = server.tls.as_ref().expect("a TLS server");
    sluicegate_redis::client(&server.tls_url(), Some(&certs.ca_pem())).expect("TLS client")
}
