//! The service-side fields: `on_full` (rate limits) and `max_lease` (leases), in TOML
//! and JSON alike, each refused where it means nothing.

use sluicegate_policy::{OnFull, Policy, PolicyFile, Style};

fn json(text: &str) -> Policy {
    serde_json::from_str(text).unwrap()
}

/// A policy file's `login`, one per hour, with `extra` added to its table.
fn login_file(extra: &str) -> Policy {
    let text = format!(
        "[policies.login]\nalgorithm = \"fixed-window\"\nlimit = 1\nperiod = \"1h\"\n{extra}\n"
    );
    let mut file = PolicyFile::parse("p.toml", &text).unwrap();
    file.policies.remove("login").unwrap()
}

#[test]
fn on_full_reads_and_writes_its_names() {
    let login = &login_file("on_full = \"evict\"");
    assert_eq!(login.on_full, Some(OnFull::Evict));
    assert!(login.build(Style::File).is_ok());
    let written = serde_json::to_value(login).unwrap();
    assert_eq!(written["on_full"], "evict");
    let deny = json(r#"{"algorithm":"fixed-window","limit":1,"period":"1h","on_full":"deny-new"}"#);
    assert_eq!(deny.on_full, Some(OnFull::DenyNew));
    let wrong = serde_json::from_str::<Policy>(
        r#"{"algorithm":"fixed-window","limit":1,"period":"1h","on_full":"forget"}"#,
    );
    assert!(wrong.unwrap_err().to_string().contains("deny-new"));
    let leases = json(r#"{"algorithm":"concurrency","limit":1,"lease":"1s","on_full":"evict"}"#);
    let problem = leases.build(Style::File).unwrap_err();
    assert!(problem.message.contains("`on_full`"), "{problem}");
}

#[test]
fn max_lease_bounds_leases_only_and_is_at_least_the_lease() {
    let leases = json(r#"{"algorithm":"concurrency","limit":1,"lease":"30s","max_lease":"1m"}"#);
    assert!(leases.build(Style::File).is_ok());
    assert_eq!(leases.max_lease(), 60_000_000);
    let default = json(r#"{"algorithm":"concurrency","limit":1,"lease":"30s"}"#);
    assert_eq!(default.max_lease(), 30_000_000);
    let short = json(r#"{"algorithm":"concurrency","limit":1,"lease":"30s","max_lease":"1s"}"#);
    let problem = short.build(Style::File).unwrap_err();
    assert_eq!(problem.field.as_deref(), Some("max_lease"), "{problem}");
    let rate = json(r#"{"algorithm":"fixed-window","limit":1,"period":"1s","max_lease":"1s"}"#);
    let problem = rate.build(Style::File).unwrap_err();
    assert!(problem.message.contains("`max_lease`"), "{problem}");
}

#[test]
fn shadow_reads_from_files_and_json_and_is_written_only_when_on() {
    let login = &login_file("shadow = true");
    assert!(login.shadow);
    assert!(login.build(Style::File).is_ok());
    assert_eq!(serde_json::to_value(login).unwrap()["shadow"], true);
    let enforcing = json(r#"{"algorithm":"fixed-window","limit":1,"period":"1h"}"#);
    assert!(!enforcing.shadow);
    assert!(serde_json::to_value(&enforcing)
        .unwrap()
        .get("shadow")
        .is_none());
    assert!(json(r#"{"algorithm":"fixed-window","limit":1,"period":"1h","shadow":true}"#).shadow);
}

#[test]
fn shadow_is_refused_on_leases_and_on_a_composite_member() {
    let leases = json(r#"{"algorithm":"concurrency","limit":1,"lease":"1s","shadow":true}"#);
    let problem = leases.build(Style::File).unwrap_err();
    assert!(problem.message.contains("`shadow`"), "{problem}");
    let member = json(
        r#"{"algorithm":"composite","limits":[{"algorithm":"fixed-window","limit":1,"period":"1s","shadow":true}]}"#,
    );
    let problem = member.build(Style::File).unwrap_err();
    assert!(problem.message.contains("shadow"), "{problem}");
    // The composite itself may be a shadow.
    let whole = json(
        r#"{"algorithm":"composite","limits":[{"algorithm":"fixed-window","limit":1,"period":"1s"}],"shadow":true}"#,
    );
    assert!(whole.build(Style::File).is_ok());
}
