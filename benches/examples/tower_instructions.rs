//! Runs `n` requests through one app of the `tower_overhead` bench, to count its
//! instructions under callgrind where timings are too noisy (a shared machine):
//!
//! ```text
//! cargo build --release -p sluicegate-benches --example tower_instructions
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
//!     --toggle-collect='*tower_instructions::measured*' \
//!     target/release/examples/tower_instructions sluicegate 20000
//! ```
//!
//! The instructions per request are the difference between runs of 20 000 and 10 000
//! requests, over 10 000 (which cancels the first requests of each client). Only
//! `measured` is counted: one request before it initialises the clocks, whose
//! calibration loops for a time that varies from run to run under valgrind.

#[path = "../benches/common/tower_apps.rs"]
mod tower_apps;

use sluicegate_benches::words_and_count;
use tower::ServiceExt;
use tower_apps::{apps, decision, request};

fn main() {
    let ([name], n): (_, u32) = words_and_count(
        "tower_instructions bare|sluicegate|sluicegate_no_headers|tower_governor|tower_governor_headers|sluicegate_decision N",
    );
    if name == "sluicegate_decision" {
        let mut decide = decision();
        assert!(decide(u32::MAX));
        measured(n, |i| assert!(decide(i)));
        return;
    }
    let Some((_, app)) = apps().into_iter().find(|(app, _)| *app == name) else {
        eprintln!("no app {name}");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let call = |i| {
        let response = runtime.block_on(app.clone().oneshot(request(i))).unwrap();
        assert_eq!(response.status(), 200);
    };
    // Outside the count: the clocks' one-time calibration.
    call(u32::MAX);
    measured(n, call);
}

/// The `n` requests callgrind counts (its `--toggle-collect`).
#[inline(never)]
fn measured(n: u32, mut call: impl FnMut(u32)) {
    for i in 0..n {
        call(i);
    }
}
