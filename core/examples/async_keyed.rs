//! A limit per user in async tasks: requests wait in line for a token with
//! `acquire_async` (sleeping once on tokio's timer) instead of failing, and give up
//! with a denial, to answer 429, when their turn is further away than they will wait.
//!
//! Run with `cargo run -p sluicegate-core --example async_keyed --features tokio`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{TokenBucket, SECOND};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Per user: a burst of 3, then 10 per second (one every 100 ms); at most 10 000
    // users in memory.
    let limiter = Arc::new(KeyedLimiter::new(TokenBucket::new(3, 10, SECOND)?, 10_000));
    let start = Instant::now();
    let mut tasks = Vec::new();
    // alice sends 8 requests at once, bob 2: each request is its own task.
    for (user, requests) in [("alice", 8), ("bob", 2)] {
        for n in 1..=requests {
            let limiter = Arc::clone(&limiter);
            tasks.push(tokio::spawn(async move {
                // Wait at most 250 ms for a token.
                let outcome = limiter
                    .acquire_async(user, 1, Duration::from_millis(250))
                    .await;
                let at = start.elapsed().as_millis();
                match outcome {
                    Ok(d) => println!(
                        "{at:>4} ms  {user} #{n}: admitted after waiting {} ms",
                        d.delay / 1000
                    ),
                    // Its turn is more than 250 ms away; `retry_after` says when the
                    // same call would get a turn within 250 ms (for `Retry-After`).
                    Err(d) => println!(
                        "{at:>4} ms  {user} #{n}: denied, retry in {} ms",
                        d.retry_after.unwrap_or(0) / 1000
                    ),
                }
            }));
        }
    }
    for task in tasks {
        task.await?;
    }
    // 3 at once and 2 more within 250 ms for alice; bob has a bucket of his own.
    Ok(())
}
