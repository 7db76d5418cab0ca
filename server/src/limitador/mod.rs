//! Kuadrant limitador's limits file as served (`--limitador-config`): its namespaces
//! decided as limitador decides ([`served`]), their counters in this process or in Redis
//! ([`counters`]); the gRPC and HTTP front ends answer with them in their own terms.

mod call;
mod counters;
mod memory;
mod metrics;
mod redis;
mod served;

pub(crate) use call::decide;
pub(crate) use counters::{Counters, Mode};
pub(crate) use memory::InMemory;
pub(crate) use metrics::Calls;
pub(crate) use redis::InRedisCounters;
#[cfg(feature = "grpc")]
pub(crate) use served::Answer;
pub(crate) use served::{Applied, Asked, Limits, LimitsError};

#[cfg(test)]
mod tests;
