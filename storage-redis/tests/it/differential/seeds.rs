//! A seeded state decides on Redis as in the core: a state reached under old parameters
//! and carried to new ones (`AnyAlgorithm::carry_from`) is seeded at an explicit time;
//! the keys then hold the core's bytes for it (as a decision of cost 0 leaves it), and
//! every later decision and stored state on each route is the core's.

use super::*;

/// Kinds of one key each, a composite and a ban.
const KINDS: u8 = 8;

/// The algorithm of `kind` on `(limit, rate, period)`, if the scripts compute it.
fn algorithm(kind: u8, (limit, rate, period): (u64, u64, Ticks)) -> Option<AnyAlgorithm> {
    let window = || FixedWindow::new(limit, period).ok();
    let bucket = || TokenBucket::new(limit, rate, period).ok();
    let built: AnyAlgorithm = match kind {
        0 => window()?.into(),
        1 => SlidingCounter::new(limit, period).ok()?.into(),
        2 => SlidingLog::new(1 + limit % MAX_LUA_LOG_LIMIT, period)
            .ok()?
            .into(),
        3 => bucket()?.into(),
        4 => LeakyBucket::new(limit, rate, period).ok()?.into(),
        5 => Pacing::new(limit - 1, rate, period).ok()?.into(),
        6 => Composite::new(vec![window()?.into(), bucket()?.into()])
            .ok()?
            .into(),
        _ => {
            let inner = AnyAlgorithm::from(window()?);
            Ban::new(inner, limit % 4, period, period).ok()?.into()
        }
    };
    RedisLimiter::new(built.clone()).is_ok().then_some(built)
}

/// The bytes `alg`'s keys hold for `state`.
fn stored(alg: &AnyAlgorithm, state: Option<&AnyState>) -> Vec<Option<Vec<u8>>> {
    match state {
        Some(s) => alg
            .lua_encode(s)
            .into_iter()
            .map(|bytes| (!bytes.is_empty()).then_some(bytes))
            .collect(),
        None => vec![None; alg.lua_keys()],
    }
}

/// Two sides of a change and the trace before and after it.
fn change() -> impl Strategy<Value = (u8, AnyAlgorithm, AnyAlgorithm, Trace, Trace)> {
    let side = || (limit(), limit(), period());
    (0..KINDS, side(), side(), any::<bool>())
        .prop_filter_map("in the Lua range", |(kind, old, mut new, same_period)| {
            if same_period {
                new.2 = old.2;
            }
            Some((kind, algorithm(kind, old)?, algorithm(kind, new)?, old, new))
        })
        .prop_flat_map(|(kind, from, to, old, new)| {
            (
                Just(kind),
                Just(from),
                Just(to),
                steps(old.2, old.0, false),
                steps(new.2, new.0, false),
            )
        })
}

#[test]
fn a_seeded_state_decides_as_in_the_core() {
    cases(change(), |server, (_, from, to, before, after)| {
        let mut state = None;
        let mut now = before.start;
        for step in &before.steps {
            now = (now + step.gap).min(MAX_TICKS);
            state = from.decide(state, now, step.cost).1;
        }
        let Some(carried) = state.and_then(|s| to.carry_from(&from, &s, now)) else {
            return Ok(());
        };
        for route in [Route::Module, Route::Functions, Route::Scripts] {
            let limiter = limiter(&to, route);
            let mut con = server.connection();
            let keys = limiter.redis_keys(b"k").expect("keys");
            let seeded = limiter.seed_state(&mut con, b"k", &carried, Some(now));
            if to.lua_now_range(now).is_err() {
                prop_assert!(
                    matches!(seeded, Err(Error::OutOfRange { .. })),
                    "{:?}",
                    seeded
                );
                return Ok(());
            }
            prop_assert!(seeded.map_err(|e| TestCaseError::fail(e.to_string()))?);
            // Stored as a decision of cost 0 leaves it.
            let mut state = to.decide(Some(carried.clone()), now, 0).1;
            let mut at = now;
            for step in &after.steps {
                let bytes: Vec<Option<Vec<u8>>> =
                    redis::cmd("MGET").arg(&keys).query(&mut con).expect("MGET");
                prop_assert_eq!(bytes, stored(&to, state.as_ref()), "at {}", at);
                at += step.gap;
                let request = Request::new(b"k").cost(step.cost).at(at);
                let got = limiter.check_request(&mut con, &request);
                if to.lua_now_range(at).is_err() {
                    prop_assert!(matches!(got, Err(Error::OutOfRange { .. })), "{:?}", got);
                    break;
                }
                let (want, next) = to.decide(state, at, step.cost);
                prop_assert_eq!(got.map_err(|e| TestCaseError::fail(e.to_string()))?, want);
                state = next;
            }
        }
        Ok(())
    });
}
