//! Composites of windows and of pacing queues.

use super::*;

#[test]
fn composite_windows() {
    cases(
        with_steps(prop::collection::vec((limit(), period()), 1..4), |m| {
            (m[0].1, m[0].0)
        }),
        |server, (limits, steps)| {
            let members = limits
                .iter()
                .map(|&(l, p)| SlidingCounter::new(l, p).unwrap())
                .collect();
            let alg = Composite::new(members).unwrap();
            differential(server, alg, &steps, checked())
        },
    );
}

#[test]
fn composite_pacing() {
    cases(
        with_steps(prop::collection::vec(pacing_bucket(), 1..4), |m| {
            (m[0].2, m[0].0 + 1)
        }),
        |server, (buckets, steps)| {
            let members = buckets
                .iter()
                .map(|&(c, r, p)| Pacing::new(c, r, p).unwrap())
                .collect();
            let alg = Composite::new(members).unwrap();
            differential(server, alg, &steps, reserved())
        },
    );
}
