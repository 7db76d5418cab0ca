//! What limitador's CEL costs a request in this crate: the request's bindings built and
//! its namespace's limits tested (conditions, variables), for the load bench's files
//! (`cel_1_limit`, `cel_3_limits`), over 10 000 keys.
//!
//! `cargo run --release -p sluicegate-policy --example cel_cost`

use std::time::Instant;

use sluicegate_policy::limitador::{Bindings, Config};

/// A limit of the bench's namespace: `seconds` long, with a condition and a variable.
fn limit(seconds: u64, other_than: &str) -> String {
    format!(
        "- namespace: bench\n  max_value: 1000000\n  seconds: {seconds}\n  conditions: [\"descriptors[0]['k'] != '{other_than}'\"]\n  variables: [\"descriptors[0]['k']\"]\n"
    )
}

fn main() {
    let one = limit(1, "");
    let three = format!("{one}{}{}", limit(60, "x"), limit(3600, "y"));
    let keys: Vec<String> = (0..10_000).map(|i| format!("k{i}")).collect();
    let n = 1_000_000;
    for (name, text) in [("cel_1_limit", one), ("cel_3_limits", three)] {
        let config = Config::parse("limits.yaml", &text).expect("the bench's file");
        let ns = config.namespace("bench").expect("its namespace");
        for round in 1..=3 {
            let start = Instant::now();
            let mut counters = 0;
            for key in keys.iter().cycle().take(n) {
                let mut bindings = Bindings::new([[("k", key.as_str())]]);
                counters += ns.applying(&mut bindings).expect("no error").len();
            }
            let per = start.elapsed().as_secs_f64() * 1e9 / n as f64;
            println!("{name}, round {round}: {per:.0} ns a request ({counters} counters)");
        }
    }
}
