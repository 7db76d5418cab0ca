//! What the lock family costs on one local redis-server it starts: acquire/release pairs
//! and the handoff (a release until the next holder's grant returns), fair and unfair,
//! exclusive and shared, beside today's exclusive lease retried every 100 ms.
//!
//! `cargo run --release -p sluicegate-redis --example lock_handoff`

use std::sync::mpsc;
use std::time::{Duration, Instant};

use sluicegate_core::rwlock::{LockMode, RwLease};
use sluicegate_core::{Concurrency, LeaseRequest, SECOND};
use sluicegate_redis::{HeldChange, RedisLeases, RedisRwLock};
use sluicegate_test_support::Server;

const PAIRS: u32 = 5000;
const HANDOFFS: usize = 300;
const POLLED_HANDOFFS: usize = 30;

fn request<'a>(key: &'a str, owner: &'a str) -> LeaseRequest<'a> {
    LeaseRequest::new(key.as_bytes())
        .owner(owner.as_bytes())
        .ttl(60 * SECOND)
}

/// Microseconds per acquire/release pair of `pair`.
fn pairs(mut pair: impl FnMut()) -> f64 {
    for _ in 0..200 {
        pair();
    }
    let start = Instant::now();
    for _ in 0..PAIRS {
        pair();
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(PAIRS)
}

fn median_p99(mut waits: Vec<Duration>) -> (f64, f64) {
    waits.sort();
    let at = |per_mille: usize| waits[(waits.len() - 1) * per_mille / 1000].as_secs_f64() * 1e6;
    (at(500), at(990))
}

/// Handoffs on the lock family: the main thread holds, a waiter blocks in
/// `acquire_blocking`, and the time from the release to the waiter's grant is measured.
fn family_handoffs(server: &Server, lease: RwLease, mode: LockMode) -> (f64, f64) {
    let lock = RedisRwLock::new(lease);
    let key = format!("handoff-{}-{mode:?}", lease.is_fair());
    let mut con = server.connection();
    let (granted, grants) = mpsc::channel::<Instant>();
    let (next, rounds) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (lock, key) = (&lock, &key);
        s.spawn(move || {
            let mut con = server.connection();
            let owner = request(key, "waiter");
            while rounds.recv().is_ok() {
                let got =
                    lock.acquire_blocking(&mut con, &owner, mode, Duration::from_secs(10), None);
                granted.send(Instant::now()).unwrap();
                assert!(got.unwrap().grant.is_some());
                lock.change(&mut con, &owner, HeldChange::Release).unwrap();
            }
        });
        let holder = request(key, "holder");
        let mut waits = Vec::with_capacity(HANDOFFS);
        for _ in 0..HANDOFFS {
            let taken = lock
                .acquire(&mut con, &holder, LockMode::Exclusive, None)
                .unwrap();
            assert!(taken.answer.grant.is_some());
            next.send(()).unwrap();
            // The waiter queued (a writer queues on an unfair lock too; a reader does not).
            let queued = |con: &mut redis::Connection| {
                lock.state(con, key.as_bytes())
                    .unwrap()
                    .is_some_and(|s| !s.waiters().is_empty())
            };
            let start = Instant::now();
            while mode == LockMode::Exclusive || lease.is_fair() {
                if queued(&mut con) || start.elapsed() > Duration::from_secs(5) {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
            let released = Instant::now();
            lock.change(&mut con, &holder, HeldChange::Release).unwrap();
            waits.push(grants.recv().unwrap() - released);
            // Until the waiter released, the holder's next acquire could be refused.
            while lock
                .state(&mut con, key.as_bytes())
                .unwrap()
                .is_some_and(|s| !s.holders().is_empty())
            {}
        }
        drop(next);
        median_p99(waits)
    })
}

/// Today's handoff: the waiter retries an exclusive lease every 100 ms.
fn polled_handoffs(server: &Server) -> (f64, f64) {
    let leases = RedisLeases::new(Concurrency::lock());
    let key = "handoff-polled";
    let mut con = server.connection();
    let (granted, grants) = mpsc::channel::<Instant>();
    let (next, rounds) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let leases = &leases;
        s.spawn(move || {
            let mut con = server.connection();
            let owner = request(key, "waiter");
            while rounds.recv().is_ok() {
                while leases.acquire(&mut con, &owner).unwrap().grant.is_none() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                granted.send(Instant::now()).unwrap();
                assert_eq!(leases.release(&mut con, &owner).unwrap().holds, 0);
            }
        });
        let holder = request(key, "holder");
        let mut waits = Vec::with_capacity(POLLED_HANDOFFS);
        for round in 0..POLLED_HANDOFFS {
            assert!(leases.acquire(&mut con, &holder).unwrap().grant.is_some());
            next.send(()).unwrap();
            // Released at a different point of the waiter's 100 ms each round.
            std::thread::sleep(Duration::from_millis(5 + (round as u64 * 37) % 100));
            let released = Instant::now();
            assert_eq!(leases.release(&mut con, &holder).unwrap().holds, 0);
            waits.push(grants.recv().unwrap() - released);
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(next);
        median_p99(waits)
    })
}

fn main() {
    let server = Server::start();
    let mut con = server.connection();
    let leases = RedisLeases::new(Concurrency::lock());
    let today = pairs(|| {
        let r = request("pair-today", "a");
        assert!(leases.acquire(&mut con, &r).unwrap().grant.is_some());
        assert_eq!(leases.release(&mut con, &r).unwrap().holds, 0);
    });
    println!("acquire/release pair, µs (mean of {PAIRS}, one connection):");
    println!("  today's exclusive lease (RedisLeases)  {today:7.1}");
    let kinds = [
        (
            "family, exclusive, unfair",
            RwLease::read_write(),
            LockMode::Exclusive,
        ),
        (
            "family, exclusive, fair",
            RwLease::read_write().fair(),
            LockMode::Exclusive,
        ),
        (
            "family, shared, unfair",
            RwLease::read_write(),
            LockMode::Shared,
        ),
        (
            "family, shared, fair",
            RwLease::read_write().fair(),
            LockMode::Shared,
        ),
    ];
    for (name, lease, mode) in kinds {
        let lock = RedisRwLock::new(lease);
        let key = format!("pair-{name}");
        let cost = pairs(|| {
            let r = request(&key, "a");
            assert!(lock
                .acquire(&mut con, &r, mode, None)
                .unwrap()
                .answer
                .grant
                .is_some());
            lock.change(&mut con, &r, HeldChange::Release).unwrap();
        });
        println!("  {name:<38} {cost:7.1}  ({:.2}x today)", cost / today);
    }
    println!("handoff, release until the waiter's grant, µs (median, p99):");
    let (median, p99) = polled_handoffs(&server);
    println!("  today's lease retried every 100 ms     {median:9.1} {p99:9.1}  ({POLLED_HANDOFFS} handoffs)");
    for (name, lease, mode) in [
        (
            "family, exclusive, unfair (BLPOP)",
            RwLease::read_write(),
            LockMode::Exclusive,
        ),
        (
            "family, exclusive, fair (BLPOP)",
            RwLease::read_write().fair(),
            LockMode::Exclusive,
        ),
        (
            "family, shared, fair (BLPOP)",
            RwLease::read_write().fair(),
            LockMode::Shared,
        ),
    ] {
        let (median, p99) = family_handoffs(&server, lease, mode);
        println!("  {name:<38} {median:9.1} {p99:9.1}  ({HANDOFFS} handoffs)");
    }
}
