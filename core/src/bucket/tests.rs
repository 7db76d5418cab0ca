//! The bucket's decision paths against one another.

use super::{mul_by_halves, tag, wide, BucketParams, BucketState, Divisor, Gcra, Scaled};
use crate::limits::{MAX_HORIZON, MAX_LIMIT, MAX_PERIOD, MAX_WAIT};
use crate::MAX_TICKS;
use proptest::prelude::*;

proptest! {
    /// Wherever `decide` takes the 64-bit decision, it is the 128-bit one: every
    /// field and the next state, boundaries included.
    #[test]
    fn narrow_decisions_are_the_wide_ones(
        rate in 1..=MAX_LIMIT,
        period in 1..=MAX_PERIOD,
        pacing: bool,
        seeds: [u64; 4],
    ) {
        let (tag, min) = if pacing { (tag::PACING, 0) } else { (tag::TOKEN_BUCKET, 1) };
        // The largest capacity in range whose burst fits 64 bits.
        let horizon = u128::from(MAX_HORIZON) * u128::from(rate) / u128::from(period);
        let most = MAX_LIMIT.min(u64::try_from(horizon).unwrap_or(u64::MAX)).min(u64::MAX / period - 1);
        let capacity = min + seeds[0] % (most - min + 1);
        let gcra = Gcra::new(BucketParams { capacity, rate, period }, tag, min).unwrap();
        let below = gcra.narrow_below;
        prop_assert!(below > 0);
        for held in [0, u128::from(seeds[1]) % below, gcra.tolerance.min(below - 1), below - 1] {
            let room = below - held;
            for wait in [0, u128::from(seeds[2]) % room, room - 1] {
                let burst = gcra.burst;
                for cost in [0, 1, seeds[3] % (burst + 2), burst, burst + 1] {
                    let narrow = gcra.verdict(u64::narrow(held), cost, u64::narrow(wait));
                    prop_assert_eq!(narrow.widen(), gcra.verdict(held, cost, wait));
                }
            }
        }
    }

    /// Wherever `decide` takes the one-word step, it decides as the 128-bit path:
    /// every field and the next state, over random sequences from the epoch, from
    /// today's date and from where the instants outgrow 64 bits.
    #[test]
    fn word_decisions_are_the_wide_ones(
        capacity in 1u64..=1_000,
        rate in prop_oneof![1u64..=10, 1..=MAX_LIMIT],
        period in prop_oneof![1u64..=10_000_000, 1..=MAX_PERIOD],
        pacing: bool,
        start in prop_oneof![Just(0u64), 1_700_000_000_000_000u64..1_900_000_000_000_000, 0..=MAX_TICKS],
        steps in proptest::collection::vec((0u64..5_000_000, 0u64..1_200, prop_oneof![Just(0u64), 0u64..5_000_000, Just(u64::MAX)]), 1..40),
    ) {
        let (tag, min) = if pacing { (tag::PACING, 0) } else { (tag::TOKEN_BUCKET, 1) };
        let Ok(gcra) = Gcra::new(BucketParams { capacity, rate, period }, tag, min) else {
            return Ok(());
        };
        let (mut now, mut state) = (start, None);
        for (gap, cost, max_wait) in steps {
            now = now.saturating_add(gap);
            let word = gcra.decide_word(state, now, cost, max_wait);
            let scaled_wait = wide(max_wait.min(MAX_WAIT), rate);
            let wide = gcra.decide_wide(state, gcra.scaled(now), cost, scaled_wait);
            if let Some(word) = word {
                prop_assert_eq!(word, wide);
            }
            prop_assert_eq!(gcra.decide(state, now, cost, max_wait), wide);
            state = wide.1;
        }
    }

    /// Wherever `decide` takes the step in ticks, it decides as the 128-bit path:
    /// every field and the next state, over random sequences from the epoch, from
    /// today's date and near the latest instant, from states on and off the grid of
    /// whole ticks.
    #[test]
    fn exact_decisions_are_the_wide_ones(
        capacity in prop_oneof![1u64..=1_000, 1..=MAX_LIMIT],
        rate in prop_oneof![1u64..=10, 1u64..=1_000_000],
        interval in prop_oneof![1u64..=1_000_000, 1u64..=MAX_PERIOD],
        pacing: bool,
        start in prop_oneof![Just(0u64), 1_700_000_000_000_000u64..1_900_000_000_000_000, MAX_TICKS - 100_000_000..=MAX_TICKS, 0..=MAX_TICKS],
        steps in proptest::collection::vec((0u64..5_000_000, prop_oneof![0u64..1_200, Just(u64::MAX), any::<u64>()], prop_oneof![Just(0u64), 0u64..5_000_000, Just(u64::MAX)], prop_oneof![Just(None), Just(None), any::<u64>().prop_map(Some)]), 1..40),
    ) {
        let (tag, min) = if pacing { (tag::PACING, 0) } else { (tag::TOKEN_BUCKET, 1) };
        let Some(period) = rate.checked_mul(interval).filter(|&p| p <= MAX_PERIOD) else {
            return Ok(());
        };
        let Ok(gcra) = Gcra::new(BucketParams { capacity, rate, period }, tag, min) else {
            return Ok(());
        };
        prop_assert!(gcra.exact.is_some());
        let (mut now, mut state) = (start, None);
        for (gap, cost, max_wait, jolt) in steps {
            now = now.saturating_add(gap);
            // A state off the grid: any arrival time within reach of `now`.
            if let Some(jolt) = jolt {
                let at = gcra.scaled(now) + u128::from(jolt) % (gcra.tolerance + 2);
                state = BucketState::new(at.saturating_sub(u128::from(jolt % 3)));
            }
            let exact = gcra.decide_exact(gcra.exact.unwrap(), state, now, cost, max_wait);
            let scaled_wait = wide(max_wait.min(MAX_WAIT), rate);
            let wide = gcra.decide_wide(state, gcra.scaled(now), cost, scaled_wait);
            if let Some(exact) = exact {
                prop_assert_eq!(exact, wide);
            } else {
                prop_assert!(state.is_some_and(|s| s.tat.get() > u128::from(u64::MAX)));
            }
            prop_assert_eq!(gcra.decide(state, now, cost, max_wait), wide);
            state = wide.1;
        }
    }

    #[test]
    fn halves_multiply_exactly(a: u64, b: u64, small: u32) {
        for (a, b) in [(a, b), (a, u64::from(small)), (u64::MAX, b), (u64::MAX, u64::MAX), (0, b)] {
            prop_assert_eq!(mul_by_halves(a, b), u128::from(a) * u128::from(b));
        }
    }


    #[test]
    fn divisor_matches_hardware_division(d in 1..=u64::MAX, n: u128, small: u64) {
        for n in [n, u128::from(small), u128::from(u64::MAX), 0] {
            let (q, r) = Divisor::new(d).div_rem(n);
            prop_assert_eq!((q, u128::from(r)), (n / u128::from(d), n % u128::from(d)));
        }
    }
}
