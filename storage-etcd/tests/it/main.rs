//! The etcd host's integration tests as one binary, each file a module.

mod latency;
mod lock;
mod rwlock;
mod rwlock_load;
mod rwlock_modes;
