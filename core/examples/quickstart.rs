//! Ten requests offered every 100 ms to a token bucket of 5 refilled at 2 per second,
//! on an explicit clock: what each one is told.
//!
//! Run with `cargo run --example quickstart`.

use sluicegate_core::{Algorithm, TokenBucket, MILLISECOND, SECOND};

fn main() -> Result<(), sluicegate_core::ParamError> {
    let bucket = TokenBucket::new(5, 2, SECOND)?;
    let mut state = None;
    println!(
        "{:>7}  {:>7}  {:>9}  {:>11}  {:>11}",
        "t (ms)", "allowed", "remaining", "retry (ms)", "reset (ms)"
    );
    for i in 0..10 {
        let now = i * 100 * MILLISECOND;
        let (decision, next) = bucket.decide(state, now, 1);
        state = next;
        let retry = decision
            .retry_after
            .map_or("never".to_string(), |t| format!("{:.1}", t as f64 / 1e3));
        println!(
            "{:>7}  {:>7}  {:>9}  {:>11}  {:>11.1}",
            now / MILLISECOND,
            decision.allowed,
            decision.remaining,
            retry,
            decision.reset_after as f64 / 1e3
        );
    }
    Ok(())
}
