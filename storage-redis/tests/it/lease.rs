//! Leases on Redis: the script against the core on random operation sequences, each case
//! through the function library or through `EVALSHA` (identical
//! answers and bytes after every step), bad input, keys of other kinds, expiry on the
//! server's clock, and the multi-key lock, also on a cluster.

use std::thread::sleep;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use sluicegate_core::limits::MAX_PERIOD;
use sluicegate_core::{
    Acquired, Concurrency, FixedWindow, Grant, LeaseError, LeaseRequest, LeaseState, ParamError,
    Ticks, SECOND,
};
use sluicegate_redis::{Error, RedisLeases, RedisLimiter, Route, MAX_LUA_TICKS};

use crate::common::{self, Cluster, Server};

/// Around 2026 in µs since the Unix epoch.
const EPOCH: Ticks = 1_790_000_000_000_000;

fn prefix() -> String {
    common::fresh("lease") + ":"
}

#[derive(Debug, Clone)]
enum Op {
    Acquire { owner: Vec<u8>, ttl: Ticks },
    Release { owner: Vec<u8> },
    Renew { owner: Vec<u8>, ttl: Ticks },
}

/// Five short owners, sometimes the longest one, sometimes an empty or too long one.
fn owner() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        20 => (0u8..5).prop_map(|o| vec![b'o', o]),
        1 => (0u8..2).prop_map(|o| vec![o; 128]),
        1 => Just(Vec::new()),
        1 => Just(vec![b'x'; 129]),
    ]
}

/// Short ttls that expire within a trace, long ones, and out-of-range ones.
fn ttl() -> impl Strategy<Value = Ticks> {
    prop_oneof![
        10 => 1..200u64,
        2 => 1..=MAX_PERIOD,
        1 => Just(MAX_PERIOD),
        1 => Just(0u64),
        1 => Just(MAX_PERIOD + 1),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (owner(), ttl()).prop_map(|(owner, ttl)| Op::Acquire { owner, ttl }),
        2 => owner().prop_map(|owner| Op::Release { owner }),
        1 => (owner(), ttl()).prop_map(|(owner, ttl)| Op::Renew { owner, ttl }),
    ]
}

/// Where a trace starts (2026, or just before the scripts' last instant), the gaps (0
/// often: tokens run ahead of the clock) and the operations.
fn trace() -> impl Strategy<Value = (Ticks, Vec<(Ticks, Op)>)> {
    let start = prop_oneof![3 => Just(EPOCH), 1 => (0..1000u64).prop_map(|b| MAX_LUA_TICKS - b)];
    let gap = prop_oneof![Just(0u64), 0..5u64, 0..300u64];
    (start, prop::collection::vec((gap, op()), 1..60))
}

/// What a call gave: a grant (token, expiry, holds) with its decision fields, or an error.
type Outcome = Result<(bool, u64, Option<u64>, u64, Option<(u64, u64, u64)>), String>;

fn core_error(e: LeaseError) -> String {
    format!("{e:?}")
}

fn redis_error(e: Error) -> String {
    match e {
        Error::Lease(e) => format!("{e:?}"),
        Error::OutOfRange { what: "now", .. } => "beyond the scripts' time".to_owned(),
        other => format!("unexpected {other:?}"),
    }
}

#[test]
fn the_script_and_the_core_agree_on_answers_and_bytes() {
    let server = Server::start_with_module(false);
    let mut runner = TestRunner::new(ProptestConfig::with_cases(256));
    let routes = prop::sample::select(vec![Route::Module, Route::Functions, Route::Scripts]);
    let result = runner.run(
        &(1..=4u64, trace(), routes),
        |(max, (start, steps), route)| {
            let mut con = server.connection();
            let core = Concurrency::new(max).unwrap();
            let prefix = prefix();
            let leases = RedisLeases::new(core)
                .with_prefix(prefix.clone())
                .with_route(route)
                .unwrap();
            let key = b"k";
            let redis_key = [prefix.as_bytes(), key].concat();
            let mut state: Option<LeaseState> = None;
            let mut now = start;
            for (gap, op) in &steps {
                now += gap;
                let (want, next): (Outcome, Option<Option<LeaseState>>) = match op {
                    Op::Acquire { owner, ttl } => {
                        match core.acquire(state.clone(), now, owner, *ttl) {
                            Ok((a, next)) => {
                                let d = a.decision;
                                let g = a.grant.map(|g| (g.token, g.expires_at, g.holds));
                                (
                                    Ok((d.allowed, d.remaining, d.retry_after, d.reset_after, g)),
                                    Some(next),
                                )
                            }
                            Err(e) => (Err(core_error(e)), None),
                        }
                    }
                    Op::Release { owner } => match core.release(state.clone(), now, owner) {
                        Ok((g, next)) => (
                            Ok((true, 0, None, 0, Some((g.token, g.expires_at, g.holds)))),
                            Some(next),
                        ),
                        Err(e) => (Err(core_error(e)), None),
                    },
                    Op::Renew { owner, ttl } => match core.renew(state.clone(), now, owner, *ttl) {
                        Ok((g, next)) => (
                            Ok((true, 0, None, 0, Some((g.token, g.expires_at, g.holds)))),
                            Some(next),
                        ),
                        Err(e) => (Err(core_error(e)), None),
                    },
                };
                let got: Outcome = match op {
                    Op::Acquire { owner, ttl } => leases
                        .acquire(
                            &mut con,
                            &LeaseRequest::new(key).owner(owner).ttl(*ttl).at(now),
                        )
                        .map(|a| {
                            let d = a.decision;
                            let g = a.grant.map(|g| (g.token, g.expires_at, g.holds));
                            (d.allowed, d.remaining, d.retry_after, d.reset_after, g)
                        })
                        .map_err(redis_error),
                    Op::Release { owner } => leases
                        .release(&mut con, &LeaseRequest::new(key).owner(owner).at(now))
                        .map(|g| (true, 0, None, 0, Some((g.token, g.expires_at, g.holds))))
                        .map_err(redis_error),
                    Op::Renew { owner, ttl } => leases
                        .renew(
                            &mut con,
                            &LeaseRequest::new(key).owner(owner).ttl(*ttl).at(now),
                        )
                        .map(|g| (true, 0, None, 0, Some((g.token, g.expires_at, g.holds))))
                        .map_err(redis_error),
                };
                let bad_input = matches!(&want, Err(e) if e.starts_with("Param"));
                if now > MAX_LUA_TICKS && !bad_input {
                    // Beyond the scripts' range: refused before reaching Redis.
                    prop_assert_eq!(got, Err("beyond the scripts' time".to_owned()));
                } else {
                    prop_assert_eq!(&got, &want, "{:?} at {}", op, now);
                }
                // An error changes nothing.
                if let (Some(next), true) = (next, now <= MAX_LUA_TICKS) {
                    state = next;
                }
                let stored: Option<Vec<u8>> =
                    redis::cmd("GET").arg(&redis_key).query(&mut con).unwrap();
                prop_assert_eq!(
                    stored,
                    state.as_ref().map(|s| core.encode_to_vec(s)),
                    "bytes after {:?}",
                    op
                );
                let pttl: i64 = redis::cmd("PTTL").arg(&redis_key).query(&mut con).unwrap();
                prop_assert!(pttl == -1 || pttl == -2, "PTTL {}", pttl);
                prop_assert_eq!(leases.state(&mut con, key).unwrap(), state.clone());
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The host returns the core's own `Acquired` and `Grant`, equal to what the core
/// answers for the same calls, on every route.
#[test]
fn answers_are_the_cores_types_and_values() {
    let server = Server::start_with_module(false);
    let core = Concurrency::new(2).unwrap();
    for route in [Route::Module, Route::Functions, Route::Scripts] {
        let mut con = server.connection();
        let leases = RedisLeases::new(core)
            .with_prefix(prefix())
            .with_route(route)
            .unwrap();
        let (key, t) = (b"k".as_slice(), 1_000);
        let (want, state) = core.acquire(None, t, b"a", SECOND).unwrap();
        let got: Acquired = leases
            .acquire(
                &mut con,
                &LeaseRequest::new(key).owner(b"a").ttl(SECOND).at(t),
            )
            .unwrap();
        assert_eq!(got, want, "{route:?}");
        let (want, state) = core.acquire(state, t + 1, b"b", SECOND).unwrap();
        assert_eq!(
            leases
                .acquire(
                    &mut con,
                    &LeaseRequest::new(key).owner(b"b").ttl(SECOND).at(t + 1)
                )
                .unwrap(),
            want
        );
        // Full: denied, no grant.
        let (want, _) = core.acquire(state.clone(), t + 2, b"c", SECOND).unwrap();
        assert!(want.grant.is_none());
        assert_eq!(
            leases
                .acquire(
                    &mut con,
                    &LeaseRequest::new(key).owner(b"c").ttl(SECOND).at(t + 2)
                )
                .unwrap(),
            want
        );
        let (want, state): (Grant, _) = core.renew(state, t + 3, b"a", SECOND).unwrap();
        assert_eq!(
            leases
                .renew(
                    &mut con,
                    &LeaseRequest::new(key).owner(b"a").ttl(SECOND).at(t + 3)
                )
                .unwrap(),
            want
        );
        let (want, _) = core.release(state, t + 4, b"b").unwrap();
        assert_eq!(
            leases
                .release(&mut con, &LeaseRequest::new(key).owner(b"b").at(t + 4))
                .unwrap(),
            want
        );
    }
}

fn get(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connection();
    let leases = RedisLeases::new(Concurrency::new(2).unwrap());
    let held = leases
        .acquire(
            &mut con,
            &LeaseRequest::new(b"k").owner(b"a").ttl(SECOND).at(EPOCH),
        )
        .unwrap();
    assert!(held.decision.allowed);
    let before = get(&mut con, "k");
    let param = |e: Error| match e {
        Error::Lease(LeaseError::Param(ParamError::OutOfRange { name, .. })) => name,
        other => panic!("{other:?}"),
    };
    let owner = "owner length";
    assert_eq!(
        param(
            leases
                .acquire(&mut con, &LeaseRequest::new(b"k").owner(b"").ttl(SECOND))
                .unwrap_err()
        ),
        owner
    );
    assert_eq!(
        param(
            leases
                .acquire(
                    &mut con,
                    &LeaseRequest::new(b"k").owner(&[7; 129]).ttl(SECOND)
                )
                .unwrap_err()
        ),
        owner
    );
    assert_eq!(
        param(
            leases
                .release(&mut con, &LeaseRequest::new(b"k").owner(b""))
                .unwrap_err()
        ),
        owner
    );
    assert_eq!(
        param(
            leases
                .acquire(&mut con, &LeaseRequest::new(b"k").owner(b"b").ttl(0))
                .unwrap_err()
        ),
        "ttl"
    );
    assert_eq!(
        param(
            leases
                .renew(
                    &mut con,
                    &LeaseRequest::new(b"k").owner(b"a").ttl(MAX_PERIOD + 1)
                )
                .unwrap_err()
        ),
        "ttl"
    );
    let not_held = |r: Result<_, Error>| matches!(r, Err(Error::Lease(LeaseError::NotHeld)));
    assert!(not_held(leases.release(
        &mut con,
        &LeaseRequest::new(b"k").owner(b"b").at(EPOCH)
    )));
    assert!(not_held(leases.renew(
        &mut con,
        &LeaseRequest::new(b"k").owner(b"b").ttl(SECOND).at(EPOCH)
    )));
    assert!(not_held(
        leases.release(&mut con, &LeaseRequest::new(b"absent").owner(b"a"))
    ));
    // Expired: the holder must stop; renewing cannot bring it back.
    assert!(not_held(
        leases.renew(
            &mut con,
            &LeaseRequest::new(b"k")
                .owner(b"a")
                .ttl(SECOND)
                .at(EPOCH + SECOND)
        )
    ));
    assert!(matches!(
        leases.acquire_all(&mut con, &[], b"a", SECOND),
        Err(Error::NoKeys)
    ));
    assert_eq!(get(&mut con, "k"), before);
}

#[test]
fn keys_of_other_kinds_are_refused_and_kept() {
    let server = Server::start();
    let mut con = server.connection();
    let window = RedisLimiter::new(FixedWindow::new(5, SECOND).unwrap()).unwrap();
    assert!(common::allowed_at(&window, &mut con, b"window", EPOCH));
    let () = redis::cmd("RPUSH")
        .arg("list")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let lock = RedisLeases::new(Concurrency::lock());
    let three = RedisLeases::new(Concurrency::new(3).unwrap());
    for o in [b"a".as_slice(), b"b", b"c"] {
        let _ = three
            .acquire(
                &mut con,
                &LeaseRequest::new(b"three").owner(o).ttl(SECOND).at(EPOCH),
            )
            .unwrap();
    }
    let before: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
        .arg(&["window", "three"])
        .query(&mut con)
        .unwrap();
    for key in [b"window".as_slice(), b"three"] {
        for result in [
            lock.acquire(&mut con, &LeaseRequest::new(key).owner(b"a").ttl(SECOND))
                .map(drop),
            lock.release(&mut con, &LeaseRequest::new(key).owner(b"a"))
                .map(drop),
            lock.renew(&mut con, &LeaseRequest::new(key).owner(b"a").ttl(SECOND))
                .map(drop),
            lock.acquire_all(&mut con, &[b"free", key], b"a", SECOND)
                .map(drop),
            lock.state(&mut con, key).map(drop),
        ] {
            match result {
                // Worded by the core's decoder, as in every host.
                Err(Error::Corrupt { key: k, reason }) => {
                    assert_eq!(k, key);
                    assert!(
                        reason.contains("expected a lease table") || reason.contains("count"),
                        "{reason}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }
    match lock.acquire(
        &mut con,
        &LeaseRequest::new(b"list").owner(b"a").ttl(SECOND),
    ) {
        Err(Error::Foreign { key, found }) => {
            assert_eq!((&key[..], &found[..]), (&b"list"[..], "list"))
        }
        other => panic!("{other:?}"),
    }
    let after: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
        .arg(&["window", "three"])
        .query(&mut con)
        .unwrap();
    assert_eq!(before, after);
    assert_eq!(get(&mut con, "free"), None, "all or nothing");
}

#[test]
fn on_the_servers_clock_a_lease_returns_after_its_ttl_and_tokens_still_grow() {
    let server = Server::start();
    let mut con = server.connection();
    let lock = RedisLeases::new(Concurrency::lock());
    let ttl = 150 * sluicegate_core::MILLISECOND;
    let granted = |con: &mut redis::Connection, owner: &[u8]| {
        let acquired = lock
            .acquire(con, &LeaseRequest::new(b"k").owner(owner).ttl(ttl))
            .unwrap();
        acquired.grant.expect("granted")
    };
    let first = lock
        .acquire(&mut con, &LeaseRequest::new(b"k").owner(b"a").ttl(ttl))
        .unwrap();
    let grant = first.grant.unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg("k").query(&mut con).unwrap();
    let reset_ms = i64::try_from(first.decision.reset_after.div_ceil(1000)).unwrap();
    assert!(
        (reset_ms - 20..=reset_ms).contains(&pttl),
        "{pttl} vs {reset_ms}"
    );
    let denied = lock
        .acquire(&mut con, &LeaseRequest::new(b"k").owner(b"b").ttl(ttl))
        .unwrap();
    assert!(!denied.decision.allowed);
    assert!(denied.decision.retry_after.unwrap() <= ttl);
    sleep(Duration::from_millis(170));
    let second = granted(&mut con, b"b");
    assert!(second.token > grant.token);
    // Released at once: the key lives until the clock passes its last token, and a
    // grant after it is gone still gets a larger token.
    let _ = lock
        .release(&mut con, &LeaseRequest::new(b"k").owner(b"b"))
        .unwrap();
    sleep(Duration::from_millis(5));
    assert_eq!(get(&mut con, "k"), None);
    let third = granted(&mut con, b"c");
    assert!(third.token > second.token);
}

#[test]
fn a_multi_key_lock_is_all_or_nothing() {
    let server = Server::start();
    let mut con = server.connection();
    multi_key(&mut con);
}

#[test]
fn a_multi_key_lock_runs_on_one_cluster_node() {
    let cluster = Cluster::start();
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut con = client.get_connection().unwrap();
    multi_key(&mut con);
    // Keys spread over the cluster each lock on their own node.
    let lock = RedisLeases::new(Concurrency::lock()).with_prefix("lock:");
    for i in 0..30 {
        let key = format!("resource:{i}");
        let first = lock
            .acquire(
                &mut con,
                &LeaseRequest::new(key.as_bytes()).owner(b"a").ttl(SECOND),
            )
            .unwrap();
        assert!(first.decision.allowed);
        let other = lock
            .acquire(
                &mut con,
                &LeaseRequest::new(key.as_bytes()).owner(b"b").ttl(SECOND),
            )
            .unwrap();
        assert!(!other.decision.allowed);
    }
}

/// Keys sharing the hash tag `{bank}`: one slot, one script.
fn multi_key(con: &mut impl redis::ConnectionLike) {
    let lock = RedisLeases::new(Concurrency::lock());
    let (a, b, c): (&[u8], &[u8], &[u8]) = (b"{bank}:a", b"{bank}:b", b"{bank}:c");
    let (decision, both) = lock.acquire_all(con, &[a, b], b"alice", SECOND).unwrap();
    assert!(decision.allowed);
    assert_eq!(both.len(), 2);
    // b is held: bob gets neither b nor c.
    let (denied, none) = lock.acquire_all(con, &[c, b], b"bob", SECOND).unwrap();
    assert!(!denied.allowed && none.is_empty());
    assert!(denied.retry_after.unwrap() > 0);
    assert_eq!(lock.state(con, c).unwrap(), None);
    // Releasing keys not all held by the owner changes nothing.
    assert!(matches!(
        lock.release_all(con, &[a, c], b"alice"),
        Err(Error::Lease(LeaseError::NotHeld))
    ));
    assert_eq!(lock.state(con, a).unwrap().unwrap().leases().len(), 1);
    let renewed = lock.renew_all(con, &[a, b], b"alice", 2 * SECOND).unwrap();
    assert_eq!(renewed.len(), 2);
    let released = lock.release_all(con, &[b, a], b"alice").unwrap();
    assert!(released.iter().all(|h| h.holds == 0));
    let (decision, now) = lock.acquire_all(con, &[c, b], b"bob", SECOND).unwrap();
    assert!(decision.allowed);
    assert!(now[1].token > both[1].token);
}

#[test]
fn batches_acquire_and_release_each_request_on_its_own() {
    let server = Server::start();
    let mut con = server.connection();
    let lock = RedisLeases::new(Concurrency::lock());
    let () = redis::cmd("SET")
        .arg("corrupt")
        .arg("x")
        .query(&mut con)
        .unwrap();
    // The server has no script yet: every call is sent again as EVAL.
    let lease =
        |key: &'static str, owner: &'static str| LeaseRequest::new(key).owner(owner).ttl(SECOND);
    let requests = [
        lease("a", "o1"),
        lease("b", ""),
        lease("a", "o2"),
        lease("corrupt", "o1"),
        lease("c", "o1"),
    ];
    let results = lock.acquire_batch(&mut con, &requests).unwrap();
    assert!(results[0].as_ref().unwrap().decision.allowed);
    assert!(matches!(
        results[1],
        Err(Error::Lease(LeaseError::Param(_)))
    ));
    assert!(!results[2].as_ref().unwrap().decision.allowed);
    assert!(
        matches!(&results[3], Err(Error::Corrupt { reason, .. }) if reason.contains("truncated") || reason.contains("version")),
        "{:?}",
        results[3]
    );
    assert!(results[4].as_ref().unwrap().decision.allowed);
    // Loaded now: EVALSHA in one round trip.
    let released = lock
        .release_batch(
            &mut con,
            &[lease("a", "o1"), lease("a", "o1"), lease("c", "o1")],
        )
        .unwrap();
    assert_eq!(released[0].as_ref().unwrap().holds, 0);
    assert!(matches!(
        released[1],
        Err(Error::Lease(LeaseError::NotHeld))
    ));
    assert_eq!(released[2].as_ref().unwrap().holds, 0);
}
