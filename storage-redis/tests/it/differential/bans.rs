//! Bans over windows and buckets, with thresholds beyond the doubles' range.

use super::*;

/// A ban threshold: small, or near 2^52 (the scripts' double route ends there), 2^53
/// (where doubles stop being exact), 2^63 or the core's largest, `u64::MAX - 1`.
fn threshold() -> impl Strategy<Value = u64> {
    let near = |x: u64| x - 4..=x + 4;
    prop_oneof![
        4 => 0..=8u64,
        1 => near(1 << 52),
        1 => near(1 << 53),
        1 => near(1 << 63),
        1 => u64::MAX - 8..=u64::MAX - 1
    ]
}

/// A denied cost near a bound of a ban's count for `threshold`: the threshold itself, its
/// half (two of them reach it), 2^53 (beyond it a cost is not exact as a double) and the
/// threshold less 2^53 (after which the room left is 2^53).
fn ban_cost(threshold: u64) -> impl Strategy<Value = u64> {
    let near = |x: u64| x.saturating_sub(2)..=x.saturating_add(2);
    prop_oneof![
        near(threshold),
        near(threshold / 2),
        near(1 << 53),
        near(threshold.saturating_sub(1 << 53))
    ]
}

/// Checks of a [`Ban`] over an algorithm drawn by `inner` with its period and limit, its
/// threshold, window and duration random; `shape` gives the period and limit the trace
/// is drawn around from the inner period, limit and the ban's window.
fn ban_checks<A: LuaAlgorithm + Clone + std::fmt::Debug>(
    inner: impl Strategy<Value = (A, Ticks, u64)>,
    shape: fn(Ticks, u64, Ticks) -> (Ticks, u64),
) {
    // A third of the steps' costs are drawn near the bounds of the ban's count instead.
    let params = with_steps(
        (inner, threshold(), period(), period()),
        move |&((_, p, l), _, w, _)| shape(p, l, w),
    )
    .prop_flat_map(|(params, trace)| {
        let costs = prop::collection::vec(
            prop::option::weighted(1.0 / 3.0, ban_cost(params.1)),
            trace.steps.len(),
        );
        (Just(params), Just(trace), costs)
    })
    .prop_map(|(params, mut trace, costs)| {
        for (step, cost) in trace.steps.iter_mut().zip(costs) {
            step.cost = cost.unwrap_or(step.cost);
        }
        (params, trace)
    });
    cases(
        params,
        |server, (((alg, _, _), threshold, window, duration), steps)| {
            let alg = Ban::new(alg, threshold, window, duration).unwrap();
            differential(server, alg, &steps, checked())
        },
    );
}

#[test]
fn ban() {
    let windows = (1..=20u64, period())
        .prop_map(|(limit, period)| (FixedWindow::new(limit, period).unwrap(), period, limit));
    ban_checks(windows, |p, l, w| (p.min(w), l));
}

#[test]
fn ban_bucket() {
    let buckets = bucket().prop_map(|(capacity, rate, period)| {
        let bucket = TokenBucket::new(capacity, rate, period).unwrap();
        (bucket, period, capacity)
    });
    ban_checks(buckets, |p, c, _| (p, c));
}

/// Bans beyond the doubles' range, up to the core's largest threshold (refused before):
/// once the inner window's one unit is taken, denied costs leave the threshold 2^53 + 1
/// away, then 1, then 0, then cross it; costs of 2^53 or more add exactly; `u64::MAX`
/// bans at once. In 2026 and near the core's last instant (the ban's fields then
/// relative to an epoch).
#[test]
fn ban_thresholds_beyond_doubles() {
    let server = Server::start_with_module(false);
    let step = |key, cost| Step {
        key,
        gap: 0,
        cost,
        max_wait: None,
        adjust: None,
    };
    for threshold in [(1 << 52) + 1, (1 << 53) + 1, (1 << 63) + 5, u64::MAX - 1] {
        let far = threshold.saturating_sub((1 << 53) + 1);
        let half = threshold / 2;
        let steps = vec![
            step(0, 1),
            step(0, far),
            step(0, 1 << 53),
            step(0, 0),
            step(0, 1),
            step(0, 1),
            step(0, 1),
            step(1, u64::MAX),
            step(2, 1),
            step(2, half),
            step(2, threshold - half - 1),
            step(2, 2),
        ];
        for start in [EPOCH, MAX_TICKS - SECOND] {
            let inner = FixedWindow::new(1, SECOND).unwrap();
            let alg = Ban::new(inner, threshold, 3600 * SECOND, SECOND).unwrap();
            let trace = Trace {
                start,
                steps: steps.clone(),
            };
            differential(&server, alg, &trace, checked()).unwrap();
        }
    }
}
