//! The Redis host's integration tests (each on real redis-server processes) as one binary, each
//! file or folder a module.

mod batch;
mod calendar;
mod common;
mod differential;
mod durable_locks;
mod fleet;
mod fleet_refund;
mod lease;
mod limiter;
mod locks;
mod redis;
mod redlock;
mod routes;
mod rwlock;
mod rwlock_processes;
mod sentinel;
mod share;
mod tls;
mod watchdog;
mod wide;
