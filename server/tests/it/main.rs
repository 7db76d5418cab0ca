//! The server's integration tests as one binary, each file a module: the service on
//! real sockets, beside a real PostgreSQL, Redis and OTLP receiver where a test needs one
//! (each test starts its own, and nextest runs each test in a process of its own).

mod accounts;
mod coalesce;
mod common;
mod edge;
mod envoy_config;
mod failover;
mod fleet;
mod grpc;
mod init;
mod key_tables;
mod limitador;
mod limits;
mod locks;
mod lua;
mod parameter_change;
mod permissions;
mod policies;
mod policy_files;
mod ready;
mod reports;
mod rlqs;
mod slow_clients;
mod store_load;
mod telemetry;
mod watch;
mod when_key;
