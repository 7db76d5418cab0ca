//! States moved out of Redis and in whole (`remove_state`, `seed_state`): how a host
//! carries each key's use to a limiter with new parameters.

use sluicegate_core::{AnyAlgorithm, AnyState, Clock, SystemClock};

use super::*;

const MINUTE: Ticks = 60 * SECOND;

fn any(algorithm: impl Into<AnyAlgorithm>) -> RedisLimiter<AnyAlgorithm> {
    RedisLimiter::new(algorithm.into()).unwrap()
}

fn two_windows(limit: u64) -> RedisLimiter<AnyAlgorithm> {
    let window = AnyAlgorithm::from(FixedWindow::new(limit, MINUTE).unwrap());
    any(Composite::new(vec![window; 2]).unwrap())
}

fn exists(con: &mut impl ConnectionLike, keys: &[Vec<u8>]) -> u64 {
    redis::cmd("EXISTS").arg(keys).query(con).unwrap()
}

/// The service's move on a key's first decision after a change, at the server's time:
/// out of the old limiter, carried, into the new one; 1 of 3 used, raised to 5: 4 more.
#[test]
fn a_carried_key_has_the_rest_of_the_new_limit() {
    let server = Server::start();
    let mut con = server.connection();
    for (old, new) in [
        (
            any(FixedWindow::new(3, MINUTE).unwrap()),
            any(FixedWindow::new(5, MINUTE).unwrap()),
        ),
        (
            any(TokenBucket::new(3, 3, MINUTE).unwrap()),
            any(TokenBucket::new(5, 5, MINUTE).unwrap()),
        ),
        (two_windows(3), two_windows(5)),
    ] {
        assert!(old.check(&mut con, b"k", 1).unwrap().allowed);
        let (state, now) = old.remove_state(&mut con, b"k", None).unwrap().unwrap();
        let clock = SystemClock.now();
        assert!(
            now.abs_diff(clock) < 10 * SECOND,
            "{now} is the server's time"
        );
        assert_eq!(exists(&mut con, &old.redis_keys(b"k").unwrap()), 0);
        let carried = new
            .algorithm()
            .carry_from(old.algorithm(), &state, now)
            .unwrap();
        assert!(new.seed_state(&mut con, b"k", &carried, None).unwrap());
        let admitted = (0..10)
            .filter(|_| new.check(&mut con, b"k", 1).unwrap().allowed)
            .count();
        assert_eq!(admitted, 4, "{:?}", new.algorithm());
        new.reset(&mut con, b"k").unwrap();
    }
}

/// The state removed is the one stored, every key of a composite at once; a key
/// holding none gives none.
#[test]
fn remove_returns_the_stored_state_and_deletes_it() {
    let server = Server::start();
    let mut con = server.connection();
    let limiter = any(Composite::new(vec![
        FixedWindow::new(3, MINUTE).unwrap().into(),
        AnyAlgorithm::from(TokenBucket::new(3, 3, MINUTE).unwrap()),
    ])
    .unwrap());
    let request = Request::new(b"k").cost(2).at(NOW);
    assert!(limiter.check_request(&mut con, &request).unwrap().allowed);
    let (_, expected) = limiter.algorithm().decide(None, NOW, 2);
    let removed = limiter.remove_state(&mut con, b"k", Some(NOW + 1)).unwrap();
    assert_eq!(removed, Some((expected.unwrap(), NOW + 1)));
    assert_eq!(exists(&mut con, &limiter.redis_keys(b"k").unwrap()), 0);
    assert_eq!(
        limiter.remove_state(&mut con, b"k", Some(NOW)).unwrap(),
        None
    );
}

/// A key holding another type is refused, nothing deleted.
#[test]
fn remove_refuses_a_foreign_key() {
    let server = Server::start();
    let mut con = server.connection();
    let limiter = any(FixedWindow::new(3, MINUTE).unwrap());
    redis::cmd("RPUSH")
        .arg("k")
        .arg("x")
        .exec(&mut con)
        .unwrap();
    let refused = limiter.remove_state(&mut con, b"k", None);
    assert!(matches!(refused, Err(Error::Foreign { .. })), "{refused:?}");
    assert_eq!(exists(&mut con, &[b"k".to_vec()]), 1);
}

/// A seed stores the core's bytes with the expiry a decision gives the state (none at
/// an explicit time), only where no key of it exists.
#[test]
fn a_seed_stores_the_cores_bytes_where_the_key_holds_none() {
    let server = Server::start();
    let mut con = server.connection();
    let limiter = any(FixedWindow::new(5, MINUTE).unwrap());
    let (_, state) = limiter.algorithm().decide(None, NOW, 2);
    let state = state.unwrap();
    assert!(limiter
        .seed_state(&mut con, b"at", &state, Some(NOW))
        .unwrap());
    let stored: Vec<u8> = redis::cmd("GET").arg("at").query(&mut con).unwrap();
    assert_eq!(stored, limiter.algorithm().encode_to_vec(&state));
    assert_eq!(pttl(&mut con, b"at"), -1);
    // Held: kept as it is.
    let (_, more) = limiter.algorithm().decide(None, NOW, 5);
    assert!(!limiter
        .seed_state(&mut con, b"at", &more.unwrap(), Some(NOW))
        .unwrap());
    assert_eq!(
        limiter
            .peek(&mut con, &Request::new(b"at").cost(0).at(NOW))
            .unwrap()
            .remaining,
        3
    );
    // At the server's time: it expires with its window.
    let now = SystemClock.now();
    let (_, state) = limiter.algorithm().decide(None, now, 1);
    assert!(limiter
        .seed_state(&mut con, b"live", &state.unwrap(), None)
        .unwrap());
    let ttl = pttl(&mut con, b"live");
    let window_left = MINUTE - now % MINUTE;
    assert!(
        (1..=i64::try_from(window_left.div_ceil(1000)).unwrap()).contains(&ttl),
        "{ttl}"
    );
    // Fresh by then: nothing stored.
    let (_, old) = limiter.algorithm().decide(None, NOW - MINUTE, 1);
    assert!(limiter
        .seed_state(&mut con, b"old", &old.unwrap(), Some(NOW))
        .unwrap());
    assert_eq!(exists(&mut con, &[b"old".to_vec()]), 0);
}

/// A composite is seeded whole or not at all: one member's key held keeps every one.
#[test]
fn a_composite_is_seeded_whole() {
    let server = Server::start();
    let mut con = server.connection();
    let window = || AnyAlgorithm::from(FixedWindow::new(5, MINUTE).unwrap());
    let limiter = any(Composite::new(vec![window(), window()]).unwrap());
    let keys = limiter.redis_keys(b"k").unwrap();
    let (_, state) = limiter.algorithm().decide(None, NOW, 2);
    let state = state.unwrap();
    redis::cmd("SET")
        .arg(&keys[1])
        .arg("x")
        .exec(&mut con)
        .unwrap();
    assert!(!limiter
        .seed_state(&mut con, b"k", &state, Some(NOW))
        .unwrap());
    assert_eq!(exists(&mut con, &keys[..1]), 0);
    redis::cmd("DEL").arg(&keys[1]).exec(&mut con).unwrap();
    assert!(limiter
        .seed_state(&mut con, b"k", &state, Some(NOW))
        .unwrap());
    let AnyState::Composite(members) = &state else {
        panic!("a composite's state");
    };
    for (key, member) in keys.iter().zip(members) {
        let stored: Vec<u8> = redis::cmd("GET").arg(key).query(&mut con).unwrap();
        assert_eq!(stored, window().encode_to_vec(member.as_ref().unwrap()));
    }
}

#[tokio::test]
async fn the_async_calls_move_states_as_the_sync_ones() {
    let server = Server::start();
    let mut con = common::connect_multiplexed(&server).await;
    let limiter = any(TokenBucket::new(3, 3, MINUTE).unwrap());
    let (_, state) = limiter.algorithm().decide(None, NOW, 2);
    let state = state.unwrap();
    let seeded = limiter.seed_state_async(&mut con, b"k", &state, Some(NOW));
    assert!(seeded.await.unwrap());
    let removed = limiter.remove_state_async(&mut con, b"k", Some(NOW)).await;
    assert_eq!(removed.unwrap(), Some((state, NOW)));
}
