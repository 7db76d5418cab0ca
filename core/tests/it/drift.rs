//! No drift: under saturating demand for 10^6 periods, each algorithm admits exactly
//! the closed-form count, however the rate divides the period.

use sluicegate_core::{Algorithm, FixedWindow, LeakyBucket, Pacing, Ticks, TokenBucket};

const PERIODS: u64 = 1_000_000;

/// Offers one unit every `step` ticks from 0 to `end` inclusive and counts admissions
/// (for pacing, those whose slot falls by `end`).
fn admitted<A: Algorithm>(alg: &A, step: Ticks, end: Ticks) -> u64 {
    let (mut state, mut count, mut now) = (None, 0, 0);
    while now <= end {
        let (d, next) = alg.decide(state, now, 1);
        if d.allowed && now + d.delay <= end {
            count += 1;
        }
        state = next;
        now += step;
    }
    count
}

#[test]
fn buckets_admit_capacity_plus_exact_refill() {
    // 3 per 1000 ticks: an interval of 333.33 ticks that never rounds away.
    let (capacity, rate, period) = (5, 3, 1000);
    let end = PERIODS * period;
    let expected = capacity + PERIODS * rate;
    assert_eq!(
        admitted(&TokenBucket::new(capacity, rate, period).unwrap(), 100, end),
        expected
    );
    assert_eq!(
        admitted(&LeakyBucket::new(capacity, rate, period).unwrap(), 100, end),
        expected
    );
}

#[test]
fn pacing_acts_on_an_exact_grid() {
    // Slots at ceil(k · 7000 / 3): the last one by `end` is k = 3 · 10^6.
    let (rate, period) = (3, 7000);
    let end = PERIODS * period;
    assert_eq!(
        admitted(&Pacing::new(2, rate, period).unwrap(), 500, end),
        PERIODS * rate + 1
    );
}

#[test]
fn windows_admit_their_limit_every_period() {
    let (limit, period) = (7, 1000);
    let end = PERIODS * period - 1;
    assert_eq!(
        admitted(&FixedWindow::new(limit, period).unwrap(), 100, end),
        PERIODS * limit
    );
}
