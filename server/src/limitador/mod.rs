//! Kuadrant limitador's limits file as served (`--limitador-config`): its namespaces
//! decided as limitador decides ([`served`]), their counters in this process or in Redis
//! ([`counters`]); the gRPC and HTTP front ends answer with them in their own terms.

mod counters;
mod memory;
mod redis;
mod served;

pub(crate) use counters::{Counters, Mode};
pub(crate) use memory::InMemory;
pub(crate) use redis::InRedisCounters;
pub(crate) use served::{Answer, Asked, Limits, LimitsError};

#[cfg(test)]
mod tests;
