//! The fixed window, the sliding counter and the sliding log.

use super::*;

#[test]
fn fixed_window() {
    cases(
        with_steps((limit(), period(), any::<bool>()), |&(l, p, _)| (p, l)),
        |server, ((limit, period, counting), steps)| {
            let mut alg = FixedWindow::new(limit, period).unwrap();
            if counting {
                alg = alg.counting_denied();
            }
            differential(server, alg, &steps, checked())
        },
    );
}

/// Checks of a window built by `new` from a random limit and period, limits drawn by
/// `limits`.
fn window_checks<A: LuaAlgorithm + Clone, E: std::fmt::Debug>(
    limits: impl Strategy<Value = u64>,
    new: fn(u64, Ticks) -> Result<A, E>,
) {
    cases(
        with_steps((limits, period()), |&(l, p)| (p, l)),
        |server, ((limit, period), steps)| {
            differential(server, new(limit, period).unwrap(), &steps, checked())
        },
    );
}

#[test]
fn sliding_counter() {
    window_checks(limit(), SlidingCounter::new);
}

#[test]
fn sliding_log() {
    window_checks(prop_oneof![1..=4u64, 1..=100u64], SlidingLog::new);
}
