//! Watchdogs on a real server: a watched lease outlives its ttl while its guard lives, is
//! released when the guard drops (a drop not waiting on a Redis that does not answer),
//! reports its loss when a renewal finds it gone or Redis stops answering for its ttl,
//! and is not released once lost.

use std::thread::sleep;
use std::time::{Duration, Instant};

use sluicegate_core::{clock::ticks, Concurrency, Grant, LeaseRequest, MILLISECOND};
use sluicegate_redis::{connect_async, Reconnecting, RedisLeases, DEFAULT_TIMEOUT};

use crate::common::Server;

/// Renewed every 1.33 s: a renewal may be 2.6 s late on a loaded machine and still land
/// before the lease ends.
const TTL: u64 = 4000 * MILLISECOND;
/// Steps of 250 ms past the ttl (5 s): the lease outlives it only if renewed.
const PAST_TTL: u32 = 20;
/// How long a release on drop is polled for: under the 2.67 s the lease holds at least
/// after the drop (a ttl after the last renewal), so expiry does not pass for a release.
const RELEASED: Duration = Duration::from_secs(2);
/// How long a loss or a release may take to be seen on a loaded machine: bounded polls,
/// where one never seen takes forever.
const SEEN: Duration = Duration::from_secs(5);

/// The outage tests' ttl, their renewal period, and a pause well under the ttl (700 ms
/// under what a loss needs: room for a late resume).
const OUTAGE_TTL: Duration = Duration::from_millis(1200);
const PERIOD: Duration = Duration::from_millis(400);
const BLIP: Duration = Duration::from_millis(100);
/// How late past the ttl and a period a loss may be seen on a loaded machine.
const SLACK: Duration = Duration::from_secs(2);
/// Longer than any outage: a renewal sent while Redis is stopped hangs until it resumes.
const HANG: Duration = Duration::from_secs(10);
/// A ttl longer than the drop test's outage: the lease is not lost meanwhile.
const LONG_TTL: Duration = Duration::from_secs(4);

fn outage_request(owner: &str) -> LeaseRequest<'_> {
    LeaseRequest::new(b"k")
        .owner(owner.as_bytes())
        .ttl(ticks(OUTAGE_TTL))
}

/// A ttl of renewals, Redis stopped for `BLIP`, and another ttl.
fn blip(server: &Server) {
    sleep(OUTAGE_TTL);
    server.pause();
    sleep(BLIP);
    server.resume();
    sleep(OUTAGE_TTL);
}

/// Redis stopped until `lost` says the guard is lost (or gives up), and kept stopped until
/// the lease's ttl has passed by Redis's clock too: how long the loss took to be seen,
/// while Redis was stopped.
fn stop_until_lost(server: &Server, lost: impl FnOnce() -> bool) -> Option<Duration> {
    // Before the signal: `kill` may return well after the stop.
    let stopping = Instant::now();
    server.pause();
    let stopped = Instant::now();
    let seen = lost().then(|| stopping.elapsed());
    // Redis counts the ttl from its last renewal, before the stop.
    sleep((OUTAGE_TTL + PERIOD).saturating_sub(stopped.elapsed()));
    server.resume();
    if let Some(waited) = seen {
        println!("lost {waited:?} after Redis stopped");
        // Counted from the last answered renewal, at most a period before the stop, and
        // that one may have been late on a loaded machine: a loss reported at once fails.
        assert!(waited >= OUTAGE_TTL / 4, "lost {waited:?} after the stop");
    }
    seen
}

/// After a loss, Redis has expired the lease: its owner acquiring again (for long) gets a
/// new one.
fn acquired_again(lock: &RedisLeases, con: &mut redis::Connection, lost: Grant) -> Grant {
    let again = lock
        .acquire(con, &outage_request("a").ttl(ticks(HANG)))
        .unwrap()
        .grant
        .unwrap();
    assert!(again.token > lost.token, "expired, not held twice");
    again
}

/// Whether `grant` is what the key holds.
fn holds(lock: &RedisLeases, con: &mut redis::Connection, grant: Grant) -> bool {
    let state = lock.state(con, b"k").unwrap().unwrap();
    state
        .leases()
        .iter()
        .any(|lease| lease.token() == grant.token)
}

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
    // Past its ttl it is still held: renewed.
    for _ in 0..PAST_TTL {
        sleep(Duration::from_millis(250));
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
    // Released by the guard's thread (the drop waits for it only 50 ms), not after the ttl.
    let dropped = Instant::now();
    let next = loop {
        let granted = lock
            .acquire(&mut con, &LeaseRequest::new(b"k").owner(b"b").ttl(TTL))
            .unwrap()
            .grant;
        if let Some(next) = granted {
            break next;
        }
        assert!(
            dropped.elapsed() < RELEASED,
            "released when the guard dropped"
        );
        sleep(Duration::from_millis(2));
    };
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
    let deleted = Instant::now();
    while !guard.is_lost() && deleted.elapsed() < SEEN {
        sleep(Duration::from_millis(2));
    }
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
    for _ in 0..PAST_TTL {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let other = lock
            .acquire_async(&mut con, &LeaseRequest::new(b"k").owner(b"b").ttl(TTL))
            .await
            .unwrap();
        assert!(!other.decision.allowed);
    }
    drop(guard);
    // The task releases: polled for up to 2 s, before the lease could end on its own.
    let dropped = Instant::now();
    let mut granted = None;
    while dropped.elapsed() < RELEASED {
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
    tokio::time::timeout(SEEN, guard.lost())
        .await
        .expect("the loss is reported");
    assert!(guard.is_lost());
}

/// Redis stopped (SIGSTOP) under a watched lease while renewals hang: a pause well under
/// the ttl loses nothing; a longer one makes the guard lost within the ttl and a renewal
/// period, while Redis is still stopped. Resumed, it stays lost, and dropped, it releases
/// nothing (not the lease its owner acquired again since).
#[test]
fn a_watched_lease_is_lost_while_redis_is_stopped_past_its_ttl() {
    let server = Server::start();
    let mut con = server.connection();
    let lock = RedisLeases::new(Concurrency::lock());
    let hanging = Reconnecting::new(server.client()).with_timeout(HANG);
    let guard = (lock.acquire_watched(hanging, &outage_request("a")).unwrap()).unwrap();
    blip(&server);
    assert!(!guard.is_lost(), "a pause well under the ttl loses nothing");
    let lost = stop_until_lost(&server, || {
        let stopped = Instant::now();
        while stopped.elapsed() < OUTAGE_TTL + PERIOD + SLACK {
            if guard.is_lost() {
                return true;
            }
            sleep(Duration::from_millis(2));
        }
        false
    });
    assert!(
        lost.is_some(),
        "not lost while Redis was stopped past the ttl"
    );
    let again = acquired_again(&lock, &mut con, guard.held());
    sleep(OUTAGE_TTL);
    assert!(guard.is_lost(), "stays lost");
    drop(guard);
    assert!(holds(&lock, &mut con, again));
}

/// [`a_watched_lease_is_lost_while_redis_is_stopped_past_its_ttl`] for the async guard,
/// whose task declares the loss at the deadline while its renewal hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_watched_lease_is_lost_while_redis_is_stopped_past_its_ttl() {
    let server = Server::start();
    let mut con = server.connection();
    let lock = RedisLeases::new(Concurrency::lock());
    let hanging = connect_async(server.client(), HANG).unwrap();
    let guard = (lock
        .acquire_watched_async(hanging, &outage_request("a"))
        .await)
        .unwrap()
        .unwrap();
    let runtime = tokio::runtime::Handle::current();
    let lost = tokio::task::block_in_place(|| {
        blip(&server);
        assert!(!guard.is_lost(), "a pause well under the ttl loses nothing");
        stop_until_lost(&server, || {
            let within = OUTAGE_TTL + PERIOD + SLACK;
            runtime
                .block_on(tokio::time::timeout(within, guard.lost()))
                .is_ok()
        })
    });
    assert!(
        lost.is_some(),
        "not lost while Redis was stopped past the ttl"
    );
    let again = acquired_again(&lock, &mut con, guard.held());
    tokio::time::sleep(OUTAGE_TTL).await;
    assert!(guard.is_lost(), "stays lost");
    drop(guard);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(holds(&lock, &mut con, again));
}

/// A guard dropped while its renewal hangs on a stopped Redis: the drop returns at once,
/// not after the connection's timeout, and its thread releases the lease once Redis
/// answers again, well before the lease's ttl could pass.
#[test]
fn a_guard_dropped_while_redis_hangs_returns_at_once_and_releases_later() {
    let server = Server::start();
    let mut con = server.connection();
    let lock = RedisLeases::new(Concurrency::lock());
    let hanging = Reconnecting::new(server.client()).with_timeout(HANG);
    let long = outage_request("a").ttl(ticks(LONG_TTL));
    let guard = (lock.acquire_watched(hanging, &long).unwrap()).unwrap();
    server.pause();
    // Past the first renewal, at a third of the ttl: it hangs.
    sleep(LONG_TTL / 3 + Duration::from_millis(100));
    let dropping = Instant::now();
    drop(guard);
    let dropped = dropping.elapsed();
    server.resume();
    println!("dropped in {dropped:?}");
    // A fifth of the connection's timeout: the drop's own wait and a loaded machine's delays.
    assert!(dropped < HANG / 5, "the drop waited {dropped:?}");
    let resumed = Instant::now();
    while (lock.acquire(&mut con, &outage_request("b")).unwrap().grant).is_none() {
        // Renewed as Redis resumed: only a release frees it within half the 4 s ttl.
        assert!(resumed.elapsed() < LONG_TTL / 2, "not released");
        sleep(Duration::from_millis(2));
    }
    println!("released {:?} after Redis resumed", resumed.elapsed());
}

/// The runtime's one thread blocked past the async guard's deadline (a paused process)
/// while Redis expires the lease and its owner acquires it again: the drop wakes the task
/// before the runtime's timer has fired the deadline, and the lost guard releases
/// nothing (not the lease its owner acquired again since).
#[tokio::test]
async fn an_async_guard_dropped_past_its_deadline_releases_nothing() {
    let server = Server::start();
    let mut con = server.connection();
    let lock = RedisLeases::new(Concurrency::lock());
    let watched = connect_async(server.client(), DEFAULT_TIMEOUT).unwrap();
    let guard = (lock
        .acquire_watched_async(watched, &outage_request("a"))
        .await)
        .unwrap()
        .unwrap();
    sleep(OUTAGE_TTL + PERIOD);
    let again = acquired_again(&lock, &mut con, guard.held());
    drop(guard);
    // Time for a release: a round trip on loopback.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(holds(&lock, &mut con, again));
}
