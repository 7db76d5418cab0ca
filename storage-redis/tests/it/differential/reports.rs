//! Reports and refunds with random overdrafts: their `Reported` values are the core's.

use super::*;

/// A window's parameters: limit, period, overdraft (at most `most`) and whether denied
/// requests count.
type WindowParams = (u64, Ticks, u64, bool);

/// Reports, refunds and checks on a window built by `new` from random parameters.
fn window_reports<A: LuaAlgorithm + Report + Clone>(
    limits: impl Strategy<Value = u64>,
    most: u64,
    new: fn(WindowParams) -> A,
) {
    let params = (limits, period(), any::<bool>()).prop_flat_map(move |(l, p, counting)| {
        let over = overdraft(l).prop_map(move |o| o.min(most));
        (Just(l), Just(p), over, Just(counting))
    });
    cases(
        with_reports(params, |&(l, p, _, _)| (p, l)),
        |server, (params, steps)| differential(server, new(params), &steps, reporting()),
    );
}

#[test]
fn report_fixed_window() {
    window_reports(limit(), MAX_LUA_LIMIT, |(limit, period, over, counting)| {
        let alg = FixedWindow::new(limit, period).unwrap();
        let alg = if counting { alg.counting_denied() } else { alg };
        alg.with_overdraft(over).unwrap()
    });
}

#[test]
fn report_sliding_counter() {
    window_reports(limit(), MAX_LUA_LIMIT, |(limit, period, over, _)| {
        let alg = SlidingCounter::new(limit, period).unwrap();
        alg.with_overdraft(over).unwrap()
    });
}

#[test]
fn report_sliding_log() {
    window_reports(
        prop_oneof![1..=4u64, 1..=100u64],
        100,
        |(limit, period, over, _)| {
            SlidingLog::new(limit, period)
                .unwrap()
                .with_overdraft(over)
                .unwrap()
        },
    );
}

/// A member of a reporting composite, or a reporting algorithm alone: a window or a
/// bucket with an overdraft (0 where the scripts' range takes no other), or a pacing
/// queue (which records nothing); `None` outside the scripts' range.
fn reporting_member(
    (kind, limit, rate, period, over): (u8, u64, u64, Ticks, u64),
) -> Option<AnyAlgorithm> {
    let built =
        |alg: Result<AnyAlgorithm, _>| alg.ok().filter(|a| RedisLimiter::new(a.clone()).is_ok());
    let with = |over: u64| -> Option<AnyAlgorithm> {
        built(match kind {
            0 => FixedWindow::new(limit, period)
                .and_then(|a| a.with_overdraft(over))
                .map(Into::into),
            1 => SlidingCounter::new(limit, period)
                .and_then(|a| a.with_overdraft(over))
                .map(Into::into),
            2 => TokenBucket::new(limit, rate, period)
                .and_then(|a| a.with_overdraft(over))
                .map(Into::into),
            3 => LeakyBucket::new(limit, rate, period)
                .and_then(|a| a.with_overdraft(over))
                .map(Into::into),
            _ => Pacing::new(limit, rate, period).map(Into::into),
        })
    };
    with(over).or_else(|| with(0))
}

/// Random reporting parameters of `kinds` (see [`reporting_member`]).
fn reporting_params(kinds: std::ops::Range<u8>) -> impl Strategy<Value = AnyAlgorithm> {
    (kinds, limit(), limit(), period())
        .prop_flat_map(|(k, l, r, p)| (Just(k), Just(l), Just(r), Just(p), overdraft(l)))
        .prop_filter_map("within the Lua range", reporting_member)
}

/// The period and limit a reporting algorithm's trace is drawn around.
fn reporting_shape(alg: &AnyAlgorithm) -> (Ticks, u64) {
    match alg {
        AnyAlgorithm::FixedWindow(a) => (a.params().period, a.params().limit),
        AnyAlgorithm::SlidingCounter(a) => (a.params().period, a.params().limit),
        AnyAlgorithm::TokenBucket(a) => (a.params().period, a.params().capacity),
        AnyAlgorithm::LeakyBucket(a) => (a.params().period, a.params().capacity),
        AnyAlgorithm::Pacing(a) => (a.params().period, a.params().capacity + 1),
        _ => (SECOND, 10),
    }
}

#[test]
fn report_buckets() {
    cases(
        with_reports(reporting_params(2..4), reporting_shape),
        |server, (alg, steps)| differential(server, alg, &steps, reporting()),
    );
}

#[test]
fn report_composite() {
    cases(
        with_reports(prop::collection::vec(reporting_params(0..5), 1..4), |m| {
            reporting_shape(&m[0])
        }),
        |server, (members, steps)| {
            let alg = Composite::new(members).unwrap();
            differential(server, alg, &steps, reporting())
        },
    );
}
