//! Random limits files and requests decided by the served limits, in this process and
//! in Redis, against a reference written here from limitador's rules: every limit whose
//! conditions hold applies, a variable whose key is missing skips its limit, the request
//! is admitted on all counters or none, and each counter's window starts at its first
//! counted hit.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use sluicegate_core::{FailPolicy, Ticks, SECOND};
use sluicegate_policy::limitador::Config;

use super::{Asked, Counters, InMemory, InRedisCounters, Limits, Mode};
use crate::limiters::coalesce::Coalescer;

const KEYS: [&str; 3] = ["a", "b", "c"];

/// A limit: max_value, seconds, conditions (key, value) and variables (keys).
type Spec = (u64, u64, Vec<(usize, u8)>, Vec<usize>);

fn spec() -> impl Strategy<Value = Spec> {
    (
        0..4u64,
        1..3u64,
        prop::collection::vec((0..3usize, 1..3u8), 0..3),
        prop::collection::vec(0..3usize, 0..3),
    )
}

/// A request: each key's value if present, the delta, the gap before it in ms.
type Call = ([Option<u8>; 3], u64, u64);

fn call() -> impl Strategy<Value = Call> {
    let value = prop::option::of(1..3u8);
    (
        [value.clone(), value.clone(), value],
        1..3u64,
        prop_oneof![Just(0u64), Just(300), Just(1000), Just(2500)],
    )
}

fn file(namespace: &str, specs: &[Spec]) -> String {
    let mut text = String::new();
    for (max, seconds, conditions, variables) in specs {
        let conditions: Vec<String> = conditions
            .iter()
            .map(|(k, v)| format!("'descriptors[0][\"{}\"] == \"{v}\"'", KEYS[*k]))
            .collect();
        let variables: Vec<String> = variables
            .iter()
            .map(|k| format!("'descriptors[0][\"{}\"]'", KEYS[*k]))
            .collect();
        text.push_str(&format!(
            "- namespace: {namespace}\n  max_value: {max}\n  seconds: {seconds}\n  conditions: [{}]\n  variables: [{}]\n",
            conditions.join(", "),
            variables.join(", ")
        ));
    }
    text
}

/// A limit as the reference holds it: max_value, period, conditions, variables.
type RefLimit = (u64, Ticks, BTreeSet<(usize, u8)>, BTreeSet<usize>);

/// The reference: the limits (identities deduplicated, the first kept) and each
/// counter's (start, count).
struct Reference {
    limits: Vec<RefLimit>,
    counters: HashMap<(usize, Vec<u8>), (Ticks, u64)>,
}

impl Reference {
    fn new(specs: &[Spec]) -> Self {
        let mut limits: Vec<RefLimit> = Vec::new();
        for (max, seconds, conditions, variables) in specs {
            let limit = (
                *max,
                seconds * SECOND,
                conditions.iter().copied().collect(),
                variables.iter().copied().collect(),
            );
            if !limits
                .iter()
                .any(|l| (l.1, &l.2, &l.3) == (limit.1, &limit.2, &limit.3))
            {
                limits.push(limit);
            }
        }
        Self {
            limits,
            counters: HashMap::new(),
        }
    }

    /// Admitted, and each applying counter's remaining after.
    fn decide(&mut self, values: &[Option<u8>; 3], delta: u64, now: Ticks) -> (bool, Vec<u64>) {
        let applying: Vec<(usize, Vec<u8>)> = self
            .limits
            .iter()
            .enumerate()
            .filter(|(_, (_, _, conds, _))| conds.iter().all(|(k, v)| values[*k] == Some(*v)))
            .filter_map(|(i, (_, _, _, vars))| {
                let key: Option<Vec<u8>> = vars.iter().map(|k| values[*k]).collect();
                Some((i, key?))
            })
            .collect();
        let live = |counters: &HashMap<(usize, Vec<u8>), (Ticks, u64)>, c: &(usize, Vec<u8>)| {
            let period = self.limits[c.0].1;
            counters
                .get(c)
                .filter(|(start, _)| now < start + period)
                .copied()
        };
        let admitted = applying.iter().all(|c| {
            let max = self.limits[c.0].0;
            max > 0 && live(&self.counters, c).map_or(0, |s| s.1) + delta <= max
        });
        if admitted {
            for c in &applying {
                let next = match live(&self.counters, c) {
                    Some((start, count)) => (start, count + delta),
                    None => (now, delta),
                };
                self.counters.insert(c.clone(), next);
            }
        }
        let remaining = applying
            .iter()
            .map(|c| {
                let count = live(&self.counters, c).map_or(0, |s| s.1);
                self.limits[c.0].0.saturating_sub(count)
            })
            .collect();
        (admitted, remaining)
    }
}

/// Runs `calls` on the file of `specs` through `counters` and the reference.
async fn same_as_reference(
    counters: &dyn Counters,
    namespace: &str,
    specs: &[Spec],
    calls: &[Call],
) -> Result<(), TestCaseError> {
    let config = Config::parse("limits.yaml", &file(namespace, specs)).expect("a valid file");
    let limits = Limits::build(config);
    let ns = limits.config.namespace(namespace).expect("the namespace");
    let mut reference = Reference::new(specs);
    let mut now: Ticks = 1_790_000_000 * SECOND;
    for (values, delta, gap_ms) in calls {
        now += gap_ms * 1000;
        let entries: Vec<(&str, &str)> = KEYS
            .iter()
            .zip(values)
            .filter_map(|(k, v)| Some((*k, ["", "1", "2"][usize::from((*v)?)])))
            .collect();
        let asked = Asked {
            namespace,
            descriptors: vec![entries],
            delta: *delta,
            mode: Mode::CheckAndUpdate,
            now: Some(now),
        };
        let answer = limits.decide(ns, counters, &asked).await.expect("decided");
        let (admitted, remaining) = reference.decide(values, *delta, now);
        prop_assert_eq!(answer.admitted, admitted);
        let got: Vec<u64> = answer
            .counters
            .iter()
            .map(|c| c.figures.remaining)
            .collect();
        prop_assert_eq!(got, remaining);
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

proptest! {
    #[test]
    fn in_memory_as_the_reference(specs in prop::collection::vec(spec(), 1..6), calls in prop::collection::vec(call(), 1..40)) {
        let counters = InMemory::new(10_000);
        runtime().block_on(same_as_reference(&counters, "ns", &specs, &calls))?;
    }
}

/// A Redis started for a test, a runtime, a connection to it and a queue on that.
fn in_redis() -> (
    sluicegate_test_support::Server,
    tokio::runtime::Runtime,
    sluicegate_redis::ReconnectingAsync,
    Coalescer<super::redis::Script>,
) {
    let redis = sluicegate_test_support::Server::start();
    let rt = runtime();
    let timeout = std::time::Duration::from_secs(2);
    // The connection's task needs the runtime.
    let con = rt
        .block_on(async { sluicegate_redis::ReconnectingAsync::open(&redis.url(), None, timeout) })
        .expect("a connection");
    let coalescer = rt.block_on(async { Coalescer::start(con.clone()) });
    (redis, rt, con, coalescer)
}

/// The same in Redis, through the one script (a namespace per case: no flush).
#[test]
fn in_redis_as_the_reference() {
    let (_redis, rt, con, coalescer) = in_redis();
    let counters = InRedisCounters::new(con, coalescer, FailPolicy::Error);
    let case = AtomicUsize::new(0);
    let strategy = (
        prop::collection::vec(spec(), 1..6),
        prop::collection::vec(call(), 1..40),
    );
    proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64))
        .run(&strategy, |(specs, calls)| {
            let namespace = format!("ns{}", case.fetch_add(1, Ordering::Relaxed));
            rt.block_on(same_as_reference(&counters, &namespace, &specs, &calls))
        })
        .expect("Redis decides as the reference");
}

/// The script and the core, call by call on the same counters (any mode, time
/// passing): the same verdicts and figures, and in Redis the core's exact bytes.
#[test]
fn the_script_stores_the_cores_bytes() {
    use super::counters::{apply_states, Counter};
    use redis::AsyncCommands;
    use sluicegate_core::{Algorithm, AnchoredWindow};

    let (_redis, rt, con, coalescer) = in_redis();
    let counters = InRedisCounters::new(con.clone(), coalescer, FailPolicy::Error);
    let case = AtomicUsize::new(0);
    let modes = [Mode::CheckAndUpdate, Mode::Check, Mode::Update];
    let strategy = (
        prop::collection::vec((0..4u64, 1..3u64), 1..4),
        prop::collection::vec(
            (
                0..3usize,
                0..4u64,
                prop_oneof![Just(0u64), Just(700), Just(1500)],
            ),
            1..30,
        ),
    );
    proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64))
        .run(&strategy, |(params, calls)| {
            let n = case.fetch_add(1, Ordering::Relaxed);
            let keyed: Vec<Counter> = params
                .iter()
                .enumerate()
                .map(|(i, &(limit, seconds))| Counter {
                    key: format!("sluicegate:limitador:{{bytes{n}}}:{i}"),
                    window: AnchoredWindow::new(limit, seconds * SECOND).ok(),
                })
                .collect();
            let windows: Vec<_> = keyed.iter().map(|c| c.window).collect();
            let mut states = vec![None; keyed.len()];
            let mut now: Ticks = 1_790_000_000 * SECOND;
            rt.block_on(async {
                let mut con = con.clone();
                for (mode, delta, gap_ms) in calls {
                    now += gap_ms * 1000;
                    let mode = modes[mode];
                    let core = apply_states(&windows, &mut states, now, delta, mode);
                    let script = counters
                        .apply(&keyed, delta, mode, Some(now))
                        .await
                        .expect("the script answers");
                    prop_assert_eq!(&script, &core);
                    for ((counter, state), window) in keyed.iter().zip(&states).zip(&windows) {
                        let stored: Option<Vec<u8>> = con.get(&counter.key).await.expect("GET");
                        let live =
                            window.and_then(|w| w.live(*state, now).map(|s| w.encode_to_vec(&s)));
                        // An ended window's key may linger until its expiry: compare live ones.
                        if live.is_some() {
                            prop_assert_eq!(&stored, &live);
                        }
                    }
                }
                Ok(())
            })
        })
        .expect("the script decides and stores as the core");
}

/// Concurrent requests' calls share pipelines, each still all or nothing, and a script
/// the server lost is loaded again: on one counter of 10, 40 concurrent requests after
/// `SCRIPT FLUSH` admit exactly 10, in fewer round trips than requests.
#[test]
fn concurrent_calls_share_pipelines() {
    use super::counters::Counter;
    use sluicegate_core::AnchoredWindow;

    let (_redis, rt, con, coalescer) = in_redis();
    let counters = InRedisCounters::new(con.clone(), coalescer.clone(), FailPolicy::Error);
    let keyed = [Counter {
        key: "sluicegate:limitador:{shared}:0".into(),
        window: AnchoredWindow::new(10, 60 * SECOND).ok(),
    }];
    let admitted = rt.block_on(async {
        let mut flushing = con.clone();
        let mut flush = redis::cmd("SCRIPT");
        flush.arg("FLUSH");
        flush
            .query_async::<()>(&mut flushing)
            .await
            .expect("SCRIPT FLUSH");
        let calls = (0..40).map(|_| counters.apply(&keyed, 1, Mode::CheckAndUpdate, None));
        let counted = futures_util::future::join_all(calls).await;
        counted
            .into_iter()
            .filter(|c| c.as_ref().expect("an answer").admitted)
            .count()
    });
    assert_eq!(admitted, 10);
    let sent = coalescer.sent();
    let (pipelines, calls) = (
        sent.pipelines.load(Ordering::Relaxed),
        sent.decisions.load(Ordering::Relaxed),
    );
    assert_eq!(calls, 40);
    assert!(pipelines < 40, "{pipelines} pipelines for 40 calls");
}

/// Calls sharing a batch: a call whose counter holds another type fails alone, before
/// and after it the others count, another namespace's in a command of its own.
#[test]
fn a_calls_error_leaves_its_batch_be() {
    use super::counters::Counter;
    use redis::AsyncCommands;
    use sluicegate_core::AnchoredWindow;

    let (_redis, rt, con, coalescer) = in_redis();
    let counters = InRedisCounters::new(con.clone(), coalescer.clone(), FailPolicy::Error);
    let counter = |key: &str, limit| Counter {
        key: key.into(),
        window: AnchoredWindow::new(limit, 60 * SECOND).ok(),
    };
    let (ok, list, other) = (
        [counter("sluicegate:limitador:{b}:ok", 10)],
        [counter("sluicegate:limitador:{b}:list", 10)],
        [counter("sluicegate:limitador:{c}:ok", 5)],
    );
    let calls = [&ok, &ok, &list, &other, &ok];
    let counted = rt.block_on(async {
        let mut con = con.clone();
        let _: () = con.rpush(&list[0].key, 1).await.expect("RPUSH");
        let calls = calls.map(|c| counters.apply(c, 1, Mode::CheckAndUpdate, None));
        futures_util::future::join_all(calls).await
    });
    let remaining: Vec<_> = counted
        .iter()
        .map(|c| c.as_ref().map(|c| (c.admitted, c.figures[0].remaining)))
        .collect();
    assert!(matches!(&remaining[2], Err(e) if e.to_string().contains("foreign list")));
    let others = [0, 1, 3, 4].map(|i| remaining[i].as_ref().ok().copied());
    assert_eq!(others, [9, 8, 4, 7].map(|left| Some((true, left))));
    // The first call alone, then the others in one batch.
    assert_eq!(coalescer.sent().pipelines.load(Ordering::Relaxed), 2);
}
