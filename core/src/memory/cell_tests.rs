//! The cells' and the word arithmetic's unit tests (kept apart from `cell.rs`, a
//! source file of its own size).

use super::*;
use crate::limits::MAX_PERIOD;
use crate::{ManualClock, Reserve, Ticks, MAX_TICKS};
use proptest::prelude::*;

proptest! {
    #[test]
    fn exact_quotient_is_division(d in prop_oneof![1..=1_000u64, 1..=u64::MAX], q: u64, r: u64, n: u128) {
        let divisor = ExactDivisor::new(d);
        let exact = u128::from(q) * u128::from(d);
        for n in [n, exact, exact + u128::from(r % d), 0] {
            let expected = (n % u128::from(d) == 0)
                .then(|| u64::try_from(n / u128::from(d)).ok())
                .flatten();
            prop_assert_eq!(divisor.exact_quotient(n), expected);
        }
        prop_assert_eq!(divisor.times(q), exact);
    }

    #[test]
    fn word_decides_as_the_exact_path(
        capacity in prop_oneof![1..=10u64, 1..=1_000_000_000u64],
        rate in prop_oneof![1..=10u64, 1..=1_000_000_000u64, Just(1_000_000_000)],
        period in prop_oneof![1..=10u64, 1..=1_000_000u64, Just(1_000_000), 1..=MAX_PERIOD],
        now in prop_oneof![0..=MAX_TICKS, Just(u64::MAX), any::<u64>(), (1u64 << 50)..=(1 << 51)],
        offset: i64,
        state in 0..4u8,
        cost in prop_oneof![0..=3u64, any::<u64>()],
        wait in prop_oneof![Just(None), any::<u64>().prop_map(Some), (0..=1_000_000u64).prop_map(Some)],
    ) {
        let g = gcd(rate, period);
        let now_units = |now: u64| u128::from(now.min(MAX_TICKS)) * u128::from(rate / g);
        // `u64::MAX` stands for the last instant whose `now × rate / g` fits the word,
        // moved by the offset: the fallback's boundary.
        let now = if now == u64::MAX {
            (u64::MAX / (rate / g)).saturating_add_signed(offset % 4_000_000)
        } else {
            now
        };
        let here = u64::try_from(now_units(now)).unwrap_or(u64::MAX);
        let word = match state {
            0 => 0,
            // About the arrival time a busy bucket holds: around now, a horizon away.
            1 => here.saturating_add_signed(offset % (1 << 40)),
            2 => here.saturating_add(offset.unsigned_abs()),
            _ => offset.unsigned_abs(),
        }
        .min(MOVING - 1);
        let wait = wait.map(|w| w.min(MAX_TICKS));
        if let Ok(token) = TokenBucket::new(capacity, rate, period) {
            same_on_the_word(&token, token.params(), false, g, word, now, cost, wait)?;
        }
        if let Ok(funnel) = LeakyBucket::new(capacity, rate, period) {
            same_on_the_word(&funnel, funnel.params(), false, g, word, now, cost, wait)?;
        }
        if let Ok(queue) = Pacing::new(capacity - 1, rate, period) {
            same_on_the_word(&queue, queue.params(), true, g, word, now, cost, wait)?;
        }
    }

    /// The 64-bit word against the 128-bit one, through the same transitions (checks
    /// and reservations of every bucket).
    #[test]
    fn narrow_cell_decides_as_the_wide_cell(
        capacity in prop_oneof![1..=10u64, 1..=1_000_000_000u64],
        rate in prop_oneof![1..=10u64, 1..=1_000_000_000u64],
        period in prop_oneof![1..=10u64, 1..=1_000_000u64],
        start in prop_oneof![0..=1u64 << 52, Just(u64::MAX), 0..=MAX_TICKS],
        steps in prop::collection::vec((0..4u8, any::<u64>(), any::<u64>(), any::<u64>()), 1..60),
    ) {
        let (Ok(token), Ok(funnel), Ok(queue)) = (
            TokenBucket::new(capacity, rate, period),
            LeakyBucket::new(capacity, rate, period),
            Pacing::new(capacity, rate, period),
        ) else {
            return Ok(());
        };
        // Start where the word just overflows for these parameters, unless told.
        let overflow = u64::try_from(
            (u128::from(u64::MAX) * u128::from(gcd(rate, period)) / u128::from(rate))
                .min(u128::from(MAX_TICKS)),
        ).unwrap_or(MAX_TICKS);
        let start = if start == u64::MAX { overflow.saturating_sub(3 * period) } else { start };
        same_cells(&token, start, period, capacity, &steps)?;
        same_cells(&funnel, start, period, capacity, &steps)?;
        same_cells(&queue, start, period, capacity, &steps)?;
    }
}

/// Readings that go backwards, as a lagging core's or an early one's: each bucket's
/// decision is taken at the latest instant its cell has decided at, the same
/// decision as the pure transition's at that instant.
#[test]
fn a_bucket_decides_no_earlier_than_it_has() {
    /// A clock whose unordered readings are 100, 40, 100, 130, 70.
    struct Lagging(std::cell::Cell<usize>);
    impl Clock for Lagging {
        fn now(&self) -> Ticks {
            unreachable!("the buckets read the clock unordered")
        }
        fn now_unordered(&self) -> Ticks {
            let i = self.0.replace(self.0.get() + 1);
            [100, 40, 100, 130, 70][i]
        }
    }
    let bucket = TokenBucket::new(2, 1, 10).unwrap();
    let cell = bucket.cell();
    let clock = Lagging(std::cell::Cell::new(0));
    let mut state = None;
    for now in [100, 100, 100, 130, 130] {
        let (expected, next) = bucket.decide(state, now, 1);
        assert_eq!(bucket.decide_in(&cell, &clock, 1), expected, "at {now}");
        state = next;
    }
}

/// Threads whose readings lag one another's by up to 50 ticks, updating one word:
/// the instants the cell decided at, in the order the word was replaced, never go
/// backwards.
#[test]
fn a_word_is_replaced_in_the_order_of_time() {
    use std::vec::Vec;
    const THREADS: u64 = 4;
    const DECISIONS: u64 = 20_000;
    let cell = NarrowCell::<BucketState>::default();
    let time = AtomicU64::new(1_000);
    let decided: Vec<Vec<(u64, Ticks)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|lag| {
                let (cell, time) = (&cell, &time);
                s.spawn(move || {
                    (0..DECISIONS)
                        .map(|_| {
                            let reading = time.fetch_add(1, Ordering::Relaxed) - lag * 50 / 3;
                            let mut replaced = None;
                            let decision = cell.update_word(
                                reading,
                                |word, now| Some(((word + 1, now), word + 1)),
                                |verdict| {
                                    replaced = Some(verdict);
                                    Decision::admit(1, 0, 0, 0)
                                },
                            );
                            assert!(decision.is_ok());
                            replaced.expect("every step replaces the word")
                        })
                        .collect()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut order: Vec<(u64, Ticks)> = decided.into_iter().flatten().collect();
    order.sort_unstable();
    assert_eq!(order.len() as u64, THREADS * DECISIONS);
    for pair in order.windows(2) {
        assert_eq!(pair[1].0, pair[0].0 + 1, "one replacement per word");
        assert!(pair[1].1 >= pair[0].1, "{pair:?}: time went backwards");
    }
}

/// The bucket's cell both ways (the transition on the unpacked state, and the
/// decision on the word) against the 128-bit cell: the same decisions and states,
/// and the word moves to the wide cell only once a state does not fit it.
fn same_cells<A: InMemory<Cell = BucketCell> + Reserve<State = BucketState>>(
    alg: &A,
    start: Ticks,
    period: Ticks,
    capacity: u64,
    steps: &[(u8, u64, u64, u64)],
) -> Result<(), TestCaseError> {
    let (packed, fast) = (alg.cell(), alg.cell());
    let wide = AtomicCell::<BucketState>::default();
    let mut now = start;
    let mut outgrown = false;
    for &(kind, gap, cost, wait) in steps {
        now = now.saturating_add(gap % (2 * period + 1)).min(MAX_TICKS);
        let cost = cost % (capacity + 2);
        let wait = match kind {
            1 => wait % (4 * period),
            2 => wait,
            _ => 0,
        };
        let mut step = |s| match kind {
            0 => alg.decide(s, now, cost),
            1 | 2 => alg.reserve(s, now, cost, wait),
            _ => alg.decide(s, now, 1),
        };
        let expected = wide.update(&mut step);
        prop_assert_eq!(packed.update(&mut step), expected);
        let clock = ManualClock::new(now);
        let decided = match kind {
            0 => alg.decide_in(&fast, &clock, cost),
            1 | 2 => alg.reserve_in(&fast, &clock, cost, wait),
            _ => alg.decide_in(&fast, &clock, 1),
        };
        prop_assert_eq!(decided, expected);
        let state = wide.load();
        outgrown |= packed.narrow.pack(state).is_none();
        for cell in [&packed, &fast] {
            prop_assert_eq!(cell.load(), state);
            prop_assert_eq!(cell.narrow.word.load(Ordering::Relaxed) == WIDE, outgrown);
        }
    }
    Ok(())
}

/// [`WordGcra`] decides exactly as the bucket on the unpacked state, and gives up
/// (`None`) only where an operand does not fit 64 bits.
#[allow(clippy::too_many_arguments)]
fn same_on_the_word<A: WordBucket + Reserve<State = BucketState>>(
    alg: &A,
    params: BucketParams,
    pacing: bool,
    g: u64,
    word: u64,
    now: Ticks,
    cost: u64,
    wait: Option<Ticks>,
) -> Result<(), TestCaseError> {
    let burst = params.capacity + u64::from(pacing);
    let Some(units) = WordGcra::new(alg, g) else {
        let tolerance = u128::from(burst) * u128::from(params.period / g);
        prop_assert!(tolerance > u128::from(u64::MAX));
        return Ok(());
    };
    let state = BucketState::from_word(u128::from(word) * u128::from(g));
    let (exact, next) = match wait {
        Some(wait) => alg.reserve(state, now, cost, wait),
        None => alg.decide(state, now, cost),
    };
    let fast = match wait {
        Some(wait) => units.decide(word, now, cost, wait),
        None => units.check(word, now, cost),
    };
    match fast {
        Some((verdict, next_word)) => {
            prop_assert_eq!(units.decision(verdict), exact);
            prop_assert_eq!(
                u128::from(next_word) * u128::from(g),
                next.map_or(0, |s| s.to_word())
            );
        }
        None => {
            // The operands of the exact path, in the word's units.
            let (rate, period) = (u128::from(params.rate / g), u128::from(params.period / g));
            // A time beyond the range goes to the exact path, which clamps it.
            let beyond = now > MAX_TICKS;
            let now = u128::from(now.min(MAX_TICKS)) * rate;
            let full_at = now + u128::from(burst) * period;
            let default_wait = if pacing { Ticks::MAX } else { 0 };
            let wait = u128::from(wait.unwrap_or(default_wait).min(crate::limits::MAX_WAIT)) * rate;
            let new_tat = u128::from(word).max(now) + u128::from(cost) * period;
            let widest = if cost > burst {
                full_at
            } else {
                full_at.max(new_tat).max(full_at + wait)
            };
            prop_assert!(
                widest > u128::from(u64::MAX) || beyond,
                "gave up with operands that fit, at a time in range"
            );
        }
    }
    Ok(())
}
