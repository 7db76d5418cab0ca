//! A lock around a ledger kept safe by fencing tokens: eight threads add to it under the
//! lock, then a holder paused past its lease's expiry comes back and is refused.
//!
//! `cargo run -p sluicegate-core --example leases`

use std::time::Duration;

use sluicegate_core::lease::Concurrency;
use sluicegate_core::memory::{FencedResource, Leases};
use sluicegate_core::{MILLISECOND, SECOND};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lock = Leases::new(Concurrency::lock());
    let ledger = FencedResource::new(0u64);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..100 {
                    let guard = lock
                        .acquire(None, 10 * SECOND, Duration::from_secs(10))
                        .expect("the lock is free within ten seconds");
                    let balance = ledger.read(|b| *b);
                    let _ = ledger.write(guard.token(), |b| *b = balance + 1);
                }
            });
        }
    });
    println!(
        "8 threads x 100 increments under the lock: balance {}, {} writes refused",
        ledger.read(|b| *b),
        ledger.refused()
    );

    // A holder stops for 80 ms with a 50 ms lease (a GC pause, a stopped process).
    let paused = lock.try_acquire(None, 50 * MILLISECOND)?;
    std::thread::sleep(Duration::from_millis(80));
    let next = lock.try_acquire(None, SECOND)?;
    ledger.write(next.token(), |b| *b += 10)?;
    println!(
        "token {} took over and wrote: balance {}",
        next.token(),
        ledger.read(|b| *b)
    );
    match ledger.write(paused.token(), |b| *b = 0) {
        Ok(()) => println!("the paused holder's stale write was accepted (a bug)"),
        Err(stale) => println!("the paused holder came back: {stale}"),
    }
    println!("its release says: {:?}", paused.release());
    Ok(())
}
