//! A daily quota per customer that survives restarts, in a sled database.
//!
//! Run with `cargo run -p sluicegate-sled --example sled_quota`.

use sluicegate_core::{FixedWindow, Request, SECOND};
use sluicegate_sled::{open, Create, Durability, SledLimiter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("quotas");
    // 5 requests per customer per day (days aligned to the Unix epoch).
    let quota = FixedWindow::new(5, 24 * 3600 * SECOND)?;
    let now = 1_700_000_000 * SECOND;

    {
        // Create the database (its parent directory must exist). Only this process
        // may have it open until `db` is dropped.
        let db = open(&path, Create::InExistingDir)?;
        let limiter = SledLimiter::new(db.open_tree("quota")?, quota, Durability::EveryDecision);
        for n in 1..=3 {
            // Explicit times keep the example deterministic; `check` reads the clock.
            let d = limiter.check_request(&Request::new(b"customer-42").at(now + n))?;
            println!(
                "request {n}: allowed {}, {} left today",
                d.allowed, d.remaining
            );
        }
    } // The process could stop here: every admission was flushed.

    // Reopen without creating: the quota remembers the 3 requests.
    let db = open(&path, Create::Never)?;
    let limiter = SledLimiter::new(db.open_tree("quota")?, quota, Durability::EveryDecision);
    let d = limiter.check_request(&Request::new(b"customer-42").cost(2).at(now + 10))?;
    println!(
        "after reopening, 2 more: allowed {}, {} left",
        d.allowed, d.remaining
    );
    let d = limiter.check_request(&Request::new(b"customer-42").at(now + 11))?;
    println!(
        "one more: allowed {}, retry in {} min (at midnight UTC)",
        d.allowed,
        d.retry_after.unwrap_or(0) / (60 * SECOND)
    );

    // Records whose day has passed are deleted by a sweep (or `spawn_sweeper`).
    let tomorrow = now + 24 * 3600 * SECOND;
    println!(
        "swept the next day: {} record(s)",
        limiter.collect_expired(tomorrow)?
    );
    Ok(())
}
