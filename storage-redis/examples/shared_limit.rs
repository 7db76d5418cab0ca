//! One limit shared by every replica of a service, kept in Redis.
//!
//! Start a server (`redis-server --port 6379`), then run
//! `cargo run -p sluicegate-redis --example shared_limit` (or set `REDIS_URL`). Two
//! "replicas" (two connections, as two processes would have) draw from one bucket; a
//! third request from either is denied until the bucket refills. Redis being down is
//! not a crash: the limiter's fail policy answers, and the example says so.

use sluicegate_core::{memory::KeyedLimiter, TokenBucket, SECOND};
use sluicegate_redis::{FailPolicy, Outcome, Reconnecting, RedisLimiter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // 2 requests at once per user, refilled at 1 per second, on the server's clock.
    let bucket = TokenBucket::new(2, 1, SECOND)?;
    let limiter = RedisLimiter::new(bucket)?
        .with_prefix("example:shared:")
        // While Redis is unreachable, each replica enforces the limit alone.
        .on_unavailable(FailPolicy::Local(KeyedLimiter::new(bucket, 10_000)));
    let client = redis::Client::open(url.as_str())?;
    let mut replicas = [Reconnecting::new(client.clone()), Reconnecting::new(client)];
    // Start the example from a fresh state (nothing to do when Redis is down).
    limiter.reset(&mut replicas[0], b"user:42").ok();

    for (n, replica) in [0, 1, 0].into_iter().enumerate() {
        match limiter.decide(&mut replicas[replica], b"user:42", 1)? {
            Outcome::Decided(d) if d.allowed => {
                println!(
                    "request {} via replica {replica}: allowed, {} left",
                    n + 1,
                    d.remaining
                );
            }
            Outcome::Decided(d) => println!(
                "request {} via replica {replica}: denied, retry in {} ms",
                n + 1,
                d.retry_after.map_or(0, |t| t.div_ceil(1000))
            ),
            Outcome::Local(d, error) => println!(
                "request {}: Redis unavailable ({error}); decided locally: allowed {}",
                n + 1,
                d.allowed
            ),
            other => println!("request {}: {other:?}", n + 1),
        }
    }
    Ok(())
}
