//! Watchdogs on a real server: a watched lease outlives its ttl while its guard lives, is
//! released when the guard drops, and reports its loss when a renewal finds it gone.

mod common;

use std::thread::sleep;
use std::time::Duration;

use sluicegate_core::{Concurrency, LeaseRequest, MILLISECOND};
use sluicegate_redis::{connect_async, Reconnecting, RedisLeases, DEFAULT_TIMEOUT};

use common::Server;

const TTL: u64 = 150 * MILLISECOND;

#[test]
fn a_watched_lease_is_renewed_released_on_drop_and_reports_its_loss() {
    let server = Server::start();
    let mut con = server.connection();
    let lock = RedisLeases::new(Concurrency::lock());
    let watched = Reconnecting::new(server.client());
    let guard = lock
        .acquire_watched(watched, &LeaseRequest::new(b"k").owner(b"a").ttl(TTL))
        .unwrap()
        .unwrap();
    // Four ttls later it is still held: renewed.
    for _ in 0..6 {
        sleep(Duration::from_millis(100));
        assert!(
            !lock
                .acquire(&mut con, &LeaseRequest::new(b"k").owner(b"b").ttl(TTL))
                .unwrap()
                .decision
                .allowed
        );
        assert!(!guard.is_lost());
    }
    let token = guard.held().token;
    drop(guard);
    // Released at once, not after the ttl.
    let next = lock
        .acquire(&mut con, &LeaseRequest::new(b"k").owner(b"b").ttl(TTL))
        .unwrap()
        .grant
        .unwrap();
    assert!(next.token > token);
    let _ = lock
        .release(&mut con, &LeaseRequest::new(b"k").owner(b"b"))
        .unwrap();

    let guard = lock
        .acquire_watched(
            Reconnecting::new(server.client()),
            &LeaseRequest::new(b"k").owner(b"a").ttl(TTL),
        )
        .unwrap()
        .unwrap();
    let () = redis::cmd("DEL").arg("k").query(&mut con).unwrap();
    sleep(Duration::from_millis(80));
    assert!(guard.is_lost(), "a renewal at ttl/3 found the lease gone");
    // Denied: no guard.
    let _held = lock
        .acquire(&mut con, &LeaseRequest::new(b"k").owner(b"c").ttl(TTL))
        .unwrap()
        .grant
        .unwrap();
    let denied = lock.acquire_watched(
        Reconnecting::new(server.client()),
        &LeaseRequest::new(b"k").owner(b"a").ttl(TTL),
    );
    assert!(denied.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_watched_lease_is_renewed_released_on_drop_and_its_loss_awaited() {
    let server = Server::start();
    let mut con = connect_async(server.client(), DEFAULT_TIMEOUT).unwrap();
    let lock = RedisLeases::new(Concurrency::lock());
    let guard = lock
        .acquire_watched_async(con.clone(), &LeaseRequest::new(b"k").owner(b"a").ttl(TTL))
        .await
        .unwrap()
        .unwrap();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let other = lock
            .acquire_async(&mut con, &LeaseRequest::new(b"k").owner(b"b").ttl(TTL))
            .await
            .unwrap();
        assert!(!other.decision.allowed);
    }
    drop(guard);
    // The task releases: within a few milliseconds.
    let mut granted = None;
    for _ in 0..50 {
        granted = lock
            .acquire_async(&mut con, &LeaseRequest::new(b"k").owner(b"b").ttl(TTL))
            .await
            .unwrap()
            .grant;
        if granted.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(granted.is_some(), "released when the guard dropped");
    let _ = lock
        .release_async(&mut con, &LeaseRequest::new(b"k").owner(b"b"))
        .await
        .unwrap();

    let guard = lock
        .acquire_watched_async(con.clone(), &LeaseRequest::new(b"k").owner(b"a").ttl(TTL))
        .await
        .unwrap()
        .unwrap();
    let () = redis::cmd("DEL")
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_millis(200), guard.lost())
        .await
        .expect("the loss is reported within a renewal period");
    assert!(guard.is_lost());
}
