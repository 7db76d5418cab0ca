//! The Redis host on a real `redis-server`: expiry, corrupt states, many processes on one
//! key, batches, async clients, faults and a 3-node cluster.

mod clients;
mod expiry;
mod faults;
mod input;
mod processes;
mod seed;

use std::thread::sleep;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use redis::ConnectionLike;
use sluicegate_core::limits::{MAX_LIMIT, MAX_PERIOD};
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{
    Algorithm, Composite, FixedWindow, LeakyBucket, Request, SlidingLog, Ticks, TokenBucket,
    MILLISECOND, SECOND,
};
use sluicegate_redis::{
    connect_async, Error, FailPolicy, LuaAlgorithm, Outcome, Reconnecting, RedisLimiter,
};

use crate::common::{self, Cluster, Server};

const NOW: Ticks = 1_790_000_000_000_000;

fn pttl(con: &mut impl ConnectionLike, key: &[u8]) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}
