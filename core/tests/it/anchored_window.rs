use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::limits::MAX_LIMIT;
use sluicegate_core::{decide_all, Algorithm, AnchoredWindow, DecodeError, Ticks};

/// The definition, written out: a window opens at the first hit counted while none is
/// open and lasts `period`; a hit of `cost` is counted iff the window's count plus `cost`
/// is at most `limit`. Returns (allowed, count after, ticks until the window ends).
#[derive(Debug, Clone, Default)]
struct Reference {
    open: Option<(Ticks, u64)>,
}

impl Reference {
    fn count_at(&self, period: Ticks, now: Ticks) -> u64 {
        match self.open {
            Some((start, count)) if now < start + period => count,
            _ => 0,
        }
    }

    fn fits(&self, limit: u64, period: Ticks, now: Ticks, cost: u64) -> bool {
        u128::from(self.count_at(period, now)) + u128::from(cost) <= u128::from(limit)
    }

    fn count(&mut self, period: Ticks, now: Ticks, cost: u64) {
        let count = self.count_at(period, now);
        if count == 0 && cost > 0 {
            self.open = Some((now, cost));
        } else if let Some((_, c)) = &mut self.open {
            if count > 0 {
                *c += cost;
            }
        }
        if self.count_at(period, now) == 0 {
            self.open = None;
        }
    }
}

proptest! {
    /// Every decision keeps its promises (retry and reset exact, remaining exact, the
    /// state round-tripping), and admits what the definition admits.
    #[test]
    fn decides_as_the_definition(limit in limit(MAX_LIMIT), period in period(), raw in raw_arrivals()) {
        let alg = AnchoredWindow::new(limit, period).unwrap();
        let arrivals = arrivals(&raw, period, limit);
        let decisions = run(&alg, 10 * period, &arrivals);
        let mut reference = Reference::default();
        for (&(now, cost), d) in arrivals.iter().zip(&decisions) {
            let allowed = reference.fits(limit, period, now, cost);
            prop_assert_eq!(d.allowed, allowed);
            if allowed {
                reference.count(period, now, cost);
            }
            prop_assert_eq!(d.remaining, limit - reference.count_at(period, now));
        }
    }

    /// One request on several windows: admitted iff each admits it, and only then does
    /// any count move; each window opens at its own first counted hit.
    #[test]
    fn all_or_nothing(
        params in prop::collection::vec((1..6u64, 1..50u64), 1..4),
        raw in raw_arrivals(),
    ) {
        let windows: Vec<_> = params.iter().map(|&(l, p)| AnchoredWindow::new(l, p).unwrap()).collect();
        let mut states = vec![None; windows.len()];
        let mut references = vec![Reference::default(); windows.len()];
        for (now, cost) in arrivals(&raw, 20, 3) {
            let admitted = decide_all(&windows, &mut states, now, cost);
            let expected = params.iter().zip(&references).all(|(&(l, p), r)| r.fits(l, p, now, cost));
            prop_assert_eq!(admitted, expected);
            for ((&(limit, period), reference), (alg, state)) in params.iter().zip(&mut references).zip(windows.iter().zip(&states)) {
                if expected {
                    reference.count(period, now, cost);
                }
                let count = alg.live(*state, now).map_or(0, |s| s.count());
                prop_assert_eq!(count, reference.count_at(period, now));
                prop_assert!(count <= limit);
            }
        }
    }

    /// Decoding any bytes is a state or an error, never a panic; a state read back
    /// encodes to the same bytes.
    #[test]
    fn any_bytes_decode_or_fail(bytes in prop::collection::vec(any::<u8>(), 0..24)) {
        let alg = AnchoredWindow::new(10, 1000).unwrap();
        if let Ok(state) = alg.decode(&bytes) {
            prop_assert_eq!(alg.encode_to_vec(&state), bytes);
        }
    }
}

#[test]
fn the_window_starts_at_the_first_counted_hit() {
    let alg = AnchoredWindow::new(2, 100).unwrap();
    // A denied hit on a fresh key opens nothing.
    let (d, state) = alg.decide(None, 5, 3);
    assert!(!d.allowed && state.is_none() && d.retry_after.is_none());
    let (_, state) = alg.decide(None, 1_000_007, 1);
    assert_eq!(state.map(|s| (s.start(), s.count())), Some((1_000_007, 1)));
    let (d, state) = alg.decide(state, 1_000_100, 1);
    assert!(d.allowed);
    assert_eq!(d.reset_after, 7);
    let (d, _) = alg.decide(state, 1_000_106, 1);
    assert_eq!((d.allowed, d.retry_after), (false, Some(1)));
    let (d, state) = alg.decide(state, 1_000_107, 2);
    assert_eq!(state.map(|s| s.start()), Some(1_000_107));
    assert_eq!(d.reset_after, 100);
}

#[test]
fn an_added_report_may_pass_the_limit() {
    let alg = AnchoredWindow::new(5, 60).unwrap();
    let state = alg.add(None, 10, 8);
    assert_eq!(state.map(|s| s.count()), Some(8));
    let (d, after) = alg.decide(state, 20, 0);
    assert!(!d.allowed && d.remaining == 0 && after == state);
    assert_eq!(alg.expires_in(state, 20), 50);
    assert_eq!(alg.expires_in(state, 70), 60);
    assert!(alg.decide(state, 70, 5).0.allowed);
    let bytes = alg.encode_to_vec(&state.unwrap());
    assert_eq!(alg.decode(&bytes), Ok(state.unwrap()));
}

#[test]
fn a_zero_count_or_a_start_beyond_the_range_is_refused() {
    let alg = AnchoredWindow::new(5, 60).unwrap();
    let mut bytes = alg.encode_to_vec(&alg.add(None, 10, 1).unwrap());
    bytes[17] = 0;
    assert_eq!(
        alg.decode(&bytes),
        Err(DecodeError::InvalidField { field: "count" })
    );
    bytes[2] = 0xff;
    assert!(alg.decode(&bytes).is_err());
}
