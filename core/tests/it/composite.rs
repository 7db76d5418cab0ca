use crate::common::*;
use proptest::prelude::*;
use sluicegate_core::{Algorithm, Composite, Reserve, TokenBucket, SECOND};

proptest! {
    /// Admitted iff every member admits; a denial by any member changes no member's state;
    /// an admission moves every member exactly as deciding it alone would.
    #[test]
    fn all_or_nothing(members in prop::collection::vec((1..10u64, 1..10u64, 1..1000u64), 1..4), raw in raw_arrivals()) {
        let buckets: Vec<_> = members.iter().map(|&(c, r, p)| TokenBucket::new(c, r, p).unwrap()).collect();
        let alg = Composite::new(buckets.clone()).unwrap();
        let period = members.iter().map(|m| m.2).max().unwrap();
        let arrivals = arrivals(&raw, period, members[0].0);
        let mut state = None;
        for &(now, cost) in &arrivals {
            let (d, next) = alg.decide(state.clone(), now, cost);
            check_promises(&alg, 10 * period, now, cost, &d, &next);
            let members_state = state.clone().unwrap_or_else(|| vec![None; buckets.len()]);
            let alone: Vec<_> = buckets.iter().zip(&members_state).map(|(b, s)| b.decide(*s, now, cost)).collect();
            prop_assert_eq!(d.allowed, alone.iter().all(|(d, _)| d.allowed));
            // On denial each member keeps its state (forgotten if fresh by now).
            let expected: Vec<_> = if d.allowed {
                alone.iter().map(|(_, s)| *s).collect()
            } else {
                buckets.iter().zip(&members_state).map(|(b, s)| b.decide(*s, now, 0).1).collect()
            };
            let got = next.clone().unwrap_or_else(|| vec![None; buckets.len()]);
            prop_assert_eq!(got.iter().map(|s| s.map(|s| buckets[0].encode_to_vec(&s))).collect::<Vec<_>>(),
                expected.iter().map(|s| s.map(|s| buckets[0].encode_to_vec(&s))).collect::<Vec<_>>());
            let stored_remaining = buckets.iter().zip(&members_state).map(|(b, s)| b.peek(*s, now, 0).remaining);
            let remaining = if d.allowed { alone.iter().map(|(d, _)| d.remaining).min() } else { stored_remaining.min() };
            prop_assert_eq!(Some(d.remaining), remaining);
            state = next;
        }
    }
}

#[test]
fn ten_per_second_and_thirty_per_minute() {
    let alg = Composite::new(vec![
        TokenBucket::new(10, 10, SECOND).unwrap(),
        TokenBucket::new(30, 30, 60 * SECOND).unwrap(),
    ])
    .unwrap();
    let mut state = None;
    let mut admitted = 0;
    for second in 0..10 {
        for _ in 0..10 {
            let (d, s) = alg.decide(state, second * SECOND, 1);
            admitted += u64::from(d.allowed);
            state = s;
        }
    }
    // The per-second bucket alone would admit 100; the per-minute one caps it at 30
    // plus the 4.5 tokens it refills in 9 s.
    assert_eq!(admitted, 34);
    let (d, state) = alg.decide(state, 10 * SECOND, 1);
    assert!(d.allowed, "the 35th minute token is due at 10 s");
    let (d, _) = alg.decide(state.clone(), 10 * SECOND, 1);
    assert!(!d.allowed);
    // The minute bucket binds: its next token is due at 12 s.
    assert_eq!(
        (d.limit, d.remaining, d.retry_after),
        (30, 0, Some(2 * SECOND))
    );
    let (d, _) = alg.reserve(state, 10 * SECOND, 1, 2 * SECOND);
    assert_eq!((d.allowed, d.delay), (true, 2 * SECOND));
    assert!(Composite::<TokenBucket>::new(vec![]).is_err());
}
