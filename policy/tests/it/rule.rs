//! A policy builds the core's algorithm exactly (`Built::Rule(AnyAlgorithm)`): the same
//! decisions and the same state bytes for any arrivals, and one parser gives the same
//! policy from TOML-shaped and JSON input.

use proptest::collection::vec;
use proptest::prelude::*;
use sluicegate_core::{
    Algorithm, AnyAlgorithm, Ban, Composite, FixedWindow, SlidingLog, TokenBucket,
};
use sluicegate_policy::{Built, Policy, Style};

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

/// The rate `policy` (JSON) builds.
fn built(policy: &str) -> AnyAlgorithm {
    let policy: Policy = serde_json::from_str(policy).unwrap();
    match policy.build(Style::File) {
        Ok(Built::Rule(rule)) => rule,
        other => panic!("{policy:?} built {other:?}"),
    }
}

proptest! {
    /// Any parameters over the tested ranges (periods of a few µs too), any arrivals:
    /// gaps below 3 s, costs below 6.
    #[test]
    fn a_policy_decides_as_its_algorithm(
        limit in 1u64..20,
        rate in 1u64..10,
        period in prop_oneof![1u64..100, 1u64..5_000_000],
        arrivals in vec((0u64..3_000_000, 0u64..6), 60),
    ) {
        let p = format!("\"period\":\"{period}us\"");
        let window = FixedWindow::new(limit, period).unwrap();
        let rule = built(&format!(
            r#"{{"algorithm":"fixed-window","limit":{limit},{p}}}"#
        ));
        assert_eq!(rule, AnyAlgorithm::FixedWindow(window));
        same(&window, &rule, &arrivals);
        let log = SlidingLog::new(limit, period).unwrap();
        let rule = built(&format!(
            r#"{{"algorithm":"sliding-log","limit":{limit},{p}}}"#
        ));
        assert_eq!(rule, AnyAlgorithm::SlidingLog(log));
        same(&log, &rule, &arrivals);
        let bucket = TokenBucket::new(limit, rate, period).unwrap();
        let params = format!(r#""capacity":{limit},"rate":{rate},{p}"#);
        let rule = built(&format!(r#"{{"algorithm":"token-bucket",{params}}}"#));
        assert_eq!(rule, AnyAlgorithm::TokenBucket(bucket));
        same(&bucket, &rule, &arrivals);
        let ban = Ban::new(bucket, 3, period, 2 * period).unwrap();
        let rule = built(&format!(
            r#"{{"algorithm":"token-bucket",{params},"ban":{{"threshold":3,"window":"{period}us","duration":"{}us"}}}}"#,
            2 * period
        ));
        let any_ban = Ban::new(AnyAlgorithm::TokenBucket(bucket), 3, period, 2 * period).unwrap();
        assert_eq!(rule, AnyAlgorithm::from(any_ban));
        same(&ban, &rule, &arrivals);
    }
}

#[test]
fn json_and_toml_read_the_same_policy() {
    for (limit, seconds) in [(1, 1), (2, 99), (17, 5), (500, 60), (999, 13)] {
        let toml_text = format!(
            "algorithm = \"composite\"\napps = [\"web\"]\nlimits = [{{ algorithm = \"fixed-window\", limit = {limit}, period = \"{seconds}s\" }}]\nban = {{ threshold = 5, window = \"1m\", duration = \"1h\" }}\n"
        );
        let json_text = format!(
            r#"{{"algorithm":"composite","apps":["web"],"limits":[{{"algorithm":"fixed-window","limit":{limit},"period":"{seconds}s"}}],"ban":{{"threshold":5,"window":"1m","duration":"1h"}}}}"#
        );
        let from_toml: Policy = toml::from_str(&toml_text).unwrap();
        let from_json: Policy = serde_json::from_str(&json_text).unwrap();
        assert_eq!(&from_toml, &from_json);
        // Written back and read again: the same policy.
        let again: Policy =
            serde_json::from_str(&serde_json::to_string(&from_json).unwrap()).unwrap();
        assert_eq!(&again, &from_json);
        // A ban around a composite of the core's algorithms.
        let window = FixedWindow::new(limit, seconds * 1_000_000).unwrap();
        let composite = Composite::new(vec![AnyAlgorithm::FixedWindow(window)]).unwrap();
        let ban = Ban::new(
            AnyAlgorithm::Composite(composite),
            5,
            60_000_000,
            3_600_000_000,
        );
        assert_eq!(
            from_json.build(Style::File),
            Ok(Built::Rule(AnyAlgorithm::from(ban.unwrap())))
        );
    }
}
