//! The lock family on Redis: the script against the core on random sequences with
//! explicit time (answers, stored bytes and the waiter woken), and the herd: fifty
//! waiters on a fair lock, counted in Redis commands per release, beside today's
//! exclusive lease polled every 100 ms.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use sluicegate_core::memory::WaitCancel;
use sluicegate_core::rwlock::{LockError, LockMode, RwLease, RwState};
use sluicegate_core::{Concurrency, LeaseRequest, Ticks, SECOND};
use sluicegate_redis::{Error, HeldChange, RedisLeases, RedisRwLock, Route, CANCEL_POLL};

use crate::common::{self, Cluster, Server};

/// Around 2026 in µs since the Unix epoch.
const EPOCH: Ticks = 1_790_000_000_000_000;

/// An owner's call: an acquire (a try without a wait), a change to its lease, or a
/// withdrawal.
#[derive(Debug, Clone)]
enum Op {
    Acquire(u8, LockMode, Ticks, Option<Ticks>),
    Held(u8, HeldChange, Ticks),
    Withdraw(u8),
}

impl Op {
    fn owner(&self) -> [u8; 2] {
        match self {
            Self::Acquire(o, ..) | Self::Held(o, ..) | Self::Withdraw(o) => [b'o', *o],
        }
    }
}

fn ttl() -> impl Strategy<Value = Ticks> {
    prop_oneof![10 => 1..200u64, 1 => Just(0u64)]
}

fn op() -> impl Strategy<Value = Op> {
    let who = 0..5u8;
    let wait = prop_oneof![2 => (1..300u64).prop_map(Some), 1 => Just(None)];
    let change = prop_oneof![
        3 => Just(HeldChange::Release),
        1 => Just(HeldChange::Renew),
        1 => Just(HeldChange::Downgrade),
    ];
    prop_oneof![
        6 => (who.clone(), lock_mode(), ttl(), wait).prop_map(|(o, x, t, w)| Op::Acquire(o, x, t, w)),
        5 => (who.clone(), change, ttl()).prop_map(|(o, c, t)| Op::Held(o, c, t)),
        1 => who.prop_map(Op::Withdraw),
    ]
}

fn lock_mode() -> impl Strategy<Value = LockMode> {
    prop_oneof![Just(LockMode::Shared), Just(LockMode::Exclusive)]
}

/// A call's answer as text (the same for both sides when they agree), and the state after.
type Step = (Result<String, String>, Option<Option<RwState>>);

fn core_step(lease: &RwLease, state: Option<RwState>, now: Ticks, op: &Op) -> Step {
    let owner = op.owner();
    let answer = match *op {
        Op::Acquire(_, mode, ttl, Some(wait)) => lease
            .acquire(state, now, &owner, mode, ttl, wait)
            .map(|(a, s)| (format!("{a:?}"), s)),
        Op::Acquire(_, mode, ttl, None) => lease
            .try_acquire(state, now, &owner, mode, ttl)
            .map(|(a, s)| (format!("{a:?}"), s)),
        Op::Held(_, change, ttl) => match change {
            HeldChange::Release => lease.release(state, now, &owner),
            HeldChange::Renew => lease.renew(state, now, &owner, ttl),
            _ => lease.downgrade(state, now, &owner),
        }
        .map(|(g, s)| (format!("{g:?}"), s)),
        Op::Withdraw(_) => lease
            .withdraw(state, now, &owner)
            .map(|s| (String::new(), s)),
    };
    match answer {
        Ok((text, state)) => (Ok(text), Some(state)),
        Err(e) => (Err(format!("{e:?}")), None),
    }
}

/// The waiter the script must wake after a call by `caller` left `state`: the first in
/// line, if not the caller and the core would grant it now.
fn due(lease: &RwLease, state: &Option<RwState>, now: Ticks, caller: &[u8]) -> Option<Vec<u8>> {
    let next = state.as_ref()?.next_turn(now)?;
    let probe = lease.try_acquire(state.clone(), now, next.owner(), next.mode(), 1);
    let granted = probe.is_ok_and(|(a, _)| a.grant.is_some());
    (next.owner() != caller && granted).then(|| next.owner().to_vec())
}

/// Runs `op` on Redis through the synchronous calls, or, with `on`, the asynchronous
/// ones over its runtime and multiplexed connection.
fn redis_step(
    lock: &RedisRwLock,
    con: &mut redis::Connection,
    on: Option<&mut Async>,
    now: Ticks,
    op: &Op,
) -> (Result<String, String>, Option<Vec<u8>>) {
    let owner = op.owner();
    let ttl = match *op {
        Op::Acquire(_, _, ttl, _) | Op::Held(_, _, ttl) => ttl,
        Op::Withdraw(_) => 0,
    };
    let request = LeaseRequest::new(b"k").owner(&owner).ttl(ttl).at(now);
    let answer = match (on, op) {
        (None, &Op::Acquire(_, mode, _, wait)) => lock
            .acquire(con, &request, mode, wait)
            .map(|h| (format!("{:?}", h.answer), h.woken)),
        (None, &Op::Held(_, change, _)) => lock
            .change(con, &request, change)
            .map(|h| (format!("{:?}", h.answer), h.woken)),
        (None, Op::Withdraw(_)) => lock.withdraw(con, &request).map(|w| (String::new(), w)),
        (Some(on), op) => {
            let (rt, con) = (&on.0, &mut on.1);
            match *op {
                Op::Acquire(_, mode, _, wait) => rt
                    .block_on(lock.acquire_async(con, &request, mode, wait))
                    .map(|h| (format!("{:?}", h.answer), h.woken)),
                Op::Held(_, change, _) => rt
                    .block_on(lock.change_async(con, &request, change))
                    .map(|h| (format!("{:?}", h.answer), h.woken)),
                Op::Withdraw(_) => rt
                    .block_on(lock.withdraw_async(con, &request))
                    .map(|w| (String::new(), w)),
            }
        }
    };
    match answer {
        Ok((text, woken)) => (Ok(text), woken),
        Err(Error::Lock(e)) => (Err(format!("{e:?}")), None),
        Err(other) => (Err(format!("unexpected {other:?}")), None),
    }
}

/// A runtime and an asynchronous connection on it.
type Async = (tokio::runtime::Runtime, redis::aio::MultiplexedConnection);

fn runtime_and_connection(server: &Server) -> Async {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let con = rt.block_on(common::connect_multiplexed(server));
    (rt, con)
}

#[test]
fn the_script_and_the_core_agree_on_answers_bytes_and_wakes() {
    let server = Server::start();
    let on = std::cell::RefCell::new(runtime_and_connection(&server));
    let mut runner = TestRunner::new(ProptestConfig::with_cases(256));
    let gap = prop_oneof![Just(0u64), 0..5u64, 0..150u64];
    // Each step through the synchronous or the asynchronous calls: one answer.
    let trace = prop::collection::vec((gap, op(), any::<bool>()), 1..60);
    let route = prop_oneof![Just(Route::Scripts), Just(Route::Functions)];
    let cases = (1..=3u64, any::<bool>(), route, trace);
    let result = runner.run(&cases, |(max, fair, route, steps)| {
        let mut con = server.connection();
        let mut lease = RwLease::new(max).unwrap();
        if fair {
            lease = lease.fair();
        }
        let prefix = common::fresh("rw") + ":";
        let lock = RedisRwLock::new(lease)
            .with_prefix(prefix.clone())
            .with_route(route)
            .unwrap();
        let redis_key = [prefix.as_bytes(), b"k"].concat();
        let mut state: Option<RwState> = None;
        let mut now = EPOCH;
        for (gap, op, asynchronous) in &steps {
            now += gap;
            let (want, next) = core_step(&lease, state.clone(), now, op);
            let mut on = on.borrow_mut();
            let on = asynchronous.then_some(&mut *on);
            let (got, woken) = redis_step(&lock, &mut con, on, now, op);
            prop_assert_eq!(&got, &want, "{:?} at {}", op, now);
            if let Some(next) = next {
                let due = due(&lease, &next, now, &op.owner());
                prop_assert_eq!(woken, due, "{:?}", op);
                state = next;
            }
            let stored: Option<Vec<u8>> =
                redis::cmd("GET").arg(&redis_key).query(&mut con).unwrap();
            prop_assert_eq!(stored, state.as_ref().map(|s| lease.encode_to_vec(s)));
        }
        prop_assert_eq!(lock.route(), Some(route));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[tokio::test]
async fn an_async_waiter_is_handed_the_lock_or_leaves_no_place() {
    let server = Server::start();
    let lock = RedisRwLock::new(RwLease::read_write().fair());
    let key = common::fresh("async-wait");
    let mut holder = common::connect_multiplexed(&server).await;
    let writer = hold(&key, b"w1");
    let held = lock.acquire_async(&mut holder, &writer, LockMode::Exclusive, None);
    let first = held.await.unwrap().answer.grant.unwrap();

    // Timed out: no grant, and its place withdrawn.
    let mut con = common::connect_multiplexed(&server).await;
    let request = hold(&key, b"late");
    let timed_out = lock.acquire_blocking_async(
        &mut con,
        &request,
        LockMode::Shared,
        Duration::from_millis(50),
        None,
    );
    assert!(timed_out.await.unwrap().grant.is_none());
    assert_eq!(queue(&lock, &mut server.connection(), &key), 0);

    // Woken by the release: granted well before its place would have needed renewing.
    let waiter = {
        let (lock, key) = (lock.clone(), key.clone());
        let mut con = common::connect_multiplexed(&server).await;
        tokio::spawn(async move {
            let request = hold(&key, b"r1");
            let asked = Instant::now();
            let got = lock.acquire_blocking_async(
                &mut con,
                &request,
                LockMode::Shared,
                Duration::from_secs(20),
                None,
            );
            (got.await.unwrap(), asked.elapsed())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while queue(&lock, &mut server.connection(), &key) == 0 {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let released = lock.change_async(&mut holder, &writer, HeldChange::Release);
    assert_eq!(released.await.unwrap().woken.as_deref(), Some(&b"r1"[..]));
    let (granted, waited) = waiter.await.unwrap();
    let grant = granted.grant.expect("granted once released");
    assert!(grant.token > first.token);
    assert!(waited < Duration::from_secs(4), "{waited:?}");
}

/// A waiter blocked behind a writer, cancelled from another thread: it returns
/// `Cancelled` within the poll (plus a loaded machine's slack) and leaves no place; a
/// handle cancelled before the call ends it at once.
#[test]
fn a_cancelled_waiter_gives_up_its_place() {
    let server = Server::start();
    let lock = RedisRwLock::new(RwLease::read_write().fair());
    let key = common::fresh("cancel");
    let writer = hold(&key, b"w");
    let mut con = server.connection();
    take_exclusive(&lock, &mut con, &writer);
    let cancel = WaitCancel::new();
    let waited = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mut con = server.connection();
            let request = hold(&key, b"r");
            let got = lock.acquire_blocking(
                &mut con,
                &request,
                LockMode::Shared,
                Duration::from_secs(20),
                Some(&cancel),
            );
            (got, Instant::now())
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while queue(&lock, &mut server.connection(), &key) == 0 {
            assert!(Instant::now() < deadline, "the waiter never queued");
            std::thread::sleep(Duration::from_millis(5));
        }
        let cancelled_at = Instant::now();
        cancel.cancel();
        let (got, returned) = waiter.join().unwrap();
        assert!(matches!(got, Err(Error::Cancelled)), "{got:?}");
        returned - cancelled_at
    });
    assert!(waited < CANCEL_POLL + Duration::from_secs(1), "{waited:?}");
    assert_eq!(queue(&lock, &mut con, &key), 0);
    // Already cancelled: no ask at all, no place taken.
    let reader = hold(&key, b"r");
    let again = lock.acquire_blocking(
        &mut con,
        &reader,
        LockMode::Shared,
        Duration::from_secs(20),
        Some(&cancel),
    );
    assert!(matches!(again, Err(Error::Cancelled)));
    assert_eq!(queue(&lock, &mut con, &key), 0);
}

/// An unfair lock queues no reader: five readers refused while a writer holds count
/// themselves (once each), and the writer's release wakes them all at once, well before their 5 s
/// `BLPOP` would end (half the place's ttl).
#[test]
fn an_unfair_locks_readers_are_woken_by_the_release() {
    let server = Server::start();
    let lock = RedisRwLock::new(RwLease::read_write());
    let key = common::fresh("readers");
    let writer = hold(&key, b"w");
    let mut con = server.connection();
    take_exclusive(&lock, &mut con, &writer);
    let waiting = format!("{{{key}}}:readers");
    let granted = std::thread::scope(|s| {
        let readers: Vec<_> = (0..5u8)
            .map(|r| {
                let (lock, key, server) = (&lock, &key, &server);
                s.spawn(move || {
                    let mut con = server.connection();
                    let owner = [b'r', b'0' + r];
                    let request = hold(key, &owner);
                    waited(lock, &mut con, &request, LockMode::Shared)
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let counted: u64 = redis::cmd("SCARD").arg(&waiting).query(&mut con).unwrap();
            if counted == 5 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the readers never counted themselves"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // A reader asking again is counted once.
        let again = lock.acquire(&mut con, &hold(&key, b"r0"), LockMode::Shared, Some(SECOND));
        assert!(again.unwrap().answer.grant.is_none());
        let counted: u64 = redis::cmd("SCARD").arg(&waiting).query(&mut con).unwrap();
        assert_eq!(counted, 5);
        let released_at = Instant::now();
        lock.change(&mut con, &writer, HeldChange::Release).unwrap();
        let answers: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        answers
            .into_iter()
            .map(|(granted, at)| (granted, at - released_at))
            .collect::<Vec<_>>()
    });
    for (was_granted, after) in granted {
        assert!(was_granted);
        assert!(after < Duration::from_secs(2), "{after:?}");
    }
    let state = lock.state(&mut con, key.as_bytes()).unwrap().unwrap();
    assert_eq!(state.holders().len(), 5);
}

#[test]
fn garbage_bytes_are_a_typed_error_and_stay() {
    let server = Server::start();
    let mut con = server.connection();
    let lock = RedisRwLock::new(RwLease::read_write().fair());
    let _: () = redis::cmd("SET")
        .arg("g")
        .arg(b"\x01\x0cjunk")
        .query(&mut con)
        .unwrap();
    let request = LeaseRequest::new(b"g").owner(b"a").ttl(SECOND);
    let denied = lock.acquire(&mut con, &request, LockMode::Shared, None);
    assert!(matches!(denied, Err(Error::Corrupt { .. })), "{denied:?}");
    let none = LeaseRequest::new(b"none").owner(b"a");
    let released = lock.change(&mut con, &none, HeldChange::Release);
    assert!(
        matches!(released, Err(Error::Lock(LockError::NotHeld))),
        "{released:?}"
    );
    let kept: Vec<u8> = redis::cmd("GET").arg("g").query(&mut con).unwrap();
    assert_eq!(kept, b"\x01\x0cjunk");
}

/// The commands the scripts run inside an `EVALSHA`, and the watcher's own: not sent by
/// a waiter or a holder.
const NOT_SENT: [&str; 9] = [
    "get",
    "set",
    "del",
    "time",
    "llen",
    "lpush",
    "pexpire",
    "info",
    "config|resetstat",
];

/// How many commands clients sent so far (`INFO commandstats`, less [`NOT_SENT`]).
fn commands_run(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, stats) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.strip_prefix("calls=")?.split(',').next()?;
            (!NOT_SENT.contains(&name)).then(|| calls.parse::<u64>().ok())?
        })
        .sum()
}

const HERD: usize = 50;

/// Fifty waiters on a fair lock, queued one by one, then handed the lock down the line:
/// granted in queue order, each release costing Redis the commands of one waiter.
#[test]
fn fifty_waiters_cost_one_waiters_commands_per_release() {
    let server = Server::start();
    let mut watch = server.connection();
    let lock = RedisRwLock::new(RwLease::new(1).unwrap().fair());
    let key = common::fresh("herd");
    let head = lock
        .acquire(&mut watch, &hold(&key, b"first"), LockMode::Exclusive, None)
        .unwrap();
    assert!(head.answer.grant.is_some());
    let order = Mutex::new(Vec::new());
    let mut per_release = 0.0;
    std::thread::scope(|s| {
        for i in 0..HERD {
            let (lock, order, key, server) = (&lock, &order, &key, &server);
            s.spawn(move || {
                let mut con = server.connection();
                let owner = format!("w{i}");
                let request = hold(key, owner.as_bytes());
                let got = lock
                    .acquire_blocking(
                        &mut con,
                        &request,
                        LockMode::Exclusive,
                        Duration::from_secs(60),
                        None,
                    )
                    .unwrap();
                assert!(got.grant.is_some());
                order.lock().unwrap().push(i);
                lock.change(&mut con, &request, HeldChange::Release)
                    .unwrap();
            });
            let start = Instant::now();
            while queue(lock, &mut watch, key) < i + 1 {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "waiter {i} never queued"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut watch)
            .unwrap();
        let before = commands_run(&mut watch);
        lock.change(&mut watch, &hold(&key, b"first"), HeldChange::Release)
            .unwrap();
        let start = Instant::now();
        while order.lock().unwrap().len() < HERD {
            assert!(start.elapsed() < Duration::from_secs(60));
            std::thread::sleep(Duration::from_millis(5));
        }
        // The watcher's INFO, CONFIG and polls of `state` are not counted.
        std::thread::sleep(Duration::from_millis(50));
        let spent = commands_run(&mut watch) - before;
        per_release = spent as f64 / HERD as f64;
    });
    assert_eq!(*order.lock().unwrap(), (0..HERD).collect::<Vec<_>>());
    println!("fair lock, {HERD} waiters: {per_release:.2} Redis commands per release");
    // The waiter's grant, its release, and the BLPOP its wake ended.
    assert!(per_release <= 3.0, "{per_release}");
    let today = polled_exclusive_lease(&server);
    println!("exclusive lease polled every 100 ms, {HERD} waiters: {today:.2} Redis commands per release");
    // Each of today's waiters polls for as long as those ahead of it hold (20 ms each):
    // several times one waiter's commands however fast the machine.
    assert!(today > 2.0 * per_release, "{today}");
}

/// A minute's exclusive lease on `key` for `owner`.
fn hold<'a>(key: &'a str, owner: &'a [u8]) -> LeaseRequest<'a> {
    LeaseRequest::new(key.as_bytes())
        .owner(owner)
        .ttl(60 * SECOND)
}

fn take_exclusive(lock: &RedisRwLock, con: &mut redis::Connection, request: &LeaseRequest<'_>) {
    let held = lock
        .acquire(con, request, LockMode::Exclusive, None)
        .unwrap();
    assert!(held.answer.grant.is_some());
}

/// A blocking acquire of up to 20 s: whether it was granted, and when it returned.
fn waited(
    lock: &RedisRwLock,
    con: &mut impl redis::ConnectionLike,
    request: &LeaseRequest<'_>,
    mode: LockMode,
) -> (bool, Instant) {
    let got = lock.acquire_blocking(con, request, mode, Duration::from_secs(20), None);
    (got.unwrap().grant.is_some(), Instant::now())
}

fn queue(lock: &RedisRwLock, con: &mut redis::Connection, key: &str) -> usize {
    let state = lock.state(con, key.as_bytes()).unwrap();
    state.map_or(0, |s| s.waiters().len())
}

/// Today's waiting: every waiter retries an exclusive lease every 100 ms; each holds it
/// 20 ms. Returns the commands run per release.
fn polled_exclusive_lease(server: &Server) -> f64 {
    let leases = RedisLeases::new(Concurrency::new(1).unwrap());
    let key = common::fresh("polled");
    let mut watch = server.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut watch)
        .unwrap();
    let before = commands_run(&mut watch);
    std::thread::scope(|s| {
        for i in 0..HERD {
            let (leases, key) = (&leases, &key);
            s.spawn(move || {
                let mut con = server.connection();
                let owner = format!("p{i}");
                let request = LeaseRequest::new(key.as_bytes())
                    .owner(owner.as_bytes())
                    .ttl(60 * SECOND);
                while leases.acquire(&mut con, &request).unwrap().grant.is_none() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                std::thread::sleep(Duration::from_millis(20));
                assert_eq!(leases.release(&mut con, &request).unwrap().holds, 0);
            });
        }
    });
    (commands_run(&mut watch) - before) as f64 / HERD as f64
}

/// On a cluster, a lock's wake list is in its hash slot: keys spread over the nodes, with
/// and without a hash tag, each hand a fair lock to a blocked waiter by its wake.
#[test]
fn a_waiter_is_woken_on_every_cluster_node() {
    let cluster = Cluster::start();
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let lock = RedisRwLock::new(RwLease::new(1).unwrap().fair());
    for key in [
        "resource:0",
        "resource:1",
        "resource:2",
        "{orders}:7",
        "plain",
    ] {
        let mut con = client.get_connection().unwrap();
        let holder = hold(key, b"holder");
        let taken = lock
            .acquire(&mut con, &holder, LockMode::Exclusive, None)
            .unwrap();
        assert!(taken.answer.grant.is_some());
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let mut con = client.get_connection().unwrap();
                let request = hold(key, b"waiter");
                waited(&lock, &mut con, &request, LockMode::Exclusive)
            });
            let start = Instant::now();
            while lock
                .state(&mut con, key.as_bytes())
                .unwrap()
                .is_none_or(|s| s.waiters().is_empty())
            {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{key}: never queued"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            let released = Instant::now();
            let handed = lock.change(&mut con, &holder, HeldChange::Release).unwrap();
            assert_eq!(handed.woken.as_deref(), Some(&b"waiter"[..]));
            let (granted, at) = waiter.join().unwrap();
            assert!(granted, "{key}");
            // Woken, not left to its place's renewal 5 s later (4 s: a loaded machine).
            assert!(
                at - released < Duration::from_secs(4),
                "{key}: {:?}",
                at - released
            );
        });
    }
}
