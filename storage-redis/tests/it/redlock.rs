//! Redlock over three independent redis-servers: majorities, failures, split votes, and
//! the fenced resource refusing a holder whose lock expired, with no timing assumption.

use std::thread::sleep;
use std::time::{Duration, Instant};

use sluicegate_core::{LeaseRequest, Ticks, MILLISECOND, SECOND};
use sluicegate_redis::{Error, FencedResource, Redlock, RedlockGrant};

use crate::common::Server;

const TTL: Ticks = 10 * SECOND;

fn servers() -> Vec<Server> {
    (0..3).map(|_| Server::start()).collect()
}

fn connections(servers: &[Server]) -> Vec<redis::Connection> {
    servers.iter().map(Server::connection).collect()
}

/// Whether `owner` could take the lock on `server` alone (then gives it back).
fn free_on(lock: &Redlock, server: &Server, owner: &[u8]) -> bool {
    let mut con = server.connection();
    let acquired = lock
        .leases()
        .acquire(&mut con, &LeaseRequest::new(b"job").owner(owner).ttl(TTL))
        .unwrap();
    if acquired.grant.is_some() {
        assert_eq!(
            lock.leases()
                .release(&mut con, &LeaseRequest::new(b"job").owner(owner))
                .unwrap()
                .holds,
            0
        );
    }
    acquired.grant.is_some()
}

/// `owner` takes the lock on the server of `con` alone, as a contender would.
fn holds_one(lock: &Redlock, con: &mut redis::Connection, owner: &[u8], ttl: Ticks) {
    let held = lock
        .leases()
        .acquire(con, &LeaseRequest::new(b"job").owner(owner).ttl(ttl));
    assert!(held.unwrap().grant.is_some());
}

/// The lock granted to `owner` by a majority without server `missing`.
fn granted_without(
    lock: &Redlock,
    cons: &mut [redis::Connection],
    owner: &[u8],
    ttl: Ticks,
    missing: usize,
) -> RedlockGrant {
    let request = LeaseRequest::new(b"job").owner(owner).ttl(ttl);
    let grant = lock.acquire(cons, &request).unwrap().unwrap();
    assert_eq!(grant.tokens[missing], None);
    grant
}

#[test]
fn a_majority_grants_the_lock_and_excludes_every_other_owner() {
    let servers = servers();
    let mut cons = connections(&servers);
    let lock = Redlock::new("lock:");

    let grant = lock
        .acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"a").ttl(TTL))
        .unwrap()
        .unwrap();
    assert_eq!(grant.tokens.iter().flatten().count(), 3);
    assert!(grant.validity <= TTL - TTL / 100 - 2 * MILLISECOND);
    assert!(grant.validity > TTL - SECOND);

    assert_eq!(
        lock.acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"b").ttl(TTL))
            .unwrap(),
        None
    );
    let again = lock
        .acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"a").ttl(TTL))
        .unwrap()
        .unwrap();
    assert_eq!(again.tokens, grant.tokens, "the owner re-enters its lock");

    assert_eq!(
        lock.release(&mut cons, &LeaseRequest::new(b"job").owner(b"a"))
            .unwrap(),
        3
    );
    assert_eq!(
        lock.acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"b").ttl(TTL))
            .unwrap(),
        None,
        "entered twice, released once"
    );
    assert_eq!(
        lock.release(&mut cons, &LeaseRequest::new(b"job").owner(b"a"))
            .unwrap(),
        3
    );
    let next = lock
        .acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"b").ttl(TTL))
        .unwrap()
        .unwrap();
    for (old, new) in grant.tokens.iter().zip(&next.tokens) {
        assert!(new > old, "every server's token grew: {old:?} -> {new:?}");
    }
    assert_eq!(
        lock.release(&mut cons, &LeaseRequest::new(b"job").owner(b"a"))
            .unwrap(),
        0
    );
}

#[test]
fn a_minority_down_still_locks_and_a_majority_down_is_an_error_holding_nothing() {
    let mut servers = servers();
    let lock = Redlock::new("lock:");
    servers[0].kill();
    let mut cons: Vec<_> = servers.iter().map(|s| s.client()).collect();

    let grant = lock
        .acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"a").ttl(TTL))
        .unwrap()
        .unwrap();
    assert_eq!(grant.tokens[0], None);
    assert!(grant.tokens[1].is_some() && grant.tokens[2].is_some());
    assert_eq!(
        lock.release(&mut cons, &LeaseRequest::new(b"job").owner(b"a"))
            .unwrap(),
        2
    );

    servers[1].kill();
    match lock.acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"a").ttl(TTL)) {
        Err(Error::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(
        free_on(&lock, &servers[2], b"other"),
        "the failed acquire gave back its one grant"
    );
    assert!(
        lock.release(&mut cons, &LeaseRequest::new(b"job").owner(b"a"))
            .is_ok(),
        "one server answered"
    );
}

#[test]
fn a_split_vote_gives_no_one_the_lock_and_keeps_nothing() {
    let servers = servers();
    let lock = Redlock::new("lock:");
    // Two contenders each hold one server, as when their calls interleave.
    holds_one(&lock, &mut servers[0].connection(), b"x", TTL);
    holds_one(&lock, &mut servers[1].connection(), b"y", TTL);

    let mut cons = connections(&servers);
    assert_eq!(
        lock.acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"c").ttl(TTL))
            .unwrap(),
        None
    );
    assert!(
        free_on(&lock, &servers[2], b"d"),
        "c's grant was given back"
    );
}

#[test]
fn too_short_a_ttl_is_never_a_grant() {
    let servers = servers();
    let mut cons = connections(&servers);
    let lock = Redlock::new("lock:");
    // The drift allowance alone (2 ms) exceeds the ttl: no time is left to act.
    assert_eq!(
        lock.acquire(
            &mut cons,
            &LeaseRequest::new(b"job").owner(b"a").ttl(MILLISECOND)
        )
        .unwrap(),
        None
    );
    assert!(free_on(&lock, &servers[0], b"b"));
    assert!(matches!(
        lock.acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"").ttl(TTL)),
        Err(Error::Lease(_))
    ));
}

/// A holder pauses past its ttl; the next holder's majority differs from its own but
/// shares a server, whose token refuses the stale write, whatever the clocks say.
#[test]
fn an_expired_holders_write_is_refused_by_the_shared_servers_token() {
    let servers = servers();
    let store = Server::start();
    let mut store = store.connection();
    let resource = FencedResource::new("resource");
    let lock = Redlock::new("lock:");
    let mut cons = connections(&servers);

    // x holds server 2, so a's majority is servers 0 and 1.
    let ttl = 200 * MILLISECOND;
    let mut side = servers[2].connection();
    holds_one(&lock, &mut side, b"x", ttl);
    let a = granted_without(&lock, &mut cons, b"a", ttl, 2);

    // a pauses past its ttl; x moves from server 2 to server 0, so b gets 1 and 2.
    sleep(Duration::from_micros(ttl + 50 * MILLISECOND));
    lock.leases()
        .release(&mut side, &LeaseRequest::new(b"job").owner(b"x"))
        .ok();
    holds_one(&lock, &mut servers[0].connection(), b"x", TTL);
    let b = granted_without(&lock, &mut cons, b"b", TTL, 0);

    resource.write_redlock(&mut store, &b, b"b").unwrap();
    match resource.write_redlock(&mut store, &a, b"a") {
        Err(Error::Stale { token, highest }) => {
            assert_eq!((Some(token), Some(highest)), (a.tokens[1], b.tokens[1]));
        }
        other => panic!("a's stale write must be refused, got {other:?}"),
    }
    assert_eq!(resource.read(&mut store).unwrap().unwrap().1, b"b");
    // b's write stands beside tokens it never had (server 0's).
    resource.write_redlock(&mut store, &b, b"b2").unwrap();
}

#[test]
fn renewal_keeps_the_tokens_and_fails_once_the_lock_is_lost() {
    let servers = servers();
    let mut cons = connections(&servers);
    let lock = Redlock::new("lock:");
    let ttl = 150 * MILLISECOND;
    let grant = lock
        .acquire(&mut cons, &LeaseRequest::new(b"job").owner(b"a").ttl(ttl))
        .unwrap()
        .unwrap();
    let renewed = lock
        .renew(&mut cons, &LeaseRequest::new(b"job").owner(b"a").ttl(TTL))
        .unwrap()
        .unwrap();
    assert_eq!(renewed.tokens, grant.tokens);
    assert!(renewed.validity > ttl, "renewed to the longer ttl");

    lock.release(&mut cons, &LeaseRequest::new(b"job").owner(b"a"))
        .unwrap();
    assert_eq!(
        lock.renew(&mut cons, &LeaseRequest::new(b"job").owner(b"a").ttl(TTL))
            .unwrap(),
        None
    );
}

/// Threads contend for the lock around a read-modify-write of a fenced counter: every
/// increment lands, none is refused.
#[test]
fn threads_around_a_fenced_counter_count_exactly() {
    const THREADS: u64 = 6;
    const ROUNDS: u64 = 15;
    let servers = servers();
    let store = Server::start();
    let lock = Redlock::new("lock:");
    let deadline = Instant::now() + Duration::from_secs(60);
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (servers, store, lock) = (&servers, &store, &lock);
            scope.spawn(move || {
                let mut cons = connections(servers);
                let mut store = store.connection();
                let owner = format!("thread-{thread}");
                let counter = FencedResource::new("counter");
                for round in 0..ROUNDS {
                    let grant = loop {
                        assert!(Instant::now() < deadline, "thread {thread} starved");
                        match lock.acquire(
                            &mut cons,
                            &LeaseRequest::new(b"job").owner(owner.as_bytes()).ttl(TTL),
                        ) {
                            Ok(Some(grant)) => break grant,
                            Ok(None) => sleep(Duration::from_micros(200 + 97 * round % 700)),
                            Err(e) => panic!("{e}"),
                        }
                    };
                    let value = counter.read(&mut store).unwrap();
                    let n: u64 =
                        value.map_or(0, |(_, v)| String::from_utf8(v).unwrap().parse().unwrap());
                    counter
                        .write_redlock(&mut store, &grant, (n + 1).to_string().as_bytes())
                        .unwrap();
                    let held = grant.tokens.iter().flatten().count();
                    assert_eq!(
                        lock.release(
                            &mut cons,
                            &LeaseRequest::new(b"job").owner(owner.as_bytes())
                        )
                        .unwrap(),
                        held
                    );
                }
            });
        }
    });
    let (_, value) = FencedResource::new("counter")
        .read(&mut store.connection())
        .unwrap()
        .unwrap();
    assert_eq!(value, (THREADS * ROUNDS).to_string().as_bytes());
}
