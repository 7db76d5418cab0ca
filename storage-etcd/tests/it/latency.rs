//! The figures in docs/etcd.md: acquire and release latency of the etcd lock on
//! loopback, and how soon a waiter wakes after a release. Ignored by default (a
//! measurement, not a check):
//! `cargo test -p sluicegate-etcd --test it latency:: -- --ignored --nocapture`.

use std::time::{Duration, Instant};

use sluicegate_core::{AsyncLeaseHost, Concurrency, LeaseRequest, SECOND};
use sluicegate_etcd::EtcdLeases;
use sluicegate_test_support::etcd::Etcd;

const ROUNDS: usize = 500;

/// The median and the 99th percentile of `samples`.
fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let at = |percent: usize| samples[(samples.len() - 1) * percent / 100];
    format!("p50 {:?}, p99 {:?}", at(50), at(99))
}

#[tokio::test]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn acquire_release_and_wake_latency_on_loopback() {
    let etcd = Etcd::start();
    let lock = EtcdLeases::connect(&[etcd.endpoint()], Concurrency::lock())
        .await
        .unwrap();
    let request = LeaseRequest::new("bench").owner("a").ttl(10 * SECOND);
    let (mut acquires, mut releases) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let started = Instant::now();
        assert!(lock.acquire(&request).await.unwrap().grant.is_some());
        acquires.push(started.elapsed());
        let started = Instant::now();
        assert_eq!(lock.release(&request).await.unwrap().holds, 0);
        releases.push(started.elapsed());
    }
    let mut wakes = Vec::new();
    let waiting = LeaseRequest::new("bench").owner("b").ttl(10 * SECOND);
    for _ in 0..50 {
        let _ = lock.acquire(&request).await.unwrap().grant.unwrap();
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                let acquired = lock.acquire_waiting(&waiting, Duration::from_secs(5)).await;
                (acquired.unwrap().grant.is_some(), Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released = Instant::now();
        let _ = lock.release(&request).await.unwrap();
        let (granted, woke) = waiter.await.unwrap();
        assert!(granted);
        wakes.push(woke - released);
        let _ = lock.release(&waiting).await.unwrap();
    }
    println!("acquire: {}", summary(acquires));
    println!("release: {}", summary(releases));
    println!("waiter granted after the release: {}", summary(wakes));
}
