//! The token and leaky buckets and pacing: reservations, the fast path's bound, and
//! bookings beyond the scripts' range.

use super::*;

/// Reservations on a bucket built by `new` from random parameters drawn by `buckets`
/// (see [`bucket`]); `extra` more than its capacity admitted at once.
fn bucket_reserves<A: LuaAlgorithm + Reserve + Clone, E: std::fmt::Debug>(
    buckets: impl Strategy<Value = (u64, u64, Ticks)>,
    extra: u64,
    new: fn(u64, u64, Ticks) -> Result<A, E>,
) {
    cases(
        with_steps(buckets, move |&(c, _, p)| (p, c + extra)),
        |server, ((capacity, rate, period), steps)| {
            differential(
                server,
                new(capacity, rate, period).unwrap(),
                &steps,
                reserved(),
            )
        },
    );
}

#[test]
fn token_bucket() {
    bucket_reserves(bucket(), 0, TokenBucket::new);
}

#[test]
fn leaky_bucket() {
    bucket_reserves(bucket(), 0, LeakyBucket::new);
}

#[test]
fn pacing() {
    bucket_reserves(pacing_bucket(), 1, Pacing::new);
}

/// The buckets' fast path (`lua/bucket_fast.lua`) where its quantities straddle its
/// bound, 2^52 units of `1 / rate` tick: `burst × period`, and the stored arrival time
/// (relative to `now`) plus `cost × period`, each drawn within a few units of it. Below
/// the bound the library's `bucket` function answers with one integer, beyond it with
/// the general path's fields; on every route the decision and the stored bytes are the
/// core's.
/// The fast path's bound (`lua/bucket_fast.lua`).
const BOUND: u64 = 1 << 52;

#[test]
fn bucket_fast_path_bound() {
    // (kind, capacity, rate, period): burst × period within 3 × burst of the bound.
    let params = (0..3u8, 1..=MAX_LUA_LIMIT, 1..=MAX_LUA_LIMIT, -3i64..=3).prop_filter_map(
        "within the Lua range",
        |(kind, capacity, rate, delta)| {
            let burst = capacity + u64::from(kind == 2);
            let period = (BOUND / burst).checked_add_signed(delta)?;
            let ok = match kind {
                0 => in_lua_range(TokenBucket::new(capacity, rate, period)),
                1 => in_lua_range(LeakyBucket::new(capacity, rate, period)),
                _ => in_lua_range(Pacing::new(capacity, rate, period)),
            };
            ok.then_some((kind, capacity, rate, period, burst))
        },
    );
    let case = params.prop_flat_map(|(kind, capacity, rate, period, burst)| {
        let cost = prop_oneof![Just(0), Just(1), 0..=burst, Just(burst), Just(burst + 1)];
        let wait = prop_oneof![
            Just(None),
            Just(Some(0)),
            (0..=BOUND).prop_map(Some),
            Just(Some(u64::MAX))
        ];
        let near = -3i64..=3;
        (
            Just((kind, capacity, rate, period)),
            cost,
            wait,
            near,
            0..4u8,
            0..BOUND,
        )
    });
    cases(
        case,
        |server, ((kind, capacity, rate, period), cost, wait, delta, shape, anywhere)| {
            // The state's arrival time relative to now: none, anywhere below the bound,
            // or within 3 units of where it and the cost reach the bound.
            let scaled_cost = cost.saturating_mul(period);
            let relative = match shape {
                0 => 0,
                1 => anywhere,
                _ => BOUND
                    .saturating_sub(scaled_cost)
                    .saturating_add_signed(delta),
            };
            let case = FastCase {
                rate,
                period,
                relative,
                cost,
                wait,
            };
            match kind {
                0 => case.run(server, TokenBucket::new(capacity, rate, period).unwrap(), 4),
                1 => case.run(server, LeakyBucket::new(capacity, rate, period).unwrap(), 5),
                _ => case.run(server, Pacing::new(capacity, rate, period).unwrap(), 6),
            }
        },
    );
}

/// One decision of [`bucket_fast_path_bound`]: a state `relative` units of `1 / rate`
/// tick after `EPOCH`, decided at `EPOCH`.
struct FastCase {
    rate: u64,
    period: Ticks,
    relative: u64,
    cost: u64,
    wait: Option<Ticks>,
}

impl FastCase {
    fn run<A: LuaAlgorithm + Reserve + Clone>(
        &self,
        server: &Server,
        alg: A,
        tag: u8,
    ) -> Result<(), TestCaseError> {
        let mut con = server.connection();
        let bytes = (self.relative > 0).then(|| {
            let ticks = EPOCH + self.relative / self.rate;
            let frac = self.relative % self.rate;
            [&[1, tag][..], &ticks.to_be_bytes(), &frac.to_be_bytes()].concat()
        });
        let state = match &bytes {
            Some(bytes) => match alg.decode(bytes) {
                Ok(state) => Some(state),
                Err(_) => return Err(TestCaseError::reject("beyond the core's states")),
            },
            None => None,
        };
        let (want, new) = match self.wait {
            Some(wait) => alg.reserve(state, EPOCH, self.cost, wait),
            None => alg.decide(state, EPOCH, self.cost),
        };
        let want_bytes = new.map(|s| alg.encode_to_vec(&s));
        let set = |con: &mut redis::Connection, key: &[u8]| {
            if let Some(bytes) = &bytes {
                redis::cmd("SET")
                    .arg(key)
                    .arg(bytes)
                    .exec(con)
                    .expect("SET");
            }
        };
        for route in [Route::Module, Route::Functions, Route::Scripts] {
            let limiter = limiter(&alg, route);
            let key = limiter.redis_keys(b"k").expect("keys").remove(0);
            set(&mut con, &key);
            let got = match self.wait {
                Some(wait) => limiter.reserve(
                    &mut con,
                    &Request::new(b"k").cost(self.cost).at(EPOCH),
                    wait,
                ),
                None => {
                    limiter.check_request(&mut con, &Request::new(b"k").cost(self.cost).at(EPOCH))
                }
            };
            let got = got.map_err(|e| TestCaseError::fail(format!("{route:?}: {e}")))?;
            prop_assert_eq!(got, want, "{:?}", route);
            let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
            prop_assert_eq!(&stored, &want_bytes, "{:?}", route);
        }
        // The library's fast function itself (loaded by the calls above): one integer
        // exactly when every quantity is below the bound.
        let sent = self.cost.min(alg.lua_cost_cap());
        let ask = FastAsk {
            cost: sent,
            now: Some(EPOCH),
            max_wait: self.wait,
        };
        let Some(arg) = alg.lua_fast_arg(ask) else {
            return Ok(());
        };
        let key = format!("{}raw", prefix()).into_bytes();
        set(&mut con, &key);
        let reply: redis::Value = redis::cmd("FCALL")
            .arg(format!("{}_bucket", sluicegate_redis::library_name()))
            .arg(1)
            .arg(&key)
            .arg(arg)
            .query(&mut con)
            .unwrap();
        let below = u128::from(self.relative) + u128::from(sent) * u128::from(self.period)
            < u128::from(BOUND);
        match reply {
            redis::Value::Int(relative) => {
                prop_assert!(below, "the fast path answered beyond its bound");
                let got = alg.lua_fast_decision(relative as u64, ask);
                prop_assert_eq!(got, Some(want));
            }
            redis::Value::Array(_) => prop_assert!(!below, "the fast path left below its bound"),
            other => prop_assert!(false, "reply {:?}", other),
        }
        let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        prop_assert_eq!(stored, want_bytes);
        Ok(())
    }
}

/// Reservations booked deeper than the scripts compute exactly (an arrival time more
/// than 2^53 ticks after now, where sums stop being doubles): each is the core's until
/// one would book that deep, then the scripts refuse it, naming their range and
/// changing nothing, in 2026 as beyond 2^52.
#[test]
fn a_reservation_beyond_the_scripts_range_is_refused() {
    let server = Server::start_with_module(false);
    let mut con = server.connection();
    // A horizon just under 2^51 ticks: a few full bursts reach past 2^53.
    let bucket = TokenBucket::new(71, 1, MAX_PERIOD).unwrap();
    for start in [EPOCH, MAX_LUA_TICKS + 1, MAX_TICKS - 16] {
        for route in [Route::Functions, Route::Scripts] {
            let limiter = limiter(&bucket, route);
            let key = limiter.redis_keys(b"k").unwrap().remove(0);
            let (mut state, mut refused) = (None, false);
            for now in start..start + 6 {
                let request = Request::new(b"k").cost(71).at(now);
                match limiter.reserve(&mut con, &request, u64::MAX) {
                    Ok(got) if !refused => {
                        let (want, new) = bucket.reserve(state.take(), now, 71, u64::MAX);
                        state = new;
                        assert_eq!(got, want, "{route:?} at {now}");
                    }
                    Err(Error::Corrupt { reason, .. }) => {
                        assert!(
                            reason.contains("beyond the Redis scripts' range"),
                            "{reason}"
                        );
                        refused = true;
                    }
                    other => panic!("{route:?} at {now}: {other:?}"),
                }
                let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
                assert_eq!(stored, state.as_ref().map(|s| bucket.encode_to_vec(s)));
            }
            assert!(refused, "{route:?} from {start}");
        }
    }
}
