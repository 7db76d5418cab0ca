//! `share::Sharing`: one limit split among subscribers by demand.
//!
//! Properties, over random limits, settings, demands and live shares:
//! - the shares sum to at most the limit (exactly the limit with no live shares);
//! - each share is at least the floor among them (`min(floor, limit / n)`);
//! - with no spare (the wants do not fit), each share is at most its want
//!   (demand plus headroom, at least the floor);
//! - max-min fairness: a subscriber short of its want has no less than any other, less 1;
//! - hysteresis: fed its own shares back as live ones, the answer is unchanged.
//!
//! And `share::Ledger` with `share::grant`, over random holdings and callers:
//! - live shares never sum past the limit, whoever settles;
//! - a caller's growing subscriber never shrinks, a shrinking one reaches its target;
//! - one caller holding every subscriber reaches every target in one settle, with a
//!   joiner's floor kept back.

use proptest::prelude::*;
use sluicegate_core::share::{grant, Claim, Holding, Ledger, ShareError, Sharing};

fn shares(sharing: &Sharing, limit: u64, claims: &[Claim]) -> Vec<u64> {
    let mut out = vec![0; claims.len()];
    sharing.share(limit, claims, &mut out).unwrap();
    out
}

fn fresh(demands: &[u64]) -> Vec<Claim> {
    demands
        .iter()
        .map(|&demand| Claim {
            demand,
            current: None,
        })
        .collect()
}

fn sharings() -> impl Strategy<Value = Sharing> {
    (0u64..50, 0u64..100, 0u64..20).prop_map(|(floor, headroom, hysteresis)| Sharing {
        floor,
        headroom_percent: headroom,
        hysteresis_percent: hysteresis,
    })
}

fn demands() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(prop_oneof![0u64..20, 0u64..2_000, Just(u64::MAX)], 0..25)
}

#[test]
fn a_hot_and_two_cold_subscribers() {
    let sharing = Sharing {
        floor: 5,
        headroom_percent: 20,
        hysteresis_percent: 5,
    };
    // Cold ones want 10 + 2 = 12 each; the hot one takes the rest.
    assert_eq!(shares(&sharing, 100, &fresh(&[10, 500, 10])), [12, 76, 12]);
    // Everyone fits: wants 12, 24, 5 (floor); the spare 59 split 20, 20, 19.
    assert_eq!(shares(&sharing, 100, &fresh(&[10, 20, 0])), [32, 44, 24]);
}

#[test]
fn a_limit_too_small_for_every_floor_splits_it_equally_rounded_down() {
    let sharing = Sharing {
        floor: 10,
        headroom_percent: 0,
        hysteresis_percent: 0,
    };
    assert_eq!(shares(&sharing, 2, &fresh(&[5, 5, 5])), [1, 1, 0]);
    assert_eq!(shares(&sharing, 0, &fresh(&[5, 5])), [0, 0]);
}

#[test]
fn a_small_move_keeps_the_live_share_and_a_large_one_does_not() {
    let sharing = Sharing {
        floor: 1,
        headroom_percent: 0,
        hysteresis_percent: 5,
    };
    let claims = |current: [u64; 2]| {
        [
            Claim {
                demand: 50,
                current: Some(current[0]),
            },
            Claim {
                demand: 1_000,
                current: Some(current[1]),
            },
        ]
    };
    // New shares would be 50 and 50: 48 and 52 are within 5 %.
    assert_eq!(shares(&sharing, 100, &claims([48, 52])), [48, 52]);
    assert_eq!(shares(&sharing, 100, &claims([40, 60])), [50, 50]);
}

#[test]
fn mismatched_lengths_are_an_error() {
    let sharing = Sharing {
        floor: 0,
        headroom_percent: 0,
        hysteresis_percent: 0,
    };
    let e = sharing.share(10, &fresh(&[1, 2]), &mut [0]).unwrap_err();
    assert_eq!(
        e,
        ShareError {
            claims: 2,
            shares: 1
        }
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn shares_keep_the_limit_the_floor_and_the_want(
        sharing in sharings(),
        limit in prop_oneof![0u64..100, 0u64..1_000_000],
        demands in demands(),
    ) {
        let claims = fresh(&demands);
        let got = shares(&sharing, limit, &claims);
        let sum: u128 = got.iter().map(|&s| u128::from(s)).sum();
        if claims.is_empty() {
            prop_assert_eq!(sum, 0);
        } else {
            prop_assert_eq!(sum, u128::from(limit));
        }
        let floor = sharing.floor_among(limit, claims.len());
        let wants: Vec<u64> = demands.iter().map(|&d| sharing.want(d, floor).min(limit)).collect();
        let spare = wants.iter().map(|&w| u128::from(w)).sum::<u128>() <= u128::from(limit);
        for (i, &share) in got.iter().enumerate() {
            prop_assert!(share >= floor, "share {} under floor {}", share, floor);
            if !spare {
                prop_assert!(share <= wants[i], "share {} over want {}", share, wants[i]);
            }
            if share < wants[i] {
                let most = got.iter().max().copied().unwrap_or(0);
                prop_assert!(share + 1 >= most, "short {} but another has {}", share, most);
            }
        }
    }

    #[test]
    fn live_shares_never_take_the_sum_over_the_limit(
        sharing in sharings(),
        limit in 0u64..10_000,
        pairs in prop::collection::vec((0u64..5_000, prop::option::of(0u64..10_000)), 0..25),
    ) {
        let claims: Vec<Claim> = pairs
            .iter()
            .map(|&(demand, current)| Claim { demand, current })
            .collect();
        let got = shares(&sharing, limit, &claims);
        let sum: u64 = got.iter().sum();
        prop_assert!(sum <= limit, "{} over {}", sum, limit);
        let floor = sharing.floor_among(limit, claims.len());
        prop_assert!(got.iter().all(|&s| s >= floor));
    }

    #[test]
    fn shares_fed_back_as_live_ones_stay(
        sharing in sharings(),
        limit in 0u64..100_000,
        demands in demands(),
    ) {
        let first = shares(&sharing, limit, &fresh(&demands));
        let live: Vec<Claim> = demands
            .iter()
            .zip(&first)
            .map(|(&demand, &share)| Claim { demand, current: Some(share) })
            .collect();
        prop_assert_eq!(shares(&sharing, limit, &live), first);
    }
}

const LEDGER: Ledger = Ledger {
    floor_divisor: 20,
    headroom_percent: 20,
    hysteresis_percent: 5,
};

/// Every holding's new target from `LEDGER`, as a host settles before granting.
fn retarget(limit: u64, holdings: &mut [Holding]) {
    let claims: Vec<Claim> = holdings
        .iter()
        .map(|h| Claim {
            demand: h.demand,
            current: h.target,
        })
        .collect();
    let mut targets = vec![0; claims.len()];
    LEDGER.targets(limit, &claims, &mut targets).unwrap();
    for (h, t) in holdings.iter_mut().zip(targets) {
        h.target = Some(t);
    }
}

fn live_sum(holdings: &[Holding]) -> u64 {
    holdings.iter().map(|h| h.live.unwrap_or(0)).sum()
}

#[test]
fn a_joiner_gets_the_floor_kept_back_before_the_others_shrink() {
    // Two hot subscribers on one replica settle: 1000 less a floor of 25 kept back.
    let hot = Holding {
        demand: 1_000,
        ..Holding::default()
    };
    let mut holdings = vec![hot, hot];
    retarget(1_000, &mut holdings);
    grant(1_000, &mut holdings, |_| true);
    assert_eq!(live_sum(&holdings), 975);
    // A joiner on another replica settles first: it gets its floor (1000 / 3 / 20) at once.
    holdings.push(Holding::default());
    retarget(1_000, &mut holdings);
    grant(1_000, &mut holdings, |i| i == 2);
    assert_eq!(holdings[2].live, Some(16), "{holdings:?}");
    // The first replica settles, its two shrink; the joiner's next settle reaches its target.
    grant(1_000, &mut holdings, |i| i < 2);
    grant(1_000, &mut holdings, |i| i == 2);
    let targets: Vec<_> = holdings.iter().map(|h| h.target).collect();
    let live: Vec<_> = holdings.iter().map(|h| h.live).collect();
    assert_eq!(live, targets);
}

fn holdings() -> impl Strategy<Value = (u64, Vec<Holding>)> {
    (
        1u64..5_000,
        prop::collection::vec((0u64..4_000, any::<bool>(), any::<bool>()), 0..20),
    )
        .prop_map(|(limit, raw)| {
            // Live shares summing to at most the limit, as a ledger keeps them.
            let mut left = limit;
            let holdings = raw
                .into_iter()
                .map(|(demand, has_live, has_target)| {
                    let live = has_live.then(|| {
                        let live = (demand % (limit + 1)).min(left);
                        left -= live;
                        live
                    });
                    let target = has_target.then_some(demand / 2);
                    Holding {
                        demand,
                        target,
                        live,
                    }
                })
                .collect();
            (limit, holdings)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn settling_never_takes_live_shares_past_the_limit(
        (limit, mut holdings) in holdings(),
        callers in prop::collection::vec(any::<u32>(), 1..6),
    ) {
        for caller in callers {
            retarget(limit, &mut holdings);
            let before = holdings.clone();
            let mine = |i: usize| (caller >> (i % 32)) & 1 == 1;
            grant(limit, &mut holdings, mine);
            prop_assert!(live_sum(&holdings) <= limit, "{holdings:?}");
            for (i, (old, new)) in before.iter().zip(&holdings).enumerate() {
                let (was, now, target) =
                    (old.live.unwrap_or(0), new.live.unwrap_or(0), new.target.unwrap_or(0));
                if !mine(i) {
                    prop_assert_eq!(old, new);
                } else if target <= was {
                    prop_assert_eq!(now, target);
                } else {
                    prop_assert!(was <= now && now <= target, "{:?} -> {:?}", old, new);
                }
            }
        }
    }

    #[test]
    fn one_caller_holding_everyone_reaches_every_target((limit, mut holdings) in holdings()) {
        retarget(limit, &mut holdings);
        grant(limit, &mut holdings, |_| true);
        for h in &holdings {
            prop_assert_eq!(h.live, h.target);
        }
        let (_, reserve) = LEDGER.sharing(limit, holdings.len());
        prop_assert!(live_sum(&holdings) <= limit - reserve);
    }
}
