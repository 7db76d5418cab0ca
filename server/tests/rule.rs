//! The policy model's run-time algorithm ([`Rule`]) is the core's algorithm exactly:
//! the same decisions and the same state bytes for any arrivals, and one parser gives the
//! same policy from TOML-shaped and JSON input.

use proptest::prelude::*;
use tollgate_core::{Algorithm, FixedWindow, SlidingLog, TokenBucket};
use tollgate_redis::LuaAlgorithm;
use tollgate_server::policy::{Built, Policy, Rate, Rule, Style};

/// Runs `arrivals` (gap, cost) through `a` and `b` side by side, comparing decisions and
/// encoded states at every step, and decoding each state back.
fn same<A: Algorithm, B: Algorithm>(a: &A, b: &B, arrivals: &[(u64, u64)]) {
    let (mut sa, mut sb, mut now) = (None, None, 0u64);
    for &(gap, cost) in arrivals {
        now += gap;
        let (da, na) = a.decide(sa, now, cost);
        let (db, nb) = b.decide(sb, now, cost);
        assert_eq!(da, db, "at {now}, cost {cost}");
        let ea = na.as_ref().map(|s| a.encode_to_vec(s));
        let eb = nb.as_ref().map(|s| b.encode_to_vec(s));
        assert_eq!(ea, eb);
        if let (Some(bytes), Some(state)) = (&eb, &nb) {
            assert_eq!(&b.decode(bytes).unwrap(), state);
        }
        (sa, sb) = (na, nb);
    }
}

fn arrivals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..3_000_000, 0u64..6), 1..60)
}

proptest! {
    #[test]
    fn a_rule_decides_as_its_algorithm(
        limit in 1u64..20,
        rate in 1u64..10,
        period in 1u64..5_000_000,
        arrivals in arrivals(),
    ) {
        let window = FixedWindow::new(limit, period).unwrap();
        same(&window, &Rule::Rate(Rate::FixedWindow(window)), &arrivals);
        let log = SlidingLog::new(limit, period).unwrap();
        same(&log, &Rule::Rate(Rate::SlidingLog(log)), &arrivals);
        let bucket = TokenBucket::new(limit, rate, period).unwrap();
        same(&bucket, &Rule::Rate(Rate::TokenBucket(bucket)), &arrivals);
        let ban = tollgate_core::Ban::new(bucket, 3, period, 2 * period).unwrap();
        let rule_ban = tollgate_core::Ban::new(Rate::TokenBucket(bucket), 3, period, 2 * period).unwrap();
        same(&ban, &Rule::Ban(rule_ban), &arrivals);
    }

    /// Every method of the scripts' trait is forwarded, the defaulted ones too: a bucket
    /// policy takes the scripts' fast path exactly when its bucket would.
    #[test]
    fn a_rule_calls_redis_as_its_algorithm(
        limit in 1u64..1_000_000,
        rate in 1u64..1_000_000,
        period in 1u64..10_000_000_000,
        cost in 0u64..2_000_000,
        relative in 0u64..u64::MAX,
        max_wait in proptest::option::of(0u64..1_000_000),
    ) {
        let bucket = TokenBucket::new(limit, rate, period).unwrap();
        let rule = Rule::Rate(Rate::TokenBucket(bucket));
        prop_assert_eq!(rule.lua_keys(), bucket.lua_keys());
        prop_assert_eq!(rule.lua_cost_cap(), bucket.lua_cost_cap());
        prop_assert_eq!(
            rule.lua_fast_arg(cost, None, max_wait),
            bucket.lua_fast_arg(cost, None, max_wait)
        );
        prop_assert_eq!(
            rule.lua_fast_decision(relative, cost, max_wait),
            bucket.lua_fast_decision(relative, cost, max_wait)
        );
        // Small buckets do take the fast path, so the comparison above is not of two Nones.
        if limit < 1000 && period < 1_000_000 && cost <= limit {
            prop_assert!(rule.lua_fast_arg(cost, None, max_wait).is_some());
        }
    }

    #[test]
    fn json_and_toml_read_the_same_policy(limit in 1u64..1000, seconds in 1u64..100) {
        let toml_text = format!(
            "algorithm = \"composite\"\napps = [\"web\"]\nlimits = [{{ algorithm = \"fixed-window\", limit = {limit}, period = \"{seconds}s\" }}]\nban = {{ threshold = 5, window = \"1m\", duration = \"1h\" }}\n"
        );
        let json_text = format!(
            r#"{{"algorithm":"composite","apps":["web"],"limits":[{{"algorithm":"fixed-window","limit":{limit},"period":"{seconds}s"}}],"ban":{{"threshold":5,"window":"1m","duration":"1h"}}}}"#
        );
        let from_toml: Policy = toml::from_str(&toml_text).unwrap();
        let from_json: Policy = serde_json::from_str(&json_text).unwrap();
        prop_assert_eq!(&from_toml, &from_json);
        // Written back and read again: the same policy.
        let again: Policy = serde_json::from_str(&serde_json::to_string(&from_json).unwrap()).unwrap();
        prop_assert_eq!(&again, &from_json);
        prop_assert!(matches!(from_json.build(Style::File), Ok(Built::Rule(Rule::BanComposite(_)))));
    }
}
