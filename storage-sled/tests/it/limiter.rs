//! The host contract over sled: `sluicegate_core::Limiter` answers exactly as the inherent
//! methods it stands for.

use std::sync::Arc;

use crate::common::temp_tree;
use proptest::prelude::*;
use sluicegate_core::{
    AnyAlgorithm, Ban, Clock, Composite, FixedWindow, Limiter, ManualClock, Pacing, Request,
    Reserve, SlidingLog, Ticks, TokenBucket, SECOND,
};
use sluicegate_sled::{Durability, SledLimiter};
use sluicegate_test_support::ops::{op, Op};

/// A clock the test moves while the limiter holds it.
#[derive(Debug, Clone)]
struct Shared(Arc<ManualClock>);

impl Clock for Shared {
    fn now(&self) -> Ticks {
        self.0.now()
    }
}

/// Runs `steps` through the trait on one prefix and through the inherent methods on
/// another, in one tree: every answer the same, and the records the same after each.
fn trait_as_inherent<A: Reserve + Clone>(alg: A, steps: &[(Op, Ticks, bool, u64, u8)]) {
    let (_dir, _db, tree) = temp_tree("limits");
    let clock = Shared(Arc::new(ManualClock::new(0)));
    let host = SledLimiter::new(tree.clone(), alg.clone(), Durability::Background)
        .with_prefix("t/")
        .with_clock(clock.clone());
    let inherent = SledLimiter::new(tree.clone(), alg, Durability::Background).with_prefix("i/");
    for (op, now, explicit, cost, key) in steps {
        let (now, key) = (*now, [*key]);
        clock.0.set(now);
        let request = Request::new(&key).cost(*cost);
        let request = if *explicit { request.at(now) } else { request };
        let (got, want) = match op {
            Op::Check => (
                Limiter::check(&host, &request),
                inherent.check_request(&Request::new(&key).cost(*cost).at(now)),
            ),
            Op::Peek => (
                Limiter::peek(&host, &request),
                inherent.peek(&Request::new(&key).cost(*cost).at(now)),
            ),
            Op::Reserve(wait) => (
                Limiter::reserve(&host, &request, *wait),
                inherent.reserve(&Request::new(&key).cost(*cost).at(now), *wait),
            ),
            Op::Reset => {
                Limiter::reset(&host, &key).unwrap();
                inherent.reset(&key).unwrap();
                continue;
            }
        };
        assert_eq!(got.unwrap(), want.unwrap(), "{op:?} at {now}");
        assert_eq!(
            tree.get([b"t/".as_slice(), &key].concat()).unwrap(),
            tree.get([b"i/".as_slice(), &key].concat()).unwrap(),
        );
    }
}

fn steps() -> impl Strategy<Value = Vec<(Op, Ticks, bool, u64, u8)>> {
    prop::collection::vec((op(), 0..SECOND, any::<bool>(), 0..8u64, 0..3u8), 1..50).prop_map(
        |steps| {
            let mut now = 1_700_000_000 * SECOND;
            steps
                .into_iter()
                .map(|(op, gap, explicit, cost, key)| {
                    now += gap;
                    (op, now, explicit, cost, key)
                })
                .collect()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn the_trait_answers_as_the_inherent_methods(
        limit in 1..10u64,
        rate in 1..10u64,
        steps in steps(),
    ) {
        trait_as_inherent(TokenBucket::new(limit, rate, SECOND).unwrap(), &steps);
        trait_as_inherent(Pacing::new(limit, rate, SECOND).unwrap(), &steps);
        // Windows cannot book ahead: through `AnyAlgorithm`, a reserve decides.
        trait_as_inherent(AnyAlgorithm::from(FixedWindow::new(limit, SECOND).unwrap()), &steps);
        trait_as_inherent(AnyAlgorithm::from(SlidingLog::new(limit, SECOND).unwrap()), &steps);
        trait_as_inherent(
            Composite::new(vec![
                TokenBucket::new(limit, rate, SECOND).unwrap(),
                TokenBucket::new(3 * limit, rate, 10 * SECOND).unwrap(),
            ])
            .unwrap(),
            &steps,
        );
        let bucket = AnyAlgorithm::from(TokenBucket::new(limit, rate, SECOND).unwrap());
        let ban = Ban::new(bucket, 3, SECOND, SECOND).unwrap();
        trait_as_inherent(AnyAlgorithm::from(ban), &steps);
    }
}
