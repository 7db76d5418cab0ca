//! Shared by the algorithm tests: random arrival sequences and the checks every
//! algorithm's decisions must pass whatever its definition; and by the lease tests, the
//! bounds a wake is held to.
#![allow(dead_code, unused_macros)]

use std::time::Duration;

use proptest::prelude::*;
use sluicegate_core::limits::MAX_PERIOD;
use sluicegate_core::rwlock::RwLease;
use sluicegate_core::{Algorithm, Decision, Ticks, MAX_TICKS};

/// How late a wake may be on a loaded machine (the many-thread tests run beside the
/// lease tests): still far from what it is told apart from, a timeout of 5 s or more, a
/// 60 s lease.
pub const LATE: Duration = Duration::from_secs(1);
/// Long enough that no lease expires during a test on the real clock.
pub const LONG: Ticks = 60 * sluicegate_core::SECOND;

/// Checks the latencies of 20 waiters woken by a release (`what` names them in the
/// report): the median under 100 ms, the slowest under [`LATE`].
pub fn assert_prompt_wakes(what: &str, mut latencies: Vec<Duration>) {
    latencies.sort();
    println!(
        "{what} wake latency over 20 releases: median {:?}, max {:?}",
        latencies[10], latencies[19]
    );
    // 100 ms for a loaded machine's wake-up; a waiter left to its timeout takes seconds.
    assert!(latencies[10] < Duration::from_millis(100), "{latencies:?}");
    assert!(latencies[19] < LATE, "{latencies:?}");
}

/// One random request: a gap before it and a cost, as raw numbers that [`arrivals`]
/// scales to the parameters under test.
pub type RawArrival = (u8, u64, u8, u64);

pub fn raw_arrivals() -> impl Strategy<Value = Vec<RawArrival>> {
    prop::collection::vec(any::<RawArrival>(), 1..120)
}

/// A limit across the whole range, with small values over-represented.
pub fn limit(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![1..=4u64, 1..=100u64, 1..=max]
}

/// A period across the whole range, with small values over-represented.
pub fn period() -> impl Strategy<Value = Ticks> {
    prop_oneof![1..=10u64, 1..=10_000u64, 1..=MAX_PERIOD]
}

/// Turns raw arrivals into `(now, cost)` pairs with non-decreasing `now`: gaps of zero,
/// a few ticks, a fraction of the period or several periods; costs of zero, one, a
/// fraction of `limit`, or just above it.
pub fn arrivals(raw: &[RawArrival], period: Ticks, limit: u64) -> Vec<(Ticks, u64)> {
    let mut now: Ticks = raw.first().map_or(0, |r| r.1 % (1 << 50));
    raw.iter()
        .map(|&(gap_kind, gap, cost_kind, cost)| {
            now += match gap_kind % 5 {
                0 => 0,
                1 => gap % 4,
                2 => gap % (period / 8 + 1),
                3 => gap % (period + 1),
                _ => gap % (3 * period + 1),
            };
            let cost = match cost_kind % 6 {
                0 => 0,
                1 | 2 => 1,
                3 => cost % (limit / 4 + 1),
                4 => cost % (limit + 1),
                _ => limit + 1 + cost % 2,
            };
            (now, cost)
        })
        .collect()
}

/// `arrivals` moved by a multiple of `align` (an algorithm's alignment: 1 for the
/// buckets and the log, the period for the windows), as late as they go with the last
/// one at most `end % (3 · period + 1)` ticks before `MAX_TICKS`: the last periods of
/// the time range.
pub fn at_the_top(
    arrivals: &[(Ticks, u64)],
    align: Ticks,
    period: Ticks,
    end: u64,
) -> Vec<(Ticks, u64)> {
    let last = arrivals.last().map_or(0, |a| a.0);
    let shift = (MAX_TICKS - end % (3 * period + 1) - last) / align * align;
    arrivals
        .iter()
        .map(|&(now, cost)| (now + shift, cost))
        .collect()
}

/// The `end` of [`at_the_top`]: the last arrival at `MAX_TICKS`, a tick before it, or
/// anywhere in the last few periods.
pub fn top_end() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), Just(1), any::<u64>()]
}

/// Checks what every decision promises, using the algorithm itself on the state it
/// returned (a denial may change it: a ban, or a window counting denied hits).
/// Promises about instants beyond `MAX_TICKS`, where every `now` is decided as at
/// `MAX_TICKS`, are not checked here (translation tests cover them):
/// - `retry_after` is exact: the same request is admitted then, and not one tick before;
///   `None` means it is not admitted even ten periods later.
/// - `reset_after` is exact: the state is fresh then, and not one tick before.
/// - `remaining` is exact: that much cost is admitted right after, and one unit more is not.
pub fn check_promises<A: Algorithm>(
    alg: &A,
    horizon: Ticks,
    now: Ticks,
    cost: u64,
    decision: &Decision,
    after: &Option<A::State>,
) {
    if decision.allowed {
        assert_eq!(decision.retry_after, Some(0));
    } else {
        assert_eq!(decision.delay, 0, "a denial has no delay: {decision:?}");
        match decision.retry_after {
            Some(wait) => {
                assert!(wait > 0, "denied with zero wait: {decision:?}");
                if now + wait <= MAX_TICKS {
                    assert!(
                        alg.peek(after.clone(), now + wait, cost).allowed,
                        "not admitted after retry_after: {decision:?}"
                    );
                    assert!(
                        !alg.peek(after.clone(), now + wait - 1, cost).allowed,
                        "admitted before retry_after: {decision:?}"
                    );
                }
            }
            None => {
                let later = (now + horizon).min(MAX_TICKS);
                assert!(!alg.peek(after.clone(), later, cost).allowed);
            }
        }
    }
    let reset = decision.reset_after;
    if now + reset <= MAX_TICKS {
        assert_eq!(
            alg.decide(after.clone(), now + reset, 0).1,
            None,
            "not fresh after reset_after: {decision:?}"
        );
        if reset > 0 {
            assert!(
                alg.decide(after.clone(), now + reset - 1, 0).1.is_some(),
                "fresh before reset_after: {decision:?}"
            );
        }
    }
    assert_eq!(after.is_none(), reset == 0);
    let remaining = decision.remaining;
    assert!(remaining <= decision.limit);
    if remaining > 0 {
        assert!(
            alg.peek(after.clone(), now, remaining).allowed,
            "remaining not admitted: {decision:?}"
        );
    }
    assert!(
        !alg.peek(after.clone(), now, remaining + 1).allowed,
        "more than remaining admitted: {decision:?}"
    );
    if let Some(state) = after {
        let bytes = alg.encode_to_vec(state);
        assert_eq!(
            alg.decode(&bytes).as_ref(),
            Ok(state),
            "encoding does not round-trip"
        );
    }
}

/// Runs `alg` over `arrivals`, checking [`check_promises`] at every step, and returns
/// the decisions.
pub fn run<A: Algorithm>(alg: &A, horizon: Ticks, arrivals: &[(Ticks, u64)]) -> Vec<Decision> {
    let mut state = None;
    arrivals
        .iter()
        .map(|&(now, cost)| {
            let (decision, next) = alg.decide(state.clone(), now, cost);
            check_promises(alg, horizon, now, cost, &decision, &next);
            state = next;
            decision
        })
        .collect()
}

/// Admitted `(now, cost)` pairs.
pub fn admitted(arrivals: &[(Ticks, u64)], decisions: &[Decision]) -> Vec<(Ticks, u64)> {
    arrivals
        .iter()
        .zip(decisions)
        .filter(|(_, d)| d.allowed)
        .map(|(&a, _)| a)
        .collect()
}

/// `alg`'s admissions over the arrivals drawn from `raw` (see [`arrivals`]).
pub fn admitted_by<A: Algorithm>(
    alg: &A,
    period: Ticks,
    limit: u64,
    raw: &[RawArrival],
) -> Vec<(Ticks, u64)> {
    let arrivals = arrivals(raw, period, limit);
    admitted(&arrivals, &run(alg, 10 * period, &arrivals))
}

/// The cost admitted at the instants `when` selects.
pub fn cost_where(admitted: &[(Ticks, u64)], when: impl Fn(Ticks) -> bool) -> u64 {
    admitted.iter().filter(|a| when(a.0)).map(|a| a.1).sum()
}

/// `alg`'s `(allowed, remaining)` over `arrivals`, to hold beside a reference model's.
pub fn decided<A: Algorithm>(
    alg: &A,
    period: Ticks,
    arrivals: &[(Ticks, u64)],
) -> Vec<(bool, u64)> {
    outcomes(&run(alg, 10 * period, arrivals))
}

/// Bucket parameters across the whole range; `None` where they exceed the horizon,
/// which the constructor must then refuse.
pub fn bucket_params() -> impl Strategy<Value = (u64, u64, Ticks)> {
    use sluicegate_core::limits::MAX_LIMIT;
    (limit(MAX_LIMIT), limit(MAX_LIMIT), period())
}

/// Whether `capacity × period / rate` is within the documented horizon.
pub fn within_horizon(capacity: u64, rate: u64, period: Ticks) -> bool {
    u128::from(capacity) * u128::from(period)
        <= u128::from(sluicegate_core::limits::MAX_HORIZON) * u128::from(rate)
}

/// A bucket's level by the definition, as an exact rational in units of
/// `1 / period`: `rate` units per `period` ticks flow in (tokens) or out (water).
#[derive(Debug, Clone, Copy)]
pub struct Level {
    pub scaled: u128,
    pub at: Ticks,
}

impl Level {
    /// Moves the level to `now`, adding `elapsed · rate` and clamping to `[0, cap]`.
    pub fn flow(&mut self, now: Ticks, rate: u64, cap: u128, filling: bool) {
        let flow = u128::from(now - self.at) * u128::from(rate);
        self.scaled = if filling {
            (self.scaled + flow).min(cap)
        } else {
            self.scaled.saturating_sub(flow)
        };
        self.at = now;
    }
}

/// A bucket by its definition, with exact rationals: its level is kept in units of
/// `1 / P`. A token bucket (`filling`) starts full of tokens `min(C, t + elapsed · R / P)`
/// and admits iff `t ≥ cost`, then subtracts it; a leaky bucket starts empty of water
/// `max(0, w − elapsed · R / P)` and admits iff `w + cost ≤ C`, then pours it in.
/// `remaining` is the tokens, or the room above the water.
pub fn bucket_reference(
    filling: bool,
    (capacity, rate, period): (u64, u64, Ticks),
    arrivals: &[(Ticks, u64)],
) -> Vec<(bool, u64)> {
    let p = u128::from(period);
    let cap = u128::from(capacity) * p;
    let mut level = Level {
        scaled: if filling { cap } else { 0 },
        at: arrivals[0].0,
    };
    arrivals
        .iter()
        .map(|&(now, cost)| {
            level.flow(now, rate, cap, filling);
            let cost = u128::from(cost) * p;
            let room = |level: &Level| {
                if filling {
                    level.scaled
                } else {
                    cap - level.scaled
                }
            };
            let allowed = cost <= room(&level);
            if allowed && filling {
                level.scaled -= cost;
            } else if allowed {
                level.scaled += cost;
            }
            (allowed, u64::try_from(room(&level) / p).unwrap())
        })
        .collect()
}

/// `(allowed, remaining)` of each decision: what the reference models predict.
pub fn outcomes(decisions: &[Decision]) -> Vec<(bool, u64)> {
    decisions.iter().map(|d| (d.allowed, d.remaining)).collect()
}

/// The window definitions by brute force: a request is admitted iff the cost admitted
/// at the instants `counts(now, t)` selects, plus its own, is at most `limit`.
pub fn window_reference(
    limit: u64,
    arrivals: &[(Ticks, u64)],
    counts: impl Fn(Ticks, Ticks) -> bool,
) -> Vec<(bool, u64)> {
    let mut admitted: Vec<(Ticks, u64)> = Vec::new();
    arrivals
        .iter()
        .map(|&(now, cost)| {
            let used = cost_where(&admitted, |t| counts(now, t));
            let allowed = used + cost <= limit;
            if allowed {
                admitted.push((now, cost));
            }
            (allowed, limit - used - if allowed { cost } else { 0 })
        })
        .collect()
}

/// The bucket invariant: in any interval `[a, b]` at most `capacity + (b − a) · rate / period`
/// is admitted.
pub fn assert_rate_bound(admitted: &[(Ticks, u64)], capacity: u64, rate: u64, period: Ticks) {
    for &(a, _) in admitted {
        for &(b, _) in admitted.iter().filter(|x| x.0 >= a) {
            let total = cost_where(admitted, |t| t >= a && t <= b);
            let bound =
                u128::from(capacity) * u128::from(period) + u128::from(b - a) * u128::from(rate);
            assert!(
                u128::from(total) * u128::from(period) <= bound,
                "{total} admitted in [{a}, {b}]"
            );
        }
    }
}

/// A bucket against [`bucket_reference`] (of tokens if `filling`, else of water): built
/// iff within the horizon, and then the same `(allowed, remaining)` for every arrival;
/// with `top`, over arrivals moved to the top of the time range by [`at_the_top`].
pub fn bucket_matches<A: Algorithm>(
    built: Result<A, sluicegate_core::ParamError>,
    (capacity, rate, period): (u64, u64, Ticks),
    raw: &[RawArrival],
    top: Option<u64>,
    filling: bool,
) {
    assert_eq!(built.is_ok(), within_horizon(capacity, rate, period));
    if let Ok(alg) = built {
        let mut arrivals = arrivals(raw, period, capacity);
        if let Some(end) = top {
            arrivals = at_the_top(&arrivals, 1, period, end);
        }
        assert_eq!(
            decided(&alg, period, &arrivals),
            bucket_reference(filling, (capacity, rate, period), &arrivals)
        );
    }
}

/// A bucket's rate bound ([`assert_rate_bound`]) over random arrivals.
pub fn bucket_bounded<A: Algorithm>(
    alg: &A,
    (capacity, rate, period): (u64, u64, Ticks),
    raw: &[RawArrival],
) {
    let admitted = admitted_by(alg, period, capacity, raw);
    assert_rate_bound(&admitted, capacity, rate, period);
}

/// The properties the token and the leaky bucket share: built iff within the horizon and
/// then decided as [`bucket_reference`] (of tokens if `$filling`; also in the last periods before `MAX_TICKS`, where
/// nothing saturates), and in any interval `[a, b]` at most `C + (b − a) · R / P`
/// admitted.
macro_rules! bucket_properties {
    ($bucket:ident, filling = $filling:expr) => {
        proptest! {
            #[test]
            fn matches_definition(params in bucket_params(), raw in raw_arrivals()) {
                bucket_matches($bucket::new(params.0, params.1, params.2), params, &raw, None, $filling);
            }

            #[test]
            fn matches_definition_at_the_top(params in bucket_params(), raw in raw_arrivals(), end in top_end()) {
                bucket_matches($bucket::new(params.0, params.1, params.2), params, &raw, Some(end), $filling);
            }

            #[test]
            fn never_more_than_capacity_plus_rate(capacity in 1..20u64, rate in 1..20u64, period in 1..1000u64, raw in raw_arrivals()) {
                bucket_bounded(&$bucket::new(capacity, rate, period).unwrap(), (capacity, rate, period), &raw);
            }
        }
    };
}
// Used by the bucket tests only, like the rest of this module.
#[allow(unused_imports)]
pub(crate) use bucket_properties;

/// A window against [`window_reference`] with `counts` (whether an admission at `t`
/// counts against a request at `now`) over the arrivals drawn from `raw`, and never more
/// than `limit` admitted in the window of any admission.
pub fn window_holds<A: Algorithm>(
    alg: &A,
    (limit, period): (u64, Ticks),
    raw: &[RawArrival],
    counts: impl Fn(Ticks, Ticks) -> bool,
) {
    let arrivals = arrivals(raw, period, limit);
    let decisions = run(alg, 10 * period, &arrivals);
    assert_eq!(
        outcomes(&decisions),
        window_reference(limit, &arrivals, &counts)
    );
    let admitted = admitted(&arrivals, &decisions);
    for &(end, _) in &admitted {
        let total = cost_where(&admitted, |t| t <= end && counts(end, t));
        assert!(total <= limit, "{total} admitted in the window of {end}");
    }
}

/// The properties the fixed window and the sliding log share ([`window_holds`], with
/// `$counts(period)` saying what counts), with limits up to `$max` and with small ones
/// where the bound bites.
macro_rules! window_properties {
    ($window:ident, $max:expr, $counts:expr) => {
        proptest! {
            #[test]
            fn matches_definition(limit in limit($max), period in period(), raw in raw_arrivals()) {
                window_holds(&$window::new(limit, period).unwrap(), (limit, period), &raw, $counts(period));
            }

            #[test]
            fn never_more_than_limit_in_its_window(limit in 1..50u64, period in 1..1000u64, raw in raw_arrivals()) {
                window_holds(&$window::new(limit, period).unwrap(), (limit, period), &raw, $counts(period));
            }
        }
    };
}
// Used by the window tests only, like the rest of this module.
#[allow(unused_imports)]
pub(crate) use window_properties;

/// Sends every key to one shard of a keyed limiter or lease table (spread over that
/// shard's table), so a test sees one shard's behaviour.
#[derive(Debug, Clone, Copy, Default)]
pub struct OneShard;

impl std::hash::BuildHasher for OneShard {
    type Hasher = OneShardHasher;
    fn build_hasher(&self) -> OneShardHasher {
        OneShardHasher(0xCBF2_9CE4_8422_2325)
    }
}

/// [`OneShard`]'s hasher: the key's bytes, mixed, with the bits that choose a shard
/// (the ones just below the top seven) cleared.
#[derive(Debug)]
pub struct OneShardHasher(u64);

impl std::hash::Hasher for OneShardHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) & !(0xFFF << 45)
    }
    fn write(&mut self, bytes: &[u8]) {
        // FNV-1a.
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3);
        }
    }
}

/// Times `refuse(i)` for `i` in `0..1000`, each refusing a new key to a full table of
/// `held` keys, and checks that a refusal costs less than ten insertions
/// (`per_insertion`): a refusal that swept the table would cost about `held` lookups.
/// Timed in ten batches of 100, the fastest counted: a loaded machine's pause lands in
/// some batch, a sweep in every one.
pub fn assert_refusals_do_not_sweep(held: u64, per_insertion: Duration, refuse: impl Fn(u64)) {
    let mut fastest = Duration::MAX;
    for batch in 0..10 {
        let started = std::time::Instant::now();
        for i in batch * 100..(batch + 1) * 100 {
            refuse(i);
        }
        fastest = fastest.min(started.elapsed());
    }
    let per_refusal = fastest / 100;
    println!("{held} keys: {per_insertion:?} per insertion, {per_refusal:?} per refusal");
    assert!(
        per_refusal < 10 * per_insertion,
        "{per_refusal:?} per refusal, {per_insertion:?} per insertion: refusals sweep {held} keys"
    );
}

/// A lock of the family: counted (1 to 3) or read-write, fair or not.
pub fn lock() -> impl Strategy<Value = RwLease> {
    (1u64..4, any::<bool>(), any::<bool>()).prop_map(|(max, read_write, fair)| {
        let lock = if read_write {
            RwLease::read_write()
        } else {
            RwLease::new(max).unwrap()
        };
        if fair {
            lock.fair()
        } else {
            lock
        }
    })
}
