//! Keys expire when their state is fresh; states at explicit times never do, and
//! `purge` is their clean-up.

use super::*;

#[test]
fn keys_expire_exactly_when_their_state_is_fresh() {
    let server = Server::start();
    let mut con = server.connection();
    let bucket = RedisLimiter::new(TokenBucket::new(3, 10, SECOND).unwrap()).unwrap();
    let window = RedisLimiter::new(FixedWindow::new(3, 300 * MILLISECOND).unwrap()).unwrap();
    let log = RedisLimiter::new(SlidingLog::new(3, 250 * MILLISECOND).unwrap()).unwrap();
    for _ in 0..3 {
        for key in [b"bucket".as_slice(), b"window", b"log"] {
            let started = Instant::now();
            let decision = match key {
                b"bucket" => bucket.check(&mut con, key, 1),
                b"window" => window.check(&mut con, key, 1),
                _ => log.check(&mut con, key, 1),
            }
            .unwrap();
            let got = pttl(&mut con, key);
            // The TTL runs down while the reply and PTTL travel: allow what passed.
            let passed = i64::try_from(started.elapsed().as_millis()).unwrap() + 1;
            let want = i64::try_from(decision.reset_after.div_ceil(1000)).unwrap();
            assert!(
                (want - passed..=want).contains(&got),
                "PTTL {got} ms, {passed} ms passed, reset_after {decision:?}"
            );
        }
    }
    // Three tokens refill at 10/s: fresh 300 ms later; the others within their periods.
    sleep(Duration::from_millis(320));
    for key in [b"bucket".as_slice(), b"window", b"log"] {
        assert_eq!(
            pttl(&mut con, key),
            -2,
            "{} still there",
            String::from_utf8_lossy(key)
        );
    }
}

/// Issue 16, item 1: a key written at an explicit time does not expire on the server's
/// clock. A window of 1 per millisecond checked at 0, then 200 ms of real time later at
/// 10 µs: still the same window, denied (as in memory and sled).
#[test]
fn explicit_time_state_outlives_real_time() {
    let server = Server::start();
    let mut con = server.connection();
    let limiter = RedisLimiter::new(FixedWindow::new(1, MILLISECOND).unwrap()).unwrap();
    assert!(common::allowed_at(&limiter, &mut con, b"a", 0));
    assert_eq!(pttl(&mut con, b"a"), -1, "no expiry");
    sleep(Duration::from_millis(200));
    let later = limiter
        .check_request(&mut con, &Request::new(b"a").at(10))
        .unwrap();
    assert!(!later.allowed, "{later:?}");
    assert_eq!(later.retry_after, Some(MILLISECOND - 10));
}

/// A trace replayed far slower than its explicit clock (5 ms of real time between steps
/// whose explicit periods are 1 ms) decides exactly as the core, for every algorithm.
#[test]
fn a_slow_replay_decides_as_the_core() {
    let server = Server::start();
    let mut con = server.connection();
    let window = FixedWindow::new(2, MILLISECOND).unwrap();
    let log = SlidingLog::new(2, MILLISECOND).unwrap();
    let bucket = TokenBucket::new(2, 1, MILLISECOND).unwrap();
    let banned = sluicegate_core::Ban::new(window, 1, MILLISECOND, 3 * MILLISECOND).unwrap();
    // (now, cost): bursts within one explicit millisecond, then gaps of a few hundred µs.
    let trace: Vec<(Ticks, u64)> = (0..40u64).map(|i| (i * 150, 1 + i % 2)).collect();
    fn replay<A: LuaAlgorithm>(
        con: &mut redis::Connection,
        alg: A,
        trace: &[(Ticks, u64)],
        slow: bool,
    ) {
        let limiter = RedisLimiter::new(alg).unwrap().with_prefix("slow:");
        let mut state = None;
        for &(now, cost) in trace {
            let (want, next) = limiter.algorithm().decide(state, now, cost);
            state = next;
            assert_eq!(
                limiter
                    .check_request(con, &Request::new(b"k").cost(cost).at(now))
                    .unwrap(),
                want,
                "at {now}"
            );
            if slow {
                sleep(Duration::from_millis(5));
            }
        }
        limiter.reset(con, b"k").unwrap();
    }
    replay(&mut con, window, &trace, true);
    replay(&mut con, log, &trace, true);
    replay(&mut con, bucket, &trace, true);
    replay(&mut con, banned, &trace, true);
    // The trace denies some requests: it tests something.
    let denied = trace
        .iter()
        .scan(None, |s, &(now, cost)| {
            let (d, next) = window.decide(s.take(), now, cost);
            *s = next;
            Some(!d.allowed)
        })
        .filter(|&denied| denied)
        .count();
    assert!(denied > 5, "{denied}");
}

/// `purge` deletes every state of the algorithm under the prefix, in several batches,
/// and leaves everything else: foreign values, other algorithms' states, other prefixes.
#[test]
fn purge_deletes_the_prefix_states_and_nothing_else() {
    let server = Server::start();
    let mut con = server.connection();
    // A prefix with glob characters, which SCAN's pattern must match literally.
    let prefix = "rl*[1]?:";
    let limiter = RedisLimiter::new(FixedWindow::new(5, SECOND).unwrap())
        .unwrap()
        .with_prefix(prefix);
    let keys = sluicegate_redis::PURGE_BATCH * 2 + 17;
    for i in 0..keys {
        let now = NOW + i as u64;
        let _ = limiter
            .check_request(&mut con, &Request::new(format!("u{i}").as_bytes()).at(now))
            .unwrap();
    }
    let _ = limiter.check(&mut con, b"server-time", 1).unwrap();
    let other = RedisLimiter::new(TokenBucket::new(5, 1, SECOND).unwrap())
        .unwrap()
        .with_prefix(prefix);
    assert!(common::allowed_at(&other, &mut con, b"bucket", NOW));
    let keep = [
        format!("{prefix}plain"),
        format!("{prefix}list"),
        format!("{prefix}bucket"),
        "rlx1y:u1".to_owned(),
    ];
    redis::cmd("SET")
        .arg(&keep[0])
        .arg("hello")
        .exec(&mut con)
        .unwrap();
    redis::cmd("LPUSH")
        .arg(&keep[1])
        .arg("x")
        .exec(&mut con)
        .unwrap();
    redis::cmd("SET")
        .arg(&keep[3])
        .arg("not ours")
        .exec(&mut con)
        .unwrap();
    assert_eq!(limiter.purge(&mut con).unwrap(), keys as u64 + 1);
    let left: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(left, keep.len() as u64);
    for key in &keep {
        let exists: u64 = redis::cmd("EXISTS").arg(key).query(&mut con).unwrap();
        assert_eq!(exists, 1, "{key}");
    }
    assert_eq!(limiter.purge(&mut con).unwrap(), 0);
}
