//! The direct limiter: the same decisions as the core, and exact under many threads.

use std::sync::Arc;

use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::memory::{DirectLimiter, InMemory};
use sluicegate_core::{
    limits, Ban, Clock, FixedWindow, LeakyBucket, ManualClock, MonotonicClock, Pacing,
    SlidingCounter, SlidingLog, SystemClock, Ticks, TokenBucket, SECOND,
};

/// Drives a limiter on a manual clock and the bare algorithm through the same trace:
/// the stored state must round-trip exactly (the atomic cells pack it into a word).
fn same_as_core<A: InMemory + Clone>(alg: A, trace: &[(Ticks, u64)]) {
    let limiter = DirectLimiter::with_clock(alg.clone(), ManualClock::new(trace[0].0));
    let mut state = None;
    for &(now, cost) in trace {
        limiter.clock().set(now);
        let (expected, next) = alg.decide(state, now, cost);
        assert_eq!(limiter.check(cost), expected, "at {now}, cost {cost}");
        assert_eq!(limiter.state(), next);
        state = next;
    }
}

/// Every algorithm through [`same_as_core`].
fn every_algorithm_as_the_core(limit: u64, rate: u64, period: Ticks, trace: &[(Ticks, u64)]) {
    same_as_core(FixedWindow::new(limit, period).unwrap(), trace);
    same_as_core(
        FixedWindow::new(limit, period).unwrap().counting_denied(),
        trace,
    );
    same_as_core(SlidingCounter::new(limit, period).unwrap(), trace);
    same_as_core(SlidingLog::new(limit.min(1000), period).unwrap(), trace);
    if let Ok(bucket) = TokenBucket::new(limit, rate, period) {
        same_as_core(bucket, trace);
        same_as_core(Ban::new(bucket, 3, period, period).unwrap(), trace);
    }
    if let Ok(funnel) = LeakyBucket::new(limit, rate, period) {
        same_as_core(funnel, trace);
    }
    if let Ok(queue) = Pacing::new(limit, rate, period) {
        same_as_core(queue, trace);
    }
}

proptest! {
    #[test]
    fn decides_as_the_core(
        limit in limit(1_000_000_000),
        rate in limit(1_000_000_000),
        period in period(),
        raw in raw_arrivals(),
    ) {
        every_algorithm_as_the_core(limit, rate, period, &arrivals(&raw, period, limit));
    }

    /// The same in the last periods before `MAX_TICKS`, where the cells pack the
    /// largest instants into their words.
    #[test]
    fn decides_as_the_core_at_the_top(
        limit in limit(1_000_000_000),
        rate in limit(1_000_000_000),
        period in period(),
        raw in raw_arrivals(),
        end in top_end(),
    ) {
        let trace = at_the_top(&arrivals(&raw, period, limit), 1, period, end);
        every_algorithm_as_the_core(limit, rate, period, &trace);
    }
}

/// Eight threads hammer one limiter on a frozen clock: exactly `bound` are admitted.
fn exact_under_threads<A: InMemory + Send + Sync + 'static>(alg: A, bound: u64)
where
    A::Cell: Send + Sync,
{
    const THREADS: u64 = 8;
    let attempts = bound / 2 + 50;
    let limiter = Arc::new(DirectLimiter::with_clock(alg, ManualClock::new(SECOND)));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || (0..attempts).filter(|_| limiter.check(1).allowed).count())
        })
        .collect();
    let admitted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(
        THREADS * attempts > bound,
        "the test must offer more than the bound"
    );
    assert_eq!(u64::try_from(admitted).unwrap(), bound);
    assert!(!limiter.check(1).allowed);
}

#[test]
fn eight_threads_admit_exactly_the_bound() {
    exact_under_threads(TokenBucket::new(1000, 1, SECOND).unwrap(), 1000);
    exact_under_threads(LeakyBucket::new(777, 10, SECOND).unwrap(), 777);
    exact_under_threads(Pacing::new(500, 1, SECOND).unwrap(), 501);
    exact_under_threads(FixedWindow::new(1000, 60 * SECOND).unwrap(), 1000);
    exact_under_threads(SlidingCounter::new(999, 60 * SECOND).unwrap(), 999);
    exact_under_threads(SlidingLog::new(600, 60 * SECOND).unwrap(), 600);
}

#[test]
fn degrade_runs_the_fallback_when_denied() {
    let limiter =
        DirectLimiter::with_clock(FixedWindow::new(2, SECOND).unwrap(), ManualClock::new(0));
    let served: Vec<&str> = (0..4)
        .map(|_| limiter.check_or_else(1, || "fresh", |_| "cached"))
        .collect();
    assert_eq!(served, ["fresh", "fresh", "cached", "cached"]);
    assert_eq!(limiter.peek(1).retry_after, Some(SECOND));
    limiter.reset();
    assert!(limiter.check(1).allowed);
}

#[test]
fn monotonic_clock_is_unix_time_and_never_goes_back() {
    let wall = SystemClock.now();
    let mut last = MonotonicClock::new().now();
    assert!(last.abs_diff(wall) < SECOND, "{last} vs {wall}");
    for _ in 0..100_000 {
        let now = MonotonicClock::new().now();
        assert!(now >= last);
        last = now;
    }
}

/// Sixteen threads (more than the cores, so they migrate between them) read the clock
/// and publish every reading: a reading taken after another was published is never
/// below it, and each thread's readings never go back.
#[test]
fn monotonic_clock_never_goes_back_across_threads() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let published = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..16 {
            s.spawn(|| {
                let mut last = 0;
                for i in 0..200_000u32 {
                    let seen = published.load(Ordering::Acquire);
                    let now = MonotonicClock::new().now();
                    assert!(now >= seen, "{now} read after {seen} was published");
                    assert!(now >= last, "{now} after {last} on one thread");
                    published.fetch_max(now, Ordering::AcqRel);
                    last = now;
                    if i % 10_000 == 0 {
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
}

/// A bucket whose state outgrows the 64-bit word (`rate / gcd(rate, period)` large, the
/// clock where the packed arrival time passes 2^64) while eight threads decide on it:
/// it moves to the wide word without losing or doubling an admission.
#[test]
fn a_bucket_moving_to_the_wide_word_under_threads_stays_exact() {
    // A prime rate and the longest period: gcd 1, so the word holds the arrival time in
    // 1/rate tick; it passes 2^64 after about 5000 admissions from `start`, and the clock
    // moving 40 ticks refills a thousandth of a token.
    let (rate, period) = (999_999_937, limits::MAX_PERIOD);
    let start = (u64::MAX - 5_000 * period) / rate;
    exact_while_widening(TokenBucket::new(20_000, rate, period).unwrap(), start);
    exact_while_widening(LeakyBucket::new(20_000, rate, period).unwrap(), start);
}

fn exact_while_widening<A: InMemory + Sync>(alg: A, start: Ticks)
where
    A::Cell: Sync,
{
    let limiter = DirectLimiter::with_clock(alg, ManualClock::new(start));
    let admitted: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let limiter = &limiter;
                s.spawn(move || {
                    let mut admitted = 0;
                    for i in 0..4_000u64 {
                        if t == 0 && i % 100 == 0 {
                            limiter.clock().advance(1);
                        }
                        admitted += u64::from(limiter.check(1).allowed);
                    }
                    admitted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(admitted, 20_000);
    assert_eq!(limiter.clock().now(), start + 40);
}
