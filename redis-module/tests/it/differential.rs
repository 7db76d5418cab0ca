//! The module against the core, and against the scripts, on a real `redis-server
//! --loadmodule`: random parameters over the core's whole range and random traces at
//! explicit times, each step decided by `SLUICEGATE.CHECK` or (where the parameters are
//! inside the scripts' range) by `sluicegate_redis::RedisLimiter`'s script, on the same
//! keys. After every step the decision equals the core's and every key holds exactly
//! the core's encoding (gone when the core's state is fresh), with no expiry: a state
//! written by either path is read and continued by the other.

use proptest::prelude::*;
use redis::Connection;
use sluicegate_core::limits::{MAX_LIMIT, MAX_PERIOD};
use sluicegate_core::{
    Ban, Composite, Concurrency, Decision, FixedWindow, LeakyBucket, LeaseError, Pacing, Request,
    Reserve, SlidingCounter, SlidingLog, Ticks, TokenBucket, MAX_TICKS, SECOND,
};
use sluicegate_redis::{LuaAlgorithm, RedisLimiter, MAX_LUA_TICKS};

use crate::common::{self, Server};

/// Around 2026 in µs since the Unix epoch.
const EPOCH: Ticks = 1_790_000_000_000_000;

fn cases<S: Strategy>(strategy: S, test: impl Fn(&Server, S::Value) -> Result<(), TestCaseError>) {
    common::cases(&common::server(&[]), 48, strategy, test);
}

/// A fresh key per case.
fn fresh_key() -> String {
    common::fresh("case")
}

/// An algorithm as the module's arguments name it.
trait Words: LuaAlgorithm + Clone {
    /// The algorithm words, one algorithm per key.
    fn words(&self) -> Vec<String>;
}

/// The bytes each of `alg`'s keys should hold for a core state.
fn values<A: LuaAlgorithm>(alg: &A, state: Option<&A::State>) -> Vec<Option<Vec<u8>>> {
    common::stored::key_values(state.map(|s| alg.lua_encode(s)), alg.lua_keys())
}

fn strings(items: &[&dyn ToString]) -> Vec<String> {
    items.iter().map(|i| i.to_string()).collect()
}

impl Words for FixedWindow {
    fn words(&self) -> Vec<String> {
        let p = self.params();
        let mut w = strings(&[&"fixed_window", &p.limit, &p.period]);
        if self.counts_denied() {
            w.push("counting_denied".into());
        }
        w
    }
}

macro_rules! words {
    ($type:ty, $name:literal, window) => {
        impl Words for $type {
            fn words(&self) -> Vec<String> {
                let p = self.params();
                strings(&[&$name, &p.limit, &p.period])
            }
        }
    };
    ($type:ty, $name:literal, bucket) => {
        impl Words for $type {
            fn words(&self) -> Vec<String> {
                let p = self.params();
                strings(&[&$name, &p.capacity, &p.rate, &p.period])
            }
        }
    };
}

words!(SlidingLog, "sliding_log", window);
words!(SlidingCounter, "sliding_counter", window);
words!(TokenBucket, "token_bucket", bucket);
words!(LeakyBucket, "leaky_bucket", bucket);
words!(Pacing, "pacing", bucket);

impl<A: Words> Words for Ban<A> {
    fn words(&self) -> Vec<String> {
        let mut w = strings(&[&"ban", &self.threshold(), &self.window(), &self.duration()]);
        w.extend(self.inner().words());
        w
    }
}

impl<A: Words> Words for Composite<A> {
    fn words(&self) -> Vec<String> {
        self.members().iter().flat_map(Words::words).collect()
    }
}

/// The scripts' reply fields for a decision at `now`.
fn fields(d: &Decision, now: Ticks) -> Vec<i64> {
    let retry = match d.retry_after {
        Some(t) if !d.allowed => t as i64,
        Some(_) => 0,
        None => -1,
    };
    vec![
        d.allowed.into(),
        d.limit as i64,
        d.remaining as i64,
        retry,
        d.reset_after as i64,
        d.delay as i64,
        now as i64,
    ]
}

/// The keys of `key` for `members` members, in the scripts' layout.
fn keys_of(key: &str, members: usize) -> Vec<String> {
    if members == 1 {
        vec![key.to_owned()]
    } else {
        (0..members).map(|i| format!("{{{key}}}:{i}")).collect()
    }
}

/// `SLUICEGATE.CHECK` at an explicit time.
fn module_check(
    con: &mut Connection,
    keys: &[String],
    words: &[String],
    cost: u64,
    now: Ticks,
    max_wait: Option<Ticks>,
) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd("SLUICEGATE.CHECK");
    cmd.arg(keys.len()).arg(keys).arg(words);
    cmd.arg("COST").arg(cost).arg("NOW").arg(now);
    if let Some(w) = max_wait {
        cmd.arg("MAXWAIT").arg(w);
    }
    cmd.query(con)
}

#[derive(Debug, Clone)]
struct Step {
    gap: Ticks,
    cost: u64,
    /// Decided by the script (when the parameters and time are in its range).
    script: bool,
    max_wait: Option<Ticks>,
}

#[derive(Debug, Clone)]
struct Trace {
    start: Ticks,
    steps: Vec<Step>,
}

fn trace(period: Ticks, limit: u64) -> impl Strategy<Value = Trace> {
    // In 2026, at the end of the scripts' range, or at the end of the core's.
    let start = prop_oneof![
        3 => Just(EPOCH),
        1 => (0..=4 * period).prop_map(|back| MAX_LUA_TICKS - back.min(MAX_LUA_TICKS / 8)),
        1 => (0..=4 * period).prop_map(|back| MAX_TICKS - back.min(MAX_TICKS / 8)),
    ];
    let gap = prop_oneof![Just(0), 0..4u64, 0..=period / 8, 0..=period, 0..=3 * period];
    let cost = prop_oneof![
        Just(0),
        Just(1),
        0..=limit / 4 + 1,
        0..=limit + 2,
        Just(u64::MAX),
        any::<u64>()
    ];
    let wait = prop_oneof![
        3 => Just(None),
        1 => Just(Some(0)),
        1 => (0..=2 * period).prop_map(Some),
        1 => Just(Some(u64::MAX)),
    ];
    let step = (gap, cost, any::<bool>(), wait).prop_map(|(gap, cost, script, max_wait)| Step {
        gap,
        cost,
        script,
        max_wait,
    });
    (start, prop::collection::vec(step, 1..40)).prop_map(|(start, steps)| Trace { start, steps })
}

/// Whether no bucket in a key's bytes (alone or in a ban) has its arrival time's whole
/// ticks more than 2^53 after `now`, as the scripts read a state.
fn within_scripts(values: &[Option<Vec<u8>>], now: Ticks) -> bool {
    values.iter().flatten().all(|bytes| {
        let at = if bytes[1] == 7 { 26 } else { 0 };
        let tat = |i: usize| u64::from_be_bytes(bytes[at + i..at + i + 8].try_into().unwrap());
        !matches!(bytes.get(at + 1), Some(4..=6)) || tat(2).saturating_sub(now) <= 1 << 53
    })
}

/// The core's reservation: algorithm, state, now, cost, max wait.
type ReserveFn<A> = fn(
    &A,
    Option<<A as sluicegate_core::Algorithm>::State>,
    Ticks,
    u64,
    Ticks,
) -> (Decision, Option<<A as sluicegate_core::Algorithm>::State>);

/// Runs `trace` through the core and, step by step, the module or the script.
/// `reserve`: the core's transition with a wait (buckets), else waits are dropped.
fn differential<A: Words>(
    server: &Server,
    alg: A,
    trace: Trace,
    reserve: Option<ReserveFn<A>>,
) -> Result<(), TestCaseError> {
    let mut con = server.connection();
    let limiter = RedisLimiter::new(alg.clone()).ok();
    let key = fresh_key();
    let keys = keys_of(&key, alg.lua_keys());
    let words = alg.words();
    let (mut state, mut now) = (None, trace.start);
    for step in trace.steps {
        now = now.saturating_add(step.gap).min(MAX_TICKS);
        let wait = step.max_wait.filter(|_| reserve.is_some());
        let (expected, new) = match (wait, reserve) {
            (Some(w), Some(reserve)) => reserve(&alg, state.clone(), now, step.cost, w),
            _ => alg.decide(state.clone(), now, step.cost),
        };
        match &limiter {
            // The scripts take the core's times (a sliding log's up to 2^52), and buckets
            // booked up to 2^53 ticks ahead (a reservation by the module books deeper).
            Some(limiter)
                if step.script
                    && alg.lua_now_range(now).is_ok()
                    && wait.is_none()
                    && within_scripts(&values(&alg, state.as_ref()), now) =>
            {
                let got = limiter
                    .check_request(
                        &mut con,
                        &Request::new(key.as_bytes()).cost(step.cost).at(now),
                    )
                    .map_err(|e| TestCaseError::fail(format!("script: {e}")))?;
                prop_assert_eq!(got, expected, "script at {}", now);
            }
            _ => {
                let got = module_check(&mut con, &keys, &words, step.cost, now, wait)
                    .map_err(|e| TestCaseError::fail(format!("module: {e}")))?;
                prop_assert_eq!(got, fields(&expected, now), "module at {}", now);
            }
        }
        state = new;
        for (k, want) in keys.iter().zip(values(&alg, state.as_ref())) {
            let (stored, ttl): (Option<Vec<u8>>, i64) = redis::pipe()
                .cmd("GET")
                .arg(k)
                .cmd("PTTL")
                .arg(k)
                .query(&mut con)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(ttl, if want.is_some() { -1 } else { -2 }, "ttl of {}", k);
            prop_assert_eq!(stored, want, "bytes of {}", k);
        }
    }
    Ok(())
}

/// Limits over the core's whole range: small ones, the scripts' range, up to 10^9.
fn limit() -> impl Strategy<Value = u64> {
    prop_oneof![1..=4u64, 1..=100u64, 1..=1_000_000u64, 1..=MAX_LIMIT]
}

/// Periods from 1 µs to a year.
fn period() -> impl Strategy<Value = Ticks> {
    prop_oneof![1..=10u64, 1..=10_000u64, 1..=SECOND * 3600, 1..=MAX_PERIOD]
}

fn with_trace<P: Clone + std::fmt::Debug>(
    params: impl Strategy<Value = P>,
    shape: fn(&P) -> (Ticks, u64),
) -> impl Strategy<Value = (P, Trace)> {
    params.prop_flat_map(move |p| {
        let (period, limit) = shape(&p);
        (Just(p), trace(period, limit))
    })
}

#[test]
fn fixed_window() {
    let params = (limit(), period(), any::<bool>());
    cases(
        with_trace(params, |p| (p.1, p.0)),
        |server, ((l, p, count), trace)| {
            let w = FixedWindow::new(l, p).unwrap();
            differential(
                server,
                if count { w.counting_denied() } else { w },
                trace,
                None,
            )
        },
    );
}

#[test]
fn sliding_counter() {
    cases(
        with_trace((limit(), period()), |p| (p.1, p.0)),
        |server, ((l, p), trace)| {
            differential(server, SlidingCounter::new(l, p).unwrap(), trace, None)
        },
    );
}

#[test]
fn sliding_log() {
    // The core's log holds up to 10^5 entries; the scripts' 2000.
    let limit = prop_oneof![1..=4u64, 1..=2000u64, 1..=100_000u64];
    cases(
        with_trace((limit, period()), |p| (p.1, p.0)),
        |server, ((l, p), trace)| differential(server, SlidingLog::new(l, p).unwrap(), trace, None),
    );
}

/// Bucket parameters within the core's horizon (2^53 ticks to refill from empty).
fn bucket(min_capacity: u64) -> impl Strategy<Value = (u64, u64, Ticks)> {
    (limit(), limit(), period())
        .prop_map(move |(c, r, p)| (c.max(min_capacity), r, p))
        .prop_filter("horizon", |&(c, r, p)| {
            u128::from(c) * u128::from(p) / u128::from(r) <= 1 << 53
        })
}

fn bucket_shape(p: &(u64, u64, Ticks)) -> (Ticks, u64) {
    (p.2.max(p.2 / p.1.max(1)), p.0)
}

/// A bucket algorithm (capacity, rate, period) built from each of `params`, against the
/// module with its reservations.
fn bucket_cases<A: Words + Reserve>(
    params: impl Strategy<Value = (u64, u64, Ticks)>,
    new: fn(u64, u64, Ticks) -> Result<A, sluicegate_core::ParamError>,
) {
    cases(
        with_trace(params, bucket_shape),
        |server, ((c, r, p), trace)| {
            differential(server, new(c, r, p).unwrap(), trace, Some(Reserve::reserve))
        },
    );
}

#[test]
fn token_bucket() {
    bucket_cases(bucket(1), TokenBucket::new);
}

#[test]
fn leaky_bucket() {
    bucket_cases(bucket(1), LeakyBucket::new);
}

#[test]
fn pacing() {
    let params = bucket(0).prop_flat_map(|(c, r, p)| (0..=c.min(4).max(c / 2), Just(r), Just(p)));
    bucket_cases(params, Pacing::new);
}

#[test]
fn ban_over_a_window_and_a_bucket() {
    let params = (
        0..=8u64,
        period(),
        period(),
        limit(),
        period(),
        any::<bool>(),
    );
    cases(
        with_trace(params, |p| (p.4, p.3)),
        |server, ((t, w, d, l, p, bucket), trace)| {
            if bucket {
                let inner = TokenBucket::new(l, l, p).unwrap();
                differential(server, Ban::new(inner, t, w, d).unwrap(), trace, None)
            } else {
                let inner = FixedWindow::new(l, p).unwrap();
                differential(server, Ban::new(inner, t, w, d).unwrap(), trace, None)
            }
        },
    );
}

#[test]
fn composite_windows_and_buckets() {
    let params = (limit(), period(), limit(), period(), bucket(1));
    cases(
        with_trace(params, |p| (p.1.max(p.3), p.0)),
        |server, ((l1, p1, l2, p2, (c, r, p)), trace)| {
            let windows = Composite::new(vec![
                FixedWindow::new(l1, p1).unwrap(),
                FixedWindow::new(l2, p2).unwrap(),
            ])
            .unwrap();
            differential(server, windows, trace.clone(), None)?;
            let buckets = Composite::new(vec![
                TokenBucket::new(c, r, p).unwrap(),
                TokenBucket::new(l1.min(c), r, p).unwrap(),
            ])
            .unwrap();
            differential(server, buckets, trace, Some(Reserve::reserve))
        },
    );
}

/// Lease operations at explicit times: the module's replies and bytes against the core's.
#[derive(Debug, Clone)]
enum LeaseStep {
    Acquire(u8, Ticks),
    Release(u8),
    Renew(u8, Ticks),
}

#[test]
fn leases() {
    let step =
        (0..3u8, 1..=3 * SECOND, 0..3u8, 0..=2 * SECOND).prop_map(|(op, ttl, owner, gap)| {
            let step = match op {
                0 => LeaseStep::Acquire(owner, ttl),
                1 => LeaseStep::Release(owner),
                _ => LeaseStep::Renew(owner, ttl),
            };
            (gap, step)
        });
    let params = (1..=3u64, prop::collection::vec(step, 1..40));
    cases(params, |server, (max, steps)| {
        let mut con = server.connection();
        let leases = Concurrency::new(max).unwrap();
        let key = fresh_key();
        let (mut state, mut now) = (None, EPOCH);
        for (gap, step) in steps {
            now += gap;
            let (cmd, owner, ttl) = match step {
                LeaseStep::Acquire(o, t) => ("SLUICEGATE.LEASE.ACQUIRE", o, Some(t)),
                LeaseStep::Release(o) => ("SLUICEGATE.LEASE.RELEASE", o, None),
                LeaseStep::Renew(o, t) => ("SLUICEGATE.LEASE.RENEW", o, Some(t)),
            };
            let owner = format!("owner{owner}");
            let mut c = redis::cmd(cmd);
            c.arg(&key).arg(max).arg(&owner);
            if let Some(t) = ttl {
                c.arg(t);
            }
            let got: redis::RedisResult<Vec<i64>> = c.arg("NOW").arg(now).query(&mut con);
            // A release's or renewal's reply: the grant, then the time.
            let grant_fields = |g: sluicegate_core::Grant| {
                vec![
                    g.token as i64,
                    g.expires_at as i64,
                    g.holds as i64,
                    now as i64,
                ]
            };
            let expected: Result<(Vec<i64>, _), LeaseError> = match ttl {
                Some(t) if cmd.ends_with("ACQUIRE") => leases
                    .acquire(state.clone(), now, owner.as_bytes(), t)
                    .map(|(a, new)| {
                        let mut f = fields(&a.decision, now);
                        let g = a.grant.map_or([0; 3], |g| [g.token, g.expires_at, g.holds]);
                        f.extend(g.map(|v| v as i64));
                        (f, new)
                    }),
                Some(t) => leases
                    .renew(state.clone(), now, owner.as_bytes(), t)
                    .map(|(g, new)| (grant_fields(g), new)),
                None => leases
                    .release(state.clone(), now, owner.as_bytes())
                    .map(|(g, new)| (grant_fields(g), new)),
            };
            match (got, expected) {
                (Ok(got), Ok((want, new))) => {
                    prop_assert_eq!(got, want);
                    state = new;
                }
                (Err(got), Err(want)) => {
                    prop_assert_eq!(got.code(), Some("SLUICEGATE"));
                    let want = format!("lease: {want}");
                    prop_assert_eq!(got.detail(), Some(want.as_str()));
                }
                (got, want) => prop_assert!(false, "module {:?}, core {:?}", got, want),
            }
            let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
            prop_assert_eq!(stored, state.as_ref().map(|s| leases.encode_to_vec(s)));
        }
        Ok(())
    });
}
