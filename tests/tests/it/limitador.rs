//! sluicegate beside the `limitador` crate itself, in memory: random limits files (1–5
//! limits, conditions and variables over three keys of `descriptors[0]`, in the forms
//! Kuadrant writes and a few others) and random requests, each decided by limitador and
//! by sluicegate's reading of the file (its parser and CEL, then the core's anchored
//! windows decided together), demanding the same answer every time. Time does not pass
//! (hour-long windows): limitador reads the clock itself.

use std::collections::HashMap;

use proptest::prelude::*;
use sluicegate_core::state::AnchoredWindowState;
use sluicegate_core::{decide_all, AnchoredWindow, SECOND};
use sluicegate_policy::limitador::{Bindings, Config};

const KEYS: [&str; 3] = ["a", "b", "c"];

/// A condition's text over key `k` and value `v`, in one of several forms.
fn condition(form: u8, k: usize, v: u8) -> String {
    let key = KEYS[k];
    // No method on a missing key: limitador panics on the error it gives.
    match form % 3 {
        0 => format!("descriptors[0][\"{key}\"] == \"{v}\""),
        1 => format!("descriptors[0].{key} != \"{v}\""),
        _ => format!("descriptors[0][\"{key}\"] in [\"{v}\", \"12\"]"),
    }
}

/// A variable's text over key `k`.
fn variable(form: u8, k: usize) -> String {
    match form % 2 {
        0 => format!("descriptors[0][\"{}\"]", KEYS[k]),
        _ => format!("descriptors[0].{} + \"-\"", KEYS[k]),
    }
}

/// max_value, conditions (form, key, value) and variables (form, key).
type Spec = (u64, Vec<(u8, usize, u8)>, Vec<(u8, usize)>);

fn spec() -> impl Strategy<Value = Spec> {
    (
        0..4u64,
        prop::collection::vec((any::<u8>(), 0..3usize, 1..3u8), 0..3),
        prop::collection::vec((any::<u8>(), 0..3usize), 0..3),
    )
}

/// A request: each key's value if present ("1", "2" or "12"), and the delta.
fn request() -> impl Strategy<Value = ([Option<u8>; 3], u64)> {
    let value = prop::option::of(0..3u8);
    ([value.clone(), value.clone(), value], 1..3u64)
}

fn file(specs: &[Spec]) -> String {
    let quoted = |texts: Vec<String>| {
        texts
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    specs
        .iter()
        .map(|(max, conditions, variables)| {
            let c = conditions.iter().map(|&(f, k, v)| condition(f, k, v)).collect();
            let v = variables.iter().map(|&(f, k)| variable(f, k)).collect();
            format!(
                "- {{namespace: ns, max_value: {max}, seconds: 3600, conditions: [{}], variables: [{}]}}\n",
                quoted(c),
                quoted(v)
            )
        })
        .collect()
}

/// limitador's limits for `specs` (each identity once, the first kept, as it does).
fn theirs(specs: &[Spec]) -> limitador::RateLimiter {
    let limiter = limitador::RateLimiter::new(10_000);
    for (max, conditions, variables) in specs {
        let conditions = conditions
            .iter()
            .map(|&(f, k, v)| limitador::limit::Predicate::parse(condition(f, k, v)).unwrap());
        let variables = variables
            .iter()
            .map(|&(f, k)| limitador::limit::Expression::parse(variable(f, k)).unwrap());
        let limit = limitador::limit::Limit::new("ns", *max, 3600, conditions, variables);
        limiter.add_limit(limit);
    }
    limiter
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decides_as_limitador(specs in prop::collection::vec(spec(), 1..6), requests in prop::collection::vec(request(), 1..30)) {
        let limiter = theirs(&specs);
        let config = Config::parse("limits.yaml", &file(&specs)).unwrap();
        let ns = config.namespace("ns").unwrap();
        let mut states: HashMap<String, AnchoredWindowState> = HashMap::new();
        let now = 1_790_000_000 * SECOND;
        for (values, delta) in requests {
            let entries: Vec<(&str, &str)> = KEYS
                .iter()
                .zip(values)
                .filter_map(|(k, v)| Some((*k, ["1", "2", "12"][usize::from(v?)])))
                .collect();
            let mut context = limitador::limit::Context::default();
            let map = entries.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            context.list_binding("descriptors".into(), vec![map]);
            let limited = limiter
                .check_rate_limited_and_update(&"ns".into(), &context, delta)
                .unwrap()
                .limited;
            let applying = ns.applying(&mut Bindings::new([entries.iter().copied()])).unwrap();
            let keys: Vec<String> = applying.iter().map(|(i, values)| format!("{i}{values:?}")).collect();
            let windows: Vec<Option<AnchoredWindow>> = applying
                .iter()
                .map(|(i, _)| AnchoredWindow::new(ns.limits[*i].max_value, 3600 * SECOND).ok())
                .collect();
            // A max_value of 0 has no window: it refuses the request.
            let admitted = windows.iter().all(Option::is_some) && {
                let open: Vec<AnchoredWindow> = windows.iter().flatten().copied().collect();
                let mut held: Vec<_> = keys.iter().map(|k| states.get(k).copied()).collect();
                let admitted = decide_all(&open, &mut held, now, delta);
                for (key, state) in keys.iter().zip(held) {
                    if let Some(state) = state {
                        states.insert(key.clone(), state);
                    }
                }
                admitted
            };
            prop_assert_eq!(admitted, !limited, "{:?} on {}", entries, file(&specs));
        }
    }
}
