//! What the lock family costs on one local etcd it starts: acquire/release pairs and the
//! handoff (a release until the next holder's grant returns), exclusive and shared,
//! beside today's exclusive etcd lease (`EtcdLeases`, whose waiter watches every slot).
//!
//! `cargo run --release -p sluicegate-etcd --example lock_handoff`

use std::time::{Duration, Instant};

use sluicegate_core::rwlock::LockMode;
use sluicegate_core::{AsyncLeaseHost, Concurrency, LeaseRequest, SECOND};
use sluicegate_etcd::{EtcdLeases, EtcdRwLock};
use sluicegate_test_support::etcd::Etcd;

const PAIRS: u32 = 300;
const HANDOFFS: usize = 100;

/// `owner` asking for `key` for a minute.
fn request<'a>(key: &'a str, owner: &'a str) -> LeaseRequest<'a> {
    LeaseRequest::new(key).owner(owner).ttl(60 * SECOND)
}

/// Microseconds per acquire/release pair of `pair`.
async fn pairs<F: std::future::Future<Output = ()>>(mut pair: impl FnMut() -> F) -> f64 {
    for _ in 0..30 {
        pair().await;
    }
    let start = Instant::now();
    for _ in 0..PAIRS {
        pair().await;
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(PAIRS)
}

fn median_p99(mut waits: Vec<Duration>) -> (f64, f64) {
    waits.sort();
    let at = |per_mille: usize| waits[(waits.len() - 1) * per_mille / 1000].as_secs_f64() * 1e6;
    (at(500), at(990))
}

/// Handoffs on the family: this task holds in `held` mode, a waiter task blocks in
/// `acquire` in `mode`, and the time from the release's start to the waiter's grant is
/// measured.
async fn family_handoffs(lock: &EtcdRwLock, (held, mode): (LockMode, LockMode)) -> (f64, f64) {
    let key = format!("handoff-{held:?}-{mode:?}-{}", lock.lease().max_holders());
    let mut waits = Vec::with_capacity(HANDOFFS);
    for _ in 0..HANDOFFS {
        let holder = request(&key, "holder");
        let taken = lock.try_acquire(&holder, held).await.unwrap();
        assert!(taken.grant.is_some());
        let waiter = {
            let (lock, key) = (lock.clone(), key.clone());
            tokio::spawn(async move {
                let owner = request(&key, "waiter");
                let got = lock.acquire(&owner, mode, Duration::from_secs(10)).await;
                let at = Instant::now();
                assert!(got.unwrap().grant.is_some());
                assert_eq!(lock.release(&owner).await.unwrap().holds, 0);
                at
            })
        };
        while (lock.state(key.as_bytes()).await.unwrap()).is_none_or(|s| s.waiters().is_empty()) {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let released = Instant::now();
        assert_eq!(lock.release(&holder).await.unwrap().holds, 0);
        waits.push(waiter.await.unwrap() - released);
    }
    median_p99(waits)
}

/// Today's handoff: the waiter watches every slot of the key (`acquire_waiting`).
async fn lease_handoffs(leases: &EtcdLeases) -> (f64, f64) {
    let key = "handoff-today";
    let mut waits = Vec::with_capacity(HANDOFFS);
    for _ in 0..HANDOFFS {
        let holder = request(key, "holder");
        assert!(leases.acquire(&holder).await.unwrap().grant.is_some());
        let waiter = {
            let leases = leases.clone();
            tokio::spawn(async move {
                let owner = request(key, "waiter");
                let got = leases
                    .acquire_waiting(&owner, Duration::from_secs(10))
                    .await;
                let at = Instant::now();
                assert!(got.unwrap().grant.is_some());
                assert_eq!(leases.release(&owner).await.unwrap().holds, 0);
                at
            })
        };
        // The waiter has asked and is watching by then (its denial is one read away).
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released = Instant::now();
        assert_eq!(leases.release(&holder).await.unwrap().holds, 0);
        waits.push(waiter.await.unwrap() - released);
    }
    median_p99(waits)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let etcd = Etcd::start();
    let leases = EtcdLeases::connect(&[etcd.endpoint()], Concurrency::lock())
        .await
        .unwrap();
    let lock = EtcdRwLock::connect(&[etcd.endpoint()]).await.unwrap();
    let today = pairs(|| async {
        let r = request("pair-today", "a");
        assert!(leases.acquire(&r).await.unwrap().grant.is_some());
        assert_eq!(leases.release(&r).await.unwrap().holds, 0);
    })
    .await;
    println!("acquire/release pair, µs (mean of {PAIRS}, one client, loopback):");
    println!("  today's exclusive lease (EtcdLeases)  {today:8.1}");
    for (name, mode) in [
        ("family, exclusive (fair)", LockMode::Exclusive),
        ("family, shared (fair)", LockMode::Shared),
    ] {
        let lock = &lock;
        let cost = pairs(|| async move {
            let r = request("pair-family", "a");
            assert!(lock.try_acquire(&r, mode).await.unwrap().grant.is_some());
            assert_eq!(lock.release(&r).await.unwrap().holds, 0);
        })
        .await;
        println!("  {name:<37} {cost:8.1} ({:.2}x today)", cost / today);
    }
    println!("handoff, release start → the waiter's grant, µs (median / p99 of {HANDOFFS}):");
    let (median, p99) = lease_handoffs(&leases).await;
    println!("  today's exclusive lease, watching every slot  {median:8.0} / {p99:8.0}");
    let (x, s) = (LockMode::Exclusive, LockMode::Shared);
    let one = lock.clone().counted(Concurrency::lock());
    for (name, lock, modes) in [
        ("family, exclusive (fair)", &lock, (x, x)),
        ("family, shared behind a writer (fair)", &lock, (x, s)),
        ("family, counted of 1, shared (fair)", &one, (s, s)),
    ] {
        let (median, p99) = family_handoffs(lock, modes).await;
        println!("  {name:<45} {median:8.0} / {p99:8.0}");
    }
}
