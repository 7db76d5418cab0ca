//! Leases: a reference model written from the definition, proptests of the invariants
//! (at most `max` held, owner isolation, expiry, reentrancy, fencing tokens that never
//! repeat, also across deletions of the key) and the classic lock scenarios (the
//! `SET NX PX` recipe).

use std::collections::BTreeMap;

use proptest::prelude::*;
use sluicegate_core::limits::{MAX_LEASES, MAX_OWNER_LEN, MAX_PERIOD};
use sluicegate_core::{
    Acquired, Concurrency, DecodeError, Grant, LeaseError, LeaseState, ParamError, MAX_TICKS,
};

/// The definition, over a map: owner → (token, expiry, holds), and the last token.
#[derive(Debug, Default, Clone)]
struct Model {
    last_token: u64,
    held: BTreeMap<Vec<u8>, (u64, u64, u64)>,
}

impl Model {
    fn live(&mut self, now: u64) {
        self.held.retain(|_, &mut (_, expiry, _)| expiry > now);
    }

    /// `Some((token, expiry, holds))` when granted; otherwise the time until the
    /// earliest lease expires.
    fn acquire(
        &mut self,
        max: u64,
        now: u64,
        owner: &[u8],
        ttl: u64,
    ) -> Result<(u64, u64, u64), u64> {
        self.live(now);
        if let Some(lease) = self.held.get_mut(owner) {
            lease.1 = lease.1.max(now + ttl);
            lease.2 += 1;
            return Ok(*lease);
        }
        if self.held.len() as u64 >= max {
            return Err(self.held.values().map(|l| l.1).min().unwrap() - now);
        }
        self.last_token = (self.last_token + 1).max(now);
        let lease = (self.last_token, now + ttl, 1);
        self.held.insert(owner.to_vec(), lease);
        Ok(lease)
    }

    fn release(&mut self, now: u64, owner: &[u8]) -> Option<(u64, u64, u64)> {
        self.live(now);
        let lease = self.held.get_mut(owner)?;
        lease.2 -= 1;
        let out = *lease;
        if lease.2 == 0 {
            self.held.remove(owner);
        }
        Some(out)
    }

    fn renew(&mut self, now: u64, owner: &[u8], ttl: u64) -> Option<(u64, u64, u64)> {
        self.live(now);
        let lease = self.held.get_mut(owner)?;
        lease.1 = now + ttl;
        Some(*lease)
    }

    /// When the key may be deleted: nothing held and the clock past the last token.
    fn fresh_at(&self) -> u64 {
        let expiry = self.held.values().map(|l| l.1).max().unwrap_or(0);
        expiry.max(self.last_token + 1)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire { owner: u8, ttl: u64 },
    Release { owner: u8 },
    Renew { owner: u8, ttl: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..5, 1u64..200).prop_map(|(owner, ttl)| Op::Acquire { owner, ttl }),
        2 => (0u8..5).prop_map(|owner| Op::Release { owner }),
        1 => (0u8..5, 1u64..200).prop_map(|(owner, ttl)| Op::Renew { owner, ttl }),
    ]
}

/// Runs `ops` (each after a gap) through the core and the model from `start`, like a
/// host that deletes the key whenever the core returns `None`; checks every answer.
fn run(max: u64, start: u64, steps: &[(u64, Op)]) {
    let leases = Concurrency::new(max).unwrap();
    let mut state: Option<LeaseState> = None;
    let mut model = Model::default();
    let mut now = start;
    let mut tokens_granted = Vec::new();
    for (gap, op) in steps {
        now += gap;
        match *op {
            Op::Acquire { owner, ttl } => {
                let owner = [owner];
                let (acquired, next) = leases.acquire(state.take(), now, &owner, ttl).unwrap();
                let expected = model.acquire(max, now, &owner, ttl);
                let d = acquired.decision;
                assert_eq!(d.limit, max);
                assert_eq!(d.remaining, max - model.held.len() as u64);
                assert_eq!(d.reset_after, model.fresh_at().saturating_sub(now));
                match expected {
                    Ok((token, expires_at, holds)) => {
                        let grant = acquired.grant.expect("granted");
                        assert!(d.allowed);
                        assert_eq!(
                            (grant.token, grant.expires_at, grant.holds),
                            (token, expires_at, holds)
                        );
                        if holds == 1 {
                            tokens_granted.push(token);
                        }
                    }
                    Err(retry) => {
                        assert!(!d.allowed && acquired.grant.is_none());
                        assert_eq!(d.retry_after, Some(retry));
                        // Exact: a newcomer gets in after `retry`, not one tick earlier.
                        let probe = next.clone();
                        let (early, _) = leases
                            .acquire(probe.clone(), now + retry - 1, b"newcomer", 1)
                            .unwrap();
                        assert!(!early.decision.allowed);
                        let (then, _) = leases.acquire(probe, now + retry, b"newcomer", 1).unwrap();
                        assert!(then.decision.allowed);
                    }
                }
                state = next;
            }
            Op::Release { owner } => {
                let owner = [owner];
                let got = leases.release(state.clone(), now, &owner);
                same_hold("release", got, model.release(now, &owner), &mut state);
            }
            Op::Renew { owner, ttl } => {
                let owner = [owner];
                let got = leases.renew(state.clone(), now, &owner, ttl);
                same_hold("renew", got, model.renew(now, &owner, ttl), &mut state);
            }
        }
        // The stored state is the model's, and round-trips through its bytes.
        match &state {
            Some(s) => {
                let live = s.leases().iter().filter(|l| l.expires_at() > now).count();
                assert!(live as u64 <= max, "more than max held");
                assert_eq!(leases.decode(&leases.encode_to_vec(s)).as_ref(), Ok(s));
                assert_eq!(s.last_token(), model.last_token);
            }
            None => {
                // Deleted only when the model says the key is fresh, and then forgotten.
                assert!(model.fresh_at() <= now, "deleted while not fresh");
                model = Model::default();
            }
        }
    }
    // Fencing tokens strictly increase over the whole run, deletions included.
    assert!(
        tokens_granted.windows(2).all(|w| w[0] < w[1]),
        "{tokens_granted:?}"
    );
}

proptest! {
    #[test]
    fn matches_the_model_and_keeps_its_promises(
        max in 1u64..4,
        steps in prop::collection::vec((0u64..150, op()), 1..60),
    ) {
        run(max, 1_000, &steps);
    }

    #[test]
    fn exact_at_the_top_of_the_time_range(
        max in 1u64..4,
        steps in prop::collection::vec((0u64..150, op()), 1..30),
    ) {
        run(max, MAX_TICKS - 3_000, &steps);
    }

    #[test]
    fn bursts_of_grants_within_one_tick_never_repeat_a_token(
        grants in 2u8..50,
        gap in 0u64..3,
    ) {
        // Grants at one instant run the tokens ahead of the clock; the key is kept
        // until the clock passes them, so a grant after a deletion is still larger.
        let lock = Concurrency::lock();
        let mut state = None;
        let mut last = 0;
        let mut now = 10;
        for i in 0..grants {
            let owner = [i];
            let (acquired, next) = lock.acquire(state, now, &owner, 1).unwrap();
            let grant = acquired.grant.expect("the previous lease has expired");
            prop_assert!(grant.token > last);
            last = grant.token;
            // Released at once: nothing held, but the state stays until `now > token`.
            let (_, next) = lock.release(next, now, &owner).unwrap();
            prop_assert_eq!(next.is_none(), now > grant.token);
            state = next;
            now += gap;
        }
    }

    /// A host holding the state in place (the in-process leases) copies nothing: a call
    /// that fails leaves the state exactly as it was, and one that succeeds leaves what
    /// the by-value transition returns.
    #[test]
    fn in_place_transitions_change_nothing_on_error(
        max in 1u64..4,
        steps in prop::collection::vec((0u64..150, op()), 1..60),
    ) {
        let leases = Concurrency::new(max).unwrap();
        let mut state = LeaseState::default();
        let mut now = 1_000;
        for (gap, op) in steps {
            now += gap;
            let before = state.clone();
            let stored = (!before.is_fresh(now)).then(|| before.clone());
            let (done, by_value) = match op {
                Op::Acquire { owner, ttl } => {
                    let ttl = if owner == 4 { 0 } else { ttl };
                    let in_place = leases.acquire_in(&mut state, now, &[owner], ttl);
                    let by_value = leases.acquire(stored, now, &[owner], ttl);
                    prop_assert_eq!(in_place.as_ref().ok(), by_value.as_ref().ok().map(|r| &r.0));
                    (in_place.is_ok(), by_value.map(|r| r.1))
                }
                Op::Release { owner } => {
                    let in_place = leases.release_in(&mut state, now, &[owner]);
                    let by_value = leases.release(stored, now, &[owner]);
                    prop_assert_eq!(in_place.as_ref().ok(), by_value.as_ref().ok().map(|r| &r.0));
                    (in_place.is_ok(), by_value.map(|r| r.1))
                }
                Op::Renew { owner, ttl } => {
                    let in_place = leases.renew_in(&mut state, now, &[owner], ttl);
                    let by_value = leases.renew(stored, now, &[owner], ttl);
                    prop_assert_eq!(in_place.as_ref().ok(), by_value.as_ref().ok().map(|r| &r.0));
                    (in_place.is_ok(), by_value.map(|r| r.1))
                }
            };
            if done {
                let kept = (!state.is_fresh(now)).then(|| state.clone());
                prop_assert_eq!(Ok(kept), by_value);
            } else {
                prop_assert_eq!(&state, &before);
                prop_assert!(by_value.is_err());
            }
        }
    }

    /// `Concurrency::check` is the transitions' own validation: it refuses exactly what
    /// an acquire or renew refuses as a parameter, with the same error.
    #[test]
    fn check_refuses_exactly_what_the_transitions_refuse(
        owner_len in 0..=MAX_OWNER_LEN + 2,
        ttl in prop_oneof![0..=3u64, MAX_PERIOD - 1..=MAX_PERIOD + 1, any::<u64>()],
    ) {
        let owner = vec![b'o'; usize::try_from(owner_len).unwrap()];
        let leases = Concurrency::lock();
        let checked = Concurrency::check(&owner, ttl);
        let acquired = leases.acquire(None, 5, &owner, ttl).map(|_| ());
        prop_assert_eq!(&checked, &acquired);
        let mut state = LeaseState::default();
        if checked.is_ok() {
            let _ = leases.acquire_in(&mut state, 5, &owner, ttl).unwrap();
        }
        let renewed = leases.renew_in(&mut state, 5, &owner, ttl).map(|_| ());
        match checked {
            Ok(()) => prop_assert_eq!(renewed, Ok(())),
            Err(e) => prop_assert_eq!(renewed, Err(e)),
        }
    }

    /// `fresh_after` is the time to `fresh_at`, and 0 exactly when the state is fresh.
    #[test]
    fn fresh_after_is_zero_exactly_when_fresh(
        steps in prop::collection::vec((0u64..150, op()), 1..30),
        probe in 0u64..400,
    ) {
        let leases = Concurrency::new(2).unwrap();
        let mut state = LeaseState::default();
        let mut now = 1_000;
        for (gap, op) in steps {
            now += gap;
            if let Op::Acquire { owner, ttl } = op {
                let _ = leases.acquire_in(&mut state, now, &[owner], ttl).unwrap();
            }
        }
        for at in [now, now + probe, MAX_TICKS, u64::MAX] {
            let after = state.fresh_after(at);
            prop_assert_eq!(after, state.fresh_at().saturating_sub(at.min(MAX_TICKS)));
            prop_assert_eq!(after == 0, state.is_fresh(at));
        }
    }

    #[test]
    fn random_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Concurrency::new(3).unwrap().decode(&bytes);
    }
}

#[test]
fn a_crashed_holder_returns_its_lease_after_ttl_and_not_before() {
    // The `SET NX PX` lock recipe: `SET lock owner NX PX 30000`, the holder dies without releasing.
    let lock = Concurrency::lock();
    let (a, state) = lock.acquire(None, 1_000, b"a", 30_000).unwrap();
    let a = a.grant.unwrap();
    let (b, state) = lock.acquire(state, 30_999, b"b", 30_000).unwrap();
    assert!(!b.decision.allowed);
    assert_eq!(b.decision.retry_after, Some(1));
    let (b, _) = lock.acquire(state, 31_000, b"b", 30_000).unwrap();
    let b = b.grant.unwrap();
    // The resource that saw b's token refuses a's, now stale.
    assert!(b.token > a.token);
}

#[test]
fn release_and_renew_belong_to_the_owner() {
    let lock = Concurrency::lock();
    let (_, state) = lock.acquire(None, 0, b"a", 100).unwrap();
    assert_eq!(
        lock.release(state.clone(), 10, b"b"),
        Err(LeaseError::NotHeld)
    );
    assert_eq!(
        lock.renew(state.clone(), 10, b"b", 100),
        Err(LeaseError::NotHeld)
    );
    // An expired lease cannot be renewed: its holder must stop.
    assert_eq!(
        lock.renew(state.clone(), 100, b"a", 100),
        Err(LeaseError::NotHeld)
    );
    let (grant, state) = lock.renew(state, 99, b"a", 100).unwrap();
    assert_eq!(grant.expires_at, 199);
    let (grant, _) = lock.release(state, 150, b"a").unwrap();
    assert_eq!(grant.holds, 0);
}

#[test]
fn a_lock_is_reentrant() {
    let lock = Concurrency::lock();
    let (first, state) = lock.acquire(None, 0, b"a", 100).unwrap();
    let (second, state) = lock.acquire(state, 50, b"a", 100).unwrap();
    let (first, second) = (first.grant.unwrap(), second.grant.unwrap());
    assert_eq!(
        (second.token, second.holds, second.expires_at),
        (first.token, 2, 150)
    );
    let (_, state) = lock.release(state, 60, b"a").unwrap();
    let (other, state) = lock.acquire(state, 60, b"b", 100).unwrap();
    assert!(!other.decision.allowed, "still held once");
    let (_, state) = lock.release(state, 60, b"a").unwrap();
    let (other, _) = lock.acquire(state, 60, b"b", 100).unwrap();
    assert!(other.decision.allowed);
}

#[test]
fn bad_input_is_a_typed_error() {
    let leases = Concurrency::new(2).unwrap();
    assert!(Concurrency::new(0).is_err());
    assert!(Concurrency::new(MAX_LEASES + 1).is_err());
    let owner_err = |len: u64| {
        LeaseError::Param(ParamError::OutOfRange {
            name: "owner length",
            value: len,
            min: 1,
            max: MAX_OWNER_LEN,
        })
    };
    assert_eq!(leases.acquire(None, 0, b"", 10).unwrap_err(), owner_err(0));
    let long = vec![b'x'; usize::try_from(MAX_OWNER_LEN).unwrap() + 1];
    assert_eq!(
        leases.acquire(None, 0, &long, 10).unwrap_err(),
        owner_err(MAX_OWNER_LEN + 1)
    );
    for ttl in [0, MAX_PERIOD + 1] {
        assert!(matches!(
            leases.acquire(None, 0, b"a", ttl),
            Err(LeaseError::Param(ParamError::OutOfRange {
                name: "ttl",
                ..
            }))
        ));
    }
    assert_eq!(leases.release(None, 0, b"a"), Err(LeaseError::NotHeld));
}

/// A host that runs the transition elsewhere rebuilds the core's own answer.
#[test]
fn hosts_can_build_the_cores_lease_types() {
    let (acquired, _) = Concurrency::lock().acquire(None, 10, b"a", 5).unwrap();
    let grant = Grant::new(10, 15, 1);
    assert_eq!(acquired.grant, Some(grant));
    assert_eq!(Acquired::new(acquired.decision, Some(grant)), acquired);
}

#[test]
fn the_decoder_refuses_states_no_transition_writes() {
    let leases = Concurrency::new(2).unwrap();
    let (_, state) = leases.acquire(None, 5, b"a", 10).unwrap();
    let (_, state) = leases.acquire(state, 6, b"b", 10).unwrap();
    let bytes = leases.encode_to_vec(&state.unwrap());
    // version, tag 9, last token 6, two leases: (5, 15, 1, "a") and (6, 16, 1, "b").
    assert_eq!(&bytes[..2], &[1, 9]);
    assert_eq!(bytes.len(), 2 + 16 + 2 * (32 + 1));
    // Too many leases for a limit of one.
    assert_eq!(
        Concurrency::lock().decode(&bytes),
        Err(DecodeError::InvalidField { field: "count" })
    );
    // A repeated owner.
    let mut twice = bytes.clone();
    let last = twice.len() - 1;
    twice[last] = b'a';
    assert_eq!(
        leases.decode(&twice),
        Err(DecodeError::InvalidField { field: "owner" })
    );
    // Truncated anywhere, and trailing bytes.
    for len in 0..bytes.len() {
        assert!(leases.decode(&bytes[..len]).is_err());
    }
    let mut longer = bytes;
    longer.push(0);
    assert_eq!(
        leases.decode(&longer),
        Err(DecodeError::TrailingBytes { extra: 1 })
    );
}

/// A release or renewal against the model's `(token, expires_at, holds)`: the same lease
/// as it stands, the new state taken; or "not held" on both sides, the state untouched.
fn same_hold(
    what: &str,
    got: Result<(Grant, Option<LeaseState>), LeaseError>,
    want: Option<(u64, sluicegate_core::Ticks, u64)>,
    state: &mut Option<LeaseState>,
) {
    match (got, want) {
        (Ok((grant, next)), Some(want)) => {
            assert_eq!((grant.token, grant.expires_at, grant.holds), want);
            *state = next;
        }
        (Err(LeaseError::NotHeld), None) => {}
        (got, want) => panic!("{what}: core {got:?}, model {want:?}"),
    }
}
