use super::{wildcard_match, Config, Limit, Unit};

fn config(text: &str) -> Config {
    Config::parse("t.yaml", text).expect("a valid file")
}

fn id<'a>(config: &'a Config, entries: &[(&str, &str)]) -> Option<(&'a str, String)> {
    let (rule, key) = config.domain("d")?.lookup(entries)?;
    Some((rule.id.as_str(), key))
}

#[test]
fn the_most_specific_value_wins_and_a_value_less_key_keys_per_value() {
    let c = config(
        "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 10}\n  - key: ip\n    value: 50.0.0.5\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
    );
    assert_eq!(
        id(&c, &[("ip", "1.2.3.4")]),
        Some(("d.ip", "ip=1.2.3.4".into()))
    );
    assert_eq!(
        id(&c, &[("ip", "50.0.0.5")]),
        Some(("d.ip_50.0.0.5", "ip=50.0.0.5".into()))
    );
    // More entries than levels: no rule.
    assert_eq!(id(&c, &[("ip", "1.2.3.4"), ("path", "/")]), None);
    assert_eq!(id(&c, &[("other", "x")]), None);
}

#[test]
fn wildcards_match_in_order_and_a_shared_threshold_keys_by_its_pattern() {
    let c = config(
        "domain: d\ndescriptors:\n  - key: p\n    value: /api/*/action\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: f\n    value: files/*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n",
    );
    assert_eq!(
        id(&c, &[("p", "/api/1/action")]).map(|m| m.0),
        Some("d.p_/api/*/action")
    );
    assert_eq!(id(&c, &[("p", "/api/1/other")]), None);
    assert_eq!(
        id(&c, &[("f", "files/a.pdf")]).map(|m| m.1),
        Some("f=files/*".into())
    );
}

#[test]
fn units_and_limits_are_theirs() {
    let c = config("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: WEEK\n      requests_per_unit: 7\n      sluicegate_algorithm: token-bucket\n  - key: u\n    rate_limit: {unlimited: true}\n");
    let domain = c.domain("d").expect("d");
    let (rule, _) = domain.lookup(&[("k", "v")]).expect("a rule");
    assert_eq!(
        rule.limit,
        Limit::Rate {
            requests_per_unit: 7,
            unit: Unit::Week,
            algorithm: sluicegate_core::Kind::TokenBucket
        }
    );
    let policy = rule.policy().expect("a policy");
    assert_eq!((policy.capacity, policy.rate), (Some(7), Some(7)));
    let (rule, _) = domain.lookup(&[("u", "v")]).expect("a rule");
    assert_eq!(
        (rule.limit.clone(), rule.policy()),
        (Limit::Unlimited, None)
    );
}

#[test]
fn errors_name_the_file_line_and_column() {
    let cases = [
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n", "t.yaml:5:13: invalid rate limit unit 'fortnight'"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limits: {}\n", "t.yaml:4:5: config error, unknown key 'rate_limits'"),
        ("descriptors: []\n", "t.yaml:1:1: config file cannot have empty domain"),
        ("domain: d\ndescriptors:\n  - key: k\n  - key: k\n", "t.yaml:4:5: duplicate descriptor composite key 'd.k'"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "t.yaml:4:41: should not specify rate limit unit when unlimited"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "t.yaml:4:51: 'requests_per_unit' must be an integer from 0 to 4294967295"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, sluicegate_algorithm: concurrency}\n", "t.yaml:4:76: 'sluicegate_algorithm' must be one of fixed-window, sliding-log, sliding-counter, token-bucket, leaky-bucket, pacing, got 'concurrency'"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      replaces: [{name: a}]\n      unit: second\n", "t.yaml:6:18: replaces should not contain name of same descriptor"),
        ("domain: d\ndescriptors: [\n", "t.yaml:3:1: error loading config file:"),
    ];
    for (text, want) in cases {
        let got = Config::parse("t.yaml", text).expect_err(text).to_string();
        assert!(got.starts_with(want), "{text}: got {got}, want {want}");
    }
}

#[test]
fn a_domain_in_two_files_is_refused() {
    let mut c = config("domain: d\n");
    let e = c
        .add("u.yaml", "domain: d\n")
        .expect_err("a duplicate")
        .to_string();
    assert_eq!(e, "u.yaml: duplicate domain \"d\" (also in t.yaml)");
}

#[test]
fn apps_restrict_a_domain() {
    let open = config("domain: d\n");
    assert!(open.domain("d").is_some_and(|d| d.admits_app("any")));
    let closed = config("domain: d\nsluicegate_apps: [edge]\n");
    let d = closed.domain("d").expect("d");
    assert!(d.admits_app("edge") && !d.admits_app("other"));
}

fn assert_too_deep(text: &str) {
    let e = Config::parse("t.yaml", text)
        .expect_err("too deep")
        .to_string();
    assert!(e.contains("nested deeper than 64 levels"), "{e}");
}

#[test]
fn an_alias_cannot_nest_deeper_than_the_bound() {
    // 63 levels under `a` reach depth 64, the most read; repeated one level down they
    // would reach 65.
    let deep = format!("{}0{}", "[".repeat(63), "]".repeat(63));
    let text = format!("a: &a {deep}\nb: [*a]\n");
    assert_too_deep(&text);
}

#[test]
fn a_chain_of_aliases_is_refused_before_it_nests_past_the_bound() {
    // Each descriptor repeats the one before 30 levels down: without the bound on
    // aliases, reading the last one recursed thousands of levels deep and overflowed
    // the stack.
    let mut text = String::from("domain: d\ndescriptors:\n  - &x0 {key: k0}\n");
    for i in 1..112 {
        let open = "{key: a, descriptors: [".repeat(30);
        let close = "]}".repeat(30);
        text += &format!(
            "  - &x{i} {{key: k{i}, descriptors: [{open}*x{}{close}]}}\n",
            i - 1
        );
    }
    assert_too_deep(&text);
}

#[test]
fn a_wildcard_part_is_matched_once_and_parts_never_overlap() {
    let matches = |pattern: &str, value: &str| {
        let parts: Vec<String> = pattern.split('*').map(str::to_owned).collect();
        wildcard_match(&parts, value)
    };
    assert!(matches("ab*ba", "abba") && !matches("ab*ba", "aba"));
    assert!(matches("a*b*c", "abc") && matches("a*b*c", "axbyc"));
    assert!(!matches("a*b*c", "acb") && !matches("a*b*c", "ac"));
    assert!(matches("*", "") && matches("é*é", "éxé"));
}

#[test]
fn aliases_repeating_more_than_the_file_are_refused_at_once() {
    // Ten anchors each repeating the one before ten times: 10^10 nodes from 2 KB.
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        text += &format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        );
    }
    let e = Config::parse("t.yaml", &text)
        .expect_err("a billion laughs")
        .to_string();
    assert!(e.contains("aliases repeat more than 65536 bytes"), "{e}");
    // A long text repeated: few nodes, but each a copy of 100 KB.
    let long = "z".repeat(100_000);
    let text = format!("a: &s {long}\nb: [*s, *s]\n");
    let e = Config::parse("t.yaml", &text)
        .expect_err("a long text repeated")
        .to_string();
    assert!(e.contains("aliases repeat more than"), "{e}");
    // Anchors as Envoy files use them, a rate limit repeated, are read.
    let c = config("domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: second, requests_per_unit: 10}\n  - key: b\n    rate_limit: *r\n");
    assert_eq!(id(&c, &[("b", "x")]).map(|m| m.0), Some("d.b"));
}
