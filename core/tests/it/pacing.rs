use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::{Algorithm, Pacing, Reserve, Ticks, SECOND};

/// The definition with exact rationals (instants in units of `1 / R` tick): requests are
/// served in order, each starting at `max(now, previous start + previous cost · P / R)`;
/// one is admitted iff the units waiting ahead of it, `(start − now) · R / P`, are at
/// most `C + 1 − cost` (so with unit costs, at most `C` wait); its delay is
/// `start − now`, rounded up to a tick.
fn reference(
    capacity: u64,
    rate: u64,
    period: Ticks,
    arrivals: &[(Ticks, u64)],
) -> Vec<(bool, u64, Ticks)> {
    let (r, p) = (u128::from(rate), u128::from(period));
    let mut next_free = 0u128;
    arrivals
        .iter()
        .map(|&(now, cost)| {
            let now_scaled = u128::from(now) * r;
            let start = next_free.max(now_scaled);
            let ahead = start - now_scaled;
            let allowed = cost <= capacity + 1
                && ahead + u128::from(cost) * p <= u128::from(capacity + 1) * p;
            let delay = if allowed {
                u64::try_from((start - now_scaled).div_ceil(r)).unwrap()
            } else {
                0
            };
            if allowed {
                next_free = start + u128::from(cost) * p;
            }
            let busy = next_free.max(now_scaled) - now_scaled;
            let remaining =
                u64::try_from((u128::from(capacity + 1) * p).saturating_sub(busy) / p).unwrap();
            (allowed, remaining, delay)
        })
        .collect()
}

/// The queue against [`reference`], over the arrivals as drawn or, with `top`, moved
/// to the last periods before `MAX_TICKS`.
fn matches_reference(
    (capacity, rate, period): (u64, u64, Ticks),
    raw: &[RawArrival],
    top: Option<u64>,
) {
    let Ok(alg) = Pacing::new(capacity, rate, period) else {
        assert!(!within_horizon(capacity + 1, rate, period));
        return;
    };
    let mut arrivals = arrivals(raw, period, capacity);
    if let Some(end) = top {
        arrivals = at_the_top(&arrivals, 1, period, end);
    }
    let decisions = run(&alg, 10 * period, &arrivals);
    let got: Vec<_> = decisions
        .iter()
        .map(|d| (d.allowed, d.remaining, d.delay))
        .collect();
    assert_eq!(got, reference(capacity, rate, period, &arrivals));
}

proptest! {
    #[test]
    fn matches_definition(params in bucket_params(), raw in raw_arrivals()) {
        matches_reference(params, &raw, None);
    }

    /// The same in the last periods before `MAX_TICKS`: nothing saturates there.
    #[test]
    fn matches_definition_at_the_top(params in bucket_params(), raw in raw_arrivals(), end in top_end()) {
        matches_reference(params, &raw, Some(end));
    }

    /// Admitted unit requests act exactly `P / R` apart while the queue is busy: the
    /// k-th act of a saturated queue is at `ceil(k · P / R)`.
    #[test]
    fn spaced_exactly(capacity in 0..20u64, rate in 1..50u64, period in 1..100_000u64, per_slot in 1..4u64) {
        let alg = Pacing::new(capacity, rate, period).unwrap();
        let (mut state, mut acts, mut now) = (None, Vec::new(), 0);
        let step = period / rate / 2 + 1;
        while acts.len() < 200 {
            for _ in 0..per_slot {
                let (d, s) = alg.decide(state, now, 1);
                if d.allowed {
                    acts.push(now + d.delay);
                    state = s;
                }
            }
            now += step;
        }
        // No act is ever earlier than its slot on the grid.
        for (k, &act) in acts.iter().enumerate() {
            prop_assert!(act >= (k as u64 * period).div_ceil(rate));
        }
        // Saturated (arrivals outpace the slots, as when several arrive per slot; not so
        // when slots are shorter than the one-tick step), with a queue that spans the
        // step between arrivals (else a slot passes while the next is refused as too far
        // off): every act is on the grid.
        let saturated = per_slot >= 2 && per_slot * period > rate * step;
        if saturated && capacity * period >= rate * step {
            for (k, &act) in acts.iter().enumerate() {
                prop_assert_eq!(act, (k as u64 * period).div_ceil(rate));
            }
        }
    }
}

#[test]
fn queue_of_three_spaced_a_quarter_second_apart() {
    let queue = Pacing::new(3, 4, SECOND).unwrap();
    let mut state = None;
    let mut delays = Vec::new();
    for _ in 0..5 {
        let (d, s) = queue.decide(state, 0, 1);
        delays.push(d.allowed.then_some(d.delay));
        state = s;
    }
    let q = SECOND / 4;
    assert_eq!(delays, [Some(0), Some(q), Some(2 * q), Some(3 * q), None]);
    // The fifth fits once the first has left the queue.
    assert_eq!(queue.peek(state, 0, 1).retry_after, Some(q));
    // A reservation can refuse to wait as long as the queue would make it.
    assert!(!queue.reserve(state, q, 1, q - 1).0.allowed);
    assert_eq!(queue.reserve(state, q, 1, 3 * q).0.delay, 3 * q);
}
