//! The shared test support; every server of the module's tests loads the module (its
//! test build).
#![allow(dead_code, unused_imports)]

pub use sluicegate_test_support::*;

/// A server without persistence, the module loaded, with extra `redis-server` arguments.
pub fn server(extra: &[&str]) -> Server {
    Server::start_loading(&module_path(false), extra)
}
