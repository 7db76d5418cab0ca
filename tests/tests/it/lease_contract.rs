//! The lease contract (`sluicegate_core::LeaseHost`) kept the same by every host: one
//! script of calls, the same expected answers on sled, on Redis through a connection
//! and on Redis asynchronously. A host joins with one line: a test calling
//! [`keeps_the_lease_contract`] with it and a way to read its lease errors.

use std::fmt::Debug;

use sluicegate_core::{
    Acquired, AsyncLeaseHost, Concurrency, Grant, LeaseError, LeaseHost, LeaseRequest, LeaseState,
    ParamError, Ticks, SECOND,
};
use sluicegate_redis::{Connected, ConnectedAsync, RedisLeases};
use sluicegate_sled::{Durability, SledLeases};
use sluicegate_test_support::Server;

/// Around 2026 in µs since the Unix epoch: within every host's range.
const T: Ticks = 1_790_000_000_000_000;
const TTL: Ticks = 10 * SECOND;

/// The contract on a lock (`Concurrency::lock()`) hosted by `host`, whose errors
/// `lease_error` reads as the core's [`LeaseError`] (`None`: another failure). Each
/// figure is the core's own answer for the same calls, so every host must agree with
/// the core and with each other.
fn keeps_the_lease_contract<H: LeaseHost>(
    host: &H,
    lease_error: fn(&H::Error) -> Option<&LeaseError>,
) where
    H::Error: Debug,
{
    let mut calls = Checked {
        host,
        model: Concurrency::lock(),
        state: None,
    };
    let key = "contract";
    let by = |owner: &'static str| LeaseRequest::new(key).owner(owner).ttl(TTL);

    // Acquire: granted, held once, expiring a ttl from now.
    let first = calls
        .acquire(by("a").at(T))
        .grant
        .expect("a free lock is granted");
    assert_eq!((first.holds, first.expires_at), (1, T + TTL));
    // Re-enter: the owner holds it twice, with the same token.
    let again = calls
        .acquire(by("a").at(T + 1))
        .grant
        .expect("its owner re-enters");
    assert_eq!((again.token, again.holds), (first.token, 2));
    // Another owner is denied, told when the lease expires.
    let denied = calls.acquire(by("b").at(T + 2));
    assert!(denied.grant.is_none() && !denied.decision.allowed);
    let retry = denied.decision.retry_after.expect("a held lock expires");
    assert!(retry > 0 && retry <= TTL, "{retry}");
    let held = host
        .state(key.as_bytes())
        .unwrap()
        .expect("a held lock is stored");
    assert_eq!(held.leases().len(), 1);

    // Renew: the ttl counts from the renewal, the token stays.
    let renewed = calls.renew(by("a").at(T + 3));
    assert_eq!(
        (renewed.token, renewed.expires_at),
        (first.token, T + 3 + TTL)
    );

    // Only the owner releases or renews; anyone else holds nothing.
    let not_held = |e: H::Error| lease_error(&e) == Some(&LeaseError::NotHeld);
    assert!(not_held(host.release(&by("b").at(T + 4)).unwrap_err()));
    assert!(not_held(host.renew(&by("b").at(T + 4)).unwrap_err()));

    // Released as often as acquired, the lock is free for the next owner, with a
    // larger token.
    for holds in [1, 0] {
        assert_eq!(calls.release(by("a").at(T + 5)).holds, holds);
    }
    let next = calls
        .acquire(by("b").at(T + 6))
        .grant
        .expect("a freed lock is granted");
    assert!(next.token > first.token);

    // An owner or a ttl left out (or out of range) is refused before anything changes.
    let param = |e: H::Error, name: &str| matches!(lease_error(&e), Some(LeaseError::Param(ParamError::OutOfRange { name: n, .. })) if *n == name);
    let nobody = LeaseRequest::new(key).ttl(TTL).at(T + 7);
    assert!(param(host.acquire(&nobody).unwrap_err(), "owner length"));
    assert!(param(host.release(&nobody).unwrap_err(), "owner length"));
    let no_ttl = LeaseRequest::new(key).owner("b").at(T + 7);
    assert!(param(host.acquire(&no_ttl).unwrap_err(), "ttl"));
    assert!(param(host.renew(&no_ttl).unwrap_err(), "ttl"));
    let too_long = LeaseRequest::new(key)
        .owner(&[b'x'; 129])
        .ttl(TTL)
        .at(T + 7);
    assert!(param(host.acquire(&too_long).unwrap_err(), "owner length"));
    assert_eq!(calls.renew(by("b").at(T + 7)).token, next.token);

    // Without its own time, a request is on the host's clock.
    let now = LeaseRequest::new("on-the-clock").owner("c").ttl(TTL);
    let granted = host
        .acquire(&now)
        .unwrap()
        .grant
        .expect("a free lock is granted");
    assert_eq!(host.release(&now).unwrap().token, granted.token);
}

/// A host's answers checked against the core's for the same calls on a lock.
struct Checked<'h, H> {
    host: &'h H,
    model: Concurrency,
    state: Option<LeaseState>,
}

impl<H: LeaseHost> Checked<'_, H>
where
    H::Error: Debug,
{
    /// The host's answer to `request`, after checking it is the core's.
    fn call<T: PartialEq + Debug>(
        &mut self,
        request: LeaseRequest<'_>,
        core: impl FnOnce(&Concurrency, Option<LeaseState>, Ticks) -> CoreAnswer<T>,
        host: impl FnOnce(&H, &LeaseRequest<'_>) -> Result<T, H::Error>,
    ) -> T {
        let now = request
            .now
            .expect("the script's calls are at explicit times");
        let (want, next) = core(&self.model, self.state.take(), now).unwrap();
        self.state = next;
        let got = host(self.host, &request).unwrap();
        assert_eq!(got, want, "{request:?}");
        got
    }

    fn acquire(&mut self, r: LeaseRequest<'_>) -> Acquired {
        let core = |m: &Concurrency, s, now| m.acquire(s, now, r.owner, r.ttl);
        self.call(r, core, |h, r| h.acquire(r))
    }

    fn renew(&mut self, r: LeaseRequest<'_>) -> Grant {
        let core = |m: &Concurrency, s, now| m.renew(s, now, r.owner, r.ttl);
        self.call(r, core, |h, r| h.renew(r))
    }

    fn release(&mut self, r: LeaseRequest<'_>) -> Grant {
        let core = |m: &Concurrency, s, now| m.release(s, now, r.owner);
        self.call(r, core, |h, r| h.release(r))
    }
}

/// The core's answer and the state it leaves.
type CoreAnswer<T> = Result<(T, Option<LeaseState>), LeaseError>;

#[test]
fn sled() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let host = SledLeases::new(
        db.open_tree("leases").unwrap(),
        Concurrency::lock(),
        Durability::Background,
    );
    keeps_the_lease_contract(&host, |e| match e {
        sluicegate_sled::Error::Lease(e) => Some(e),
        _ => None,
    });
}

fn redis_lease_error(e: &sluicegate_redis::Error) -> Option<&LeaseError> {
    match e {
        sluicegate_redis::Error::Lease(e) => Some(e),
        _ => None,
    }
}

#[test]
fn redis() {
    let server = Server::start();
    let leases = RedisLeases::new(Concurrency::lock()).with_prefix("sync:");
    let host = Connected::new(leases, server.connection());
    keeps_the_lease_contract(&host, redis_lease_error);
}

#[test]
fn redis_async() {
    let server = Server::start();
    let (runtime, con) = server.multiplexed();
    let leases = RedisLeases::new(Concurrency::lock()).with_prefix("async:");
    let host = Blocking {
        host: ConnectedAsync::new(leases, con),
        runtime,
    };
    keeps_the_lease_contract(&host, redis_lease_error);
}

/// An asynchronous host run to completion call by call, so the one contract test drives
/// the asynchronous contract too.
struct Blocking<H> {
    host: H,
    runtime: tokio::runtime::Runtime,
}

impl<H: AsyncLeaseHost> LeaseHost for Blocking<H> {
    type Error = H::Error;

    fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, H::Error> {
        self.runtime.block_on(self.host.acquire(request))
    }

    fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, H::Error> {
        self.runtime.block_on(self.host.release(request))
    }

    fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, H::Error> {
        self.runtime.block_on(self.host.renew(request))
    }

    fn state(&self, key: &[u8]) -> Result<Option<LeaseState>, H::Error> {
        self.runtime.block_on(self.host.state(key))
    }
}
