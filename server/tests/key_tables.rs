//! The in-process key tables under attack: a spray of new keys does not undo a refusal
//! unless the policy says `on_full = "evict"`.

mod common;

use common::*;
use serde_json::{json, Value};
use tollgate_server::Config;

/// Decides `keys` on `policy` in one batch as `app`; whether each was allowed.
async fn decide_all(server: &TestServer, app: &str, policy: &str, keys: &[String]) -> Vec<bool> {
    let requests: Vec<Value> = keys
        .iter()
        .map(|key| json!({"policy": policy, "key": key}))
        .collect();
    let body = json!({ "requests": requests }).to_string();
    let answer = post(&server.url("/v1/decide/batch"), app, &body).await;
    assert_eq!(answer.status.as_u16(), 200, "{}", answer.text);
    answer.json["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .map(|r| r["allowed"] == true)
        .collect()
}

/// A key denied by a 1-per-hour policy stays denied after a spray of more new keys than
/// `--max-keys`; with `on_full = "evict"` the spray makes room for new keys instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_spray_does_not_undo_a_refusal_unless_the_policy_evicts() {
    const MAX_KEYS: usize = 64;
    let (server, admin) = TestServer::start_with(Config {
        max_keys: MAX_KEYS,
        ..config()
    })
    .await;
    let web = app(&server, &admin, "web").await;
    let hourly = r#"{"algorithm":"fixed-window","limit":1,"period":"1h","apps":["web"]"#;
    create_policy(&server, &admin, "login", &format!("{hourly}}}")).await;
    let evicting = format!(r#"{hourly},"on_full":"evict"}}"#);
    create_policy(&server, &admin, "search", &evicting).await;
    let shown = get(&server.url("/v1/policies/search"), &admin).await;
    assert_eq!(shown.json["on_full"], "evict", "{}", shown.text);
    let victim = ["victim".to_owned()];
    let spray: Vec<String> = (0..4 * MAX_KEYS).map(|i| format!("spray-{i}")).collect();
    let fresh = ["newcomer".to_owned()];
    for policy in ["login", "search"] {
        assert_eq!(decide_all(&server, &web, policy, &victim).await, [true]);
        assert_eq!(decide_all(&server, &web, policy, &victim).await, [false]);
        decide_all(&server, &web, policy, &spray).await;
    }
    // deny-new (the default): the victim is still refused, and so is a new key.
    assert_eq!(decide_all(&server, &web, "login", &victim).await, [false]);
    assert_eq!(decide_all(&server, &web, "login", &fresh).await, [false]);
    // evict: a new key is admitted.
    assert_eq!(decide_all(&server, &web, "search", &fresh).await, [true]);
    server.stop().await;
}
