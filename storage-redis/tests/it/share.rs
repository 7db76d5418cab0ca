//! `RedisShares` against the core's `share::Ledger` and `share::grant`, on a real
//! `redis-server`: random sequences of settles by three replicas (subscribers joining,
//! reporting new demands, leaving, expiring as time passes), each replica sending the
//! live shares it was granted; after every settle the grants and every field of the
//! limit's hash equal a model built from the core.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use sluicegate_core::share::{grant, Claim, Holding, Ledger};
use sluicegate_redis::{Error, RedisShares, Subscription, MAX_SHARED_LIMIT};

use crate::common::{self, Server};

const LEDGER: Ledger = Ledger {
    floor_divisor: 20,
    headroom_percent: 20,
    hysteresis_percent: 5,
};
const TTL_MS: u64 = 15_000;

/// One settle: a replica, the milliseconds since the last settle, and per subscriber
/// number of that replica (0..4) a demand, or `None` for leaving.
type Step = (u8, u64, Vec<(u8, Option<u64>)>);

fn steps() -> impl Strategy<Value = (u64, Vec<Step>)> {
    let demand = prop_oneof![
        Just(None),
        (0u64..3_000).prop_map(Some),
        Just(Some(u64::MAX))
    ];
    let step = (
        0u8..3,
        0u64..20_000,
        prop::collection::vec((0u8..4, demand), 0..4),
    );
    (
        prop_oneof![1u64..50, 50u64..100_000, Just(MAX_SHARED_LIMIT)],
        prop::collection::vec(step, 1..24),
    )
}

/// The model: each field's holding and expiry.
type Model = BTreeMap<String, (Holding, u64)>;

/// What the script should do, on the model.
fn settle(
    model: &mut Model,
    limit: u64,
    now: u64,
    leaving: &[String],
    mine: &[(String, u64, Option<u64>)],
) -> Vec<(u64, u64)> {
    model.retain(|_, (_, expires)| *expires > now);
    for field in leaving {
        model.remove(field);
    }
    for (field, demand, live) in mine {
        let (holding, expires) = model.entry(field.clone()).or_default();
        holding.demand = (*demand).min(limit);
        holding.live = *live;
        *expires = now + TTL_MS;
    }
    let claims: Vec<Claim> = model
        .values()
        .map(|(h, _)| Claim {
            demand: h.demand,
            current: h.target,
        })
        .collect();
    let mut targets = vec![0; claims.len()];
    LEDGER.targets(limit, &claims, &mut targets).unwrap();
    let mut holdings: Vec<Holding> = model.values().map(|(h, _)| *h).collect();
    for (h, t) in holdings.iter_mut().zip(targets) {
        h.target = Some(t);
    }
    let names: Vec<String> = model.keys().cloned().collect();
    let is_mine = |i: usize| mine.iter().any(|(f, ..)| *f == names[i]);
    grant(limit, &mut holdings, is_mine);
    for ((_, (h, _)), new) in model.iter_mut().zip(holdings) {
        *h = new;
    }
    let settled = |h: &Holding| (h.live.unwrap_or(0), h.target.unwrap_or(0));
    mine.iter().map(|(f, ..)| settled(&model[f].0)).collect()
}

fn record((h, expires): &(Holding, u64)) -> String {
    let opt = |x: Option<u64>| x.map_or(-1, |x| x as i64);
    format!("{} {} {} {expires}", h.demand, opt(h.target), opt(h.live))
}

#[test]
fn settles_as_the_core_does() {
    let server = Server::start();
    let (runtime, con) = server.multiplexed();
    let shares = RedisShares::new(LEDGER, Duration::from_millis(TTL_MS));
    common::cases(&server, 64, steps(), |_, (limit, steps)| {
        runtime.block_on(async {
            let mut con = con.clone();
            let key = common::fresh("{share}");
            let (mut model, mut now) = (Model::new(), 1_790_000_000_000u64);
            for (replica, gap, subscribers) in steps {
                now += gap;
                let field = |n: u8| format!("r{replica}:s{n}");
                let mut leaving = Vec::new();
                let mut mine: Vec<(String, u64, Option<u64>)> = Vec::new();
                for (n, demand) in subscribers {
                    let f = field(n);
                    if leaving.contains(&f) || mine.iter().any(|(m, ..)| *m == f) {
                        continue;
                    }
                    match demand {
                        None => leaving.push(f),
                        Some(d) => {
                            let live = model
                                .get(&f)
                                .and_then(|(h, e)| (*e > now).then_some(h.live))
                                .flatten();
                            mine.push((f, d, live));
                        }
                    }
                }
                let expected = settle(&mut model, limit, now, &leaving, &mine);
                let leaving_refs: Vec<&str> = leaving.iter().map(String::as_str).collect();
                let subs: Vec<Subscription> = mine
                    .iter()
                    .map(|(field, demand, live)| Subscription {
                        field,
                        demand: *demand,
                        live: *live,
                    })
                    .collect();
                let got = shares
                    .settle(&mut con, &key, limit, Some(now), &leaving_refs, &subs)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&got, &expected);
                let live: u64 = model.values().map(|(h, _)| h.live.unwrap_or(0)).sum();
                prop_assert!(live <= limit);
                let stored: BTreeMap<String, String> =
                    redis::AsyncCommands::hgetall(&mut con, &key).await.unwrap();
                let modelled: BTreeMap<String, String> =
                    model.iter().map(|(f, h)| (f.clone(), record(h))).collect();
                prop_assert_eq!(stored, modelled);
            }
            Ok(())
        })
    });
}

#[test]
fn a_limit_beyond_the_exact_range_is_refused() {
    let server = Server::start();
    let (runtime, con) = server.multiplexed();
    runtime.block_on(async {
        let mut con = con.clone();
        let shares = RedisShares::new(LEDGER, Duration::from_secs(15));
        let mine = [Subscription {
            field: "a",
            demand: 1,
            live: None,
        }];
        let refused = shares
            .settle(&mut con, "{share}x", MAX_SHARED_LIMIT + 1, None, &[], &mine)
            .await;
        assert!(
            matches!(refused, Err(Error::OutOfRange { .. })),
            "{refused:?}"
        );
        // The server's clock: a first subscriber gets the limit less the reserve.
        let granted = shares
            .settle(&mut con, "{share}x", 100, None, &[], &mine)
            .await
            .unwrap();
        assert_eq!(granted, [(95, 95)]);
    });
}
