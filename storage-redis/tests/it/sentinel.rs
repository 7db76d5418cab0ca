//! `redis+sentinel://`: decisions through a Sentinel-managed primary, against real
//! processes on loopback (a primary, a replica, three sentinels): the primary killed under
//! load, the replica promoted, decisions continuing on it; and never an answer from a
//! replica.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::ConnectionLike;
use sluicegate_core::rwlock::{LockMode, RwLease};
use sluicegate_core::{Concurrency, Decision, LeaseRequest, TokenBucket, SECOND};
use sluicegate_redis::fleet::{FleetConfig, FleetLimiter, FleetMode};
use sluicegate_redis::{
    Error, Outcome, Reconnecting, ReconnectingAsync, RedisLeases, RedisLimiter, RedisRwLock,
    DEFAULT_TIMEOUT,
};

use crate::common::sentinel::{Sentinels, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS};
use crate::common::{self, Server};

/// The bucket's size, refilled one token an hour: what the state says was taken can be
/// compared with what was admitted.
const CAPACITY: u64 = 100_000;

fn limiter() -> RedisLimiter<TokenBucket> {
    RedisLimiter::new(TokenBucket::new(CAPACITY, 1, 3600 * SECOND).unwrap()).unwrap()
}

/// What deciding through a failover showed.
struct Failover {
    /// From the first failed decision to the first that succeeded after it.
    window: Duration,
    /// Admissions the state on the new primary does not count (writes the old primary
    /// acknowledged and never replicated).
    lost: u64,
    decisions: u64,
}

/// Decides continuously (pausing 2 ms after a failure only), kills the primary, and
/// decides on until 200 decisions succeeded after the first failure; every failure must
/// be [`Error::Unavailable`], and none may follow the recovery.
fn through_failover(
    set: &mut Sentinels,
    mut decide: impl FnMut() -> Result<Decision, Error>,
) -> Failover {
    let mut admitted = 0;
    let mut decisions = 0;
    let mut last = None;
    let mut count = |decision: Decision, last: &mut Option<Decision>| {
        admitted += u64::from(decision.allowed);
        decisions += 1;
        *last = Some(decision);
    };
    for _ in 0..200 {
        count(decide().expect("a decision before the failover"), &mut last);
    }
    set.primary.kill();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut failed, mut recovered, mut after) = (None, None, 0);
    while after < 200 {
        assert!(Instant::now() < deadline, "no failover within 60 s");
        match decide() {
            Ok(decision) => {
                count(decision, &mut last);
                if failed.is_some() {
                    recovered.get_or_insert_with(Instant::now);
                    after += 1;
                }
            }
            Err(e) => {
                assert!(e.is_unavailable(), "{e}");
                assert!(recovered.is_none(), "a failure after the recovery: {e}");
                failed.get_or_insert_with(Instant::now);
                sleep(Duration::from_millis(2));
            }
        }
    }
    // The sentinels promoted the replica, and it says it is the primary.
    assert_eq!(set.primary_port(), Some(set.replica.port));
    let role: Vec<redis::Value> = redis::cmd("ROLE")
        .query(&mut set.replica.connection())
        .unwrap();
    assert_eq!(role[0], redis::Value::BulkString(b"master".to_vec()));
    let taken = CAPACITY - last.expect("decisions").remaining;
    Failover {
        window: recovered.unwrap() - failed.unwrap(),
        lost: admitted - taken,
        decisions,
    }
}

fn report(path: &str, failover: &Failover) {
    println!(
        "{path}: unavailable for {} ms across the failover (down-after {DOWN_AFTER_MS} ms, \
         failover-timeout {FAILOVER_TIMEOUT_MS} ms); {} admissions lost with the old \
         primary, of {} decisions",
        failover.window.as_millis(),
        failover.lost,
        failover.decisions
    );
    assert!(
        failover.window < Duration::from_secs(30),
        "window {:?}",
        failover.window
    );
}

#[test]
fn decisions_continue_on_the_promoted_replica() {
    let mut set = Sentinels::start();
    let limiter = limiter();
    let mut con = Reconnecting::open(&set.url(), None).unwrap();
    let failover = through_failover(&mut set, || limiter.check(&mut con, b"k", 1));
    report("sync", &failover);
    // Leases and locks take the same connection: a lock on the new primary.
    let lock = RedisLeases::new(Concurrency::lock());
    let request = LeaseRequest::new(b"lock").owner(b"a").ttl(SECOND);
    let grant = lock.acquire(&mut con, &request).unwrap().grant;
    assert!(grant.is_some(), "the lock is free on the new primary");
    // So does the lock family: two readers share, a writer waits behind them.
    let rw = RedisRwLock::new(RwLease::read_write().fair());
    for owner in [b"r1", b"r2"] {
        let reader = LeaseRequest::new(b"rw").owner(owner).ttl(10 * SECOND);
        let shared = rw
            .acquire(&mut con, &reader, LockMode::Shared, None)
            .unwrap();
        assert!(shared.answer.grant.is_some(), "{shared:?}");
    }
    let writer = LeaseRequest::new(b"rw").owner(b"w").ttl(10 * SECOND);
    let queued = rw.acquire(&mut con, &writer, LockMode::Exclusive, Some(10 * SECOND));
    let place = queued.unwrap().answer.place.expect("the writer queued");
    assert_eq!(place.ahead, 0);
}

#[test]
fn async_decisions_continue_on_the_promoted_replica() {
    let mut set = Sentinels::start();
    let runtime = runtime();
    let limiter = limiter();
    let mut con = runtime
        .block_on(async { ReconnectingAsync::open(&set.url(), None, DEFAULT_TIMEOUT) })
        .unwrap();
    let failover = through_failover(&mut set, || {
        runtime.block_on(limiter.check_async(&mut con, b"k", 1))
    });
    report("async", &failover);
}

#[test]
fn a_fleet_node_continues_on_the_promoted_replica() {
    let mut set = Sentinels::start();
    let config = FleetConfig {
        max_batch: 50,
        ..FleetConfig::new(FleetMode::Prefetch)
    };
    let fleet = FleetLimiter::new(limiter(), b"shared", config).unwrap();
    let mut con = Reconnecting::open(&set.url(), None).unwrap();
    let check = |con: &mut Reconnecting| match fleet.check(con, 1) {
        Ok(Outcome::Decided(decision)) => Ok(decision),
        Ok(other) => panic!("a fleet under the default fail policy decided {other:?}"),
        // The default fail policy returns the error while Redis is away.
        Err(e) => Err(e),
    };
    for _ in 0..200 {
        assert!(check(&mut con).unwrap().allowed);
    }
    set.primary.kill();
    // Prefetched units go on being spent while Redis is away; once they run out the
    // node says unavailable, then decides again on the new primary.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut failed, mut recovered, mut after) = (None, None, 0);
    while after < 200 {
        assert!(Instant::now() < deadline, "no failover within 60 s");
        match check(&mut con) {
            Ok(decision) => {
                assert!(decision.allowed, "{decision:?}");
                if failed.is_some() {
                    recovered.get_or_insert_with(Instant::now);
                    after += 1;
                }
            }
            Err(e) => {
                assert!(e.is_unavailable(), "{e}");
                assert!(after == 0, "a failure after the recovery: {e}");
                failed.get_or_insert_with(Instant::now);
                sleep(Duration::from_millis(2));
            }
        }
        let _ = fleet.tick(&mut con);
    }
    assert_eq!(set.primary_port(), Some(set.replica.port));
    println!(
        "fleet: unavailable for {} ms across the failover",
        (recovered.unwrap() - failed.unwrap()).as_millis()
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A decision on `con` fails as unavailable, saying `why`, and leaves no connection open.
fn assert_refused(con: &mut Reconnecting, why: &str) {
    let refused = limiter().check(con, b"k", 1).unwrap_err();
    assert!(refused.is_unavailable(), "{refused}");
    assert!(refused.to_string().contains(why), "{refused}");
    assert!(!con.is_open());
}

/// A fake sentinel on a loopback port that names `port` as the primary to every
/// connection, for `answers` connections.
fn fake_sentinel(port: u16, answers: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let own = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(answers) {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0; 512];
            let _ = stream.read(&mut request);
            let port = port.to_string();
            let reply = format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.len());
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    own
}

#[test]
fn a_replica_named_as_primary_is_refused() {
    let primary = Server::start();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let sentinel = fake_sentinel(replica.port, 2);
    let url = format!("redis+sentinel://127.0.0.1:{sentinel}/main");
    let limiter = limiter();
    assert_refused(
        &mut Reconnecting::open(&url, None).unwrap(),
        "is not a primary",
    );
    // The asynchronous connection checks the same way.
    let runtime = runtime();
    let mut con = ReconnectingAsync::open(&url, None, DEFAULT_TIMEOUT).unwrap();
    let refused = runtime
        .block_on(limiter.check_async(&mut con, b"k", 1))
        .unwrap_err();
    assert!(
        refused.to_string().contains("is not a primary"),
        "{refused}"
    );
}

#[test]
fn a_primary_demoted_under_an_open_connection_is_left() {
    let primary = Server::start();
    let other = Server::start();
    let limiter = limiter();
    let mut con = Reconnecting::new(primary.client());
    assert!(limiter.check(&mut con, b"k", 1).unwrap().allowed);
    // Demoted without closing its clients' connections: the next write is refused
    // with READONLY, which counts as unavailable and drops the connection, so the next
    // request connects again (over Sentinel: finds the primary again).
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(other.port)
        .query::<()>(&mut primary.connection())
        .unwrap();
    assert_refused(&mut con, "read only replica");
}

#[test]
fn no_sentinel_answering_is_unavailable_naming_each() {
    let closed = common::free_port();
    let url = format!("redis+sentinel://127.0.0.1:{closed},127.0.0.1:{closed}/main");
    assert_refused(
        &mut Reconnecting::open(&url, None).unwrap(),
        "no sentinel named",
    );
    let bad = Reconnecting::open("redis+sentinel://h:x/main", None).unwrap_err();
    assert!(matches!(bad, Error::SentinelUrl(_)), "{bad}");
}
