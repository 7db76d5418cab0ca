//! The middleware's overhead per request: one axum route alone (`bare`), behind
//! sluicegate's layer, and behind tower_governor's, each limiting per client IP with a
//! limit that never denies, called in process with `ServiceExt::oneshot` (no sockets).
//! The figure that matters is the added time: `sluicegate - bare` against
//! `tower_governor - bare`.
//!
//! Both layers read the peer from axum's `ConnectInfo`, over 256 client addresses in
//! turn. tower_governor runs with its defaults (no headers, governor's TSC clock);
//! sluicegate by default writes `RateLimit-Policy` and `RateLimit`. Like is compared with
//! like: `sluicegate_no_headers` (`ratelimit_headers(false)`) beside `tower_governor`,
//! and `sluicegate` beside `tower_governor_headers` (its `use_headers()`: its
//! `x-ratelimit-limit` and `x-ratelimit-remaining` on every admitted response).
//! `sluicegate_decision` prices sluicegate's limiter alone (the same keys, no layer), so the
//! layer's own share is `sluicegate - bare - sluicegate_decision`.
//! `examples/tower_instructions.rs` counts the instructions of the same apps, a figure
//! a busy machine does not blur.

#[path = "common/tower_apps.rs"]
mod tower_apps;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use tower::ServiceExt;
use tower_apps::{apps, decision, request};

fn tower_overhead(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("tower_overhead");
    for (name, app) in apps() {
        // Every app answers 200 before it is measured.
        let status = runtime
            .block_on(app.clone().oneshot(request(0)))
            .unwrap()
            .status();
        assert_eq!(status, 200, "{name}");
        let mut i = 0u32;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let response = runtime.block_on(app.clone().oneshot(request(i)));
                black_box(response.unwrap().status())
            })
        });
    }
    let mut decide = decision();
    let mut i = 0u32;
    group.bench_function("sluicegate_decision", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            black_box(decide(i))
        })
    });
    group.finish();
}

criterion_group!(benches, tower_overhead);
criterion_main!(benches);
