//! The in-process key tables under attack: a spray of new keys does not undo a refusal
//! unless the policy says `on_full = "evict"`.

use crate::common::*;
use serde_json::{json, Value};
use sluicegate_server::Config;

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
    // What each table did shows in /metrics.
    let metrics = get(&server.url("/metrics"), &admin).await.text;
    let login = |name| metric(&metrics, name, "login");
    let search = |name| metric(&metrics, name, "search");
    assert_eq!(
        login("sluicegate_keys_capacity"),
        MAX_KEYS as u64,
        "{metrics}"
    );
    assert!((1..=MAX_KEYS as u64).contains(&login("sluicegate_keys")));
    assert!(login("sluicegate_keys_refused_total") > 0, "{metrics}");
    assert_eq!(login("sluicegate_keys_evicted_total"), 0, "{metrics}");
    assert!(search("sluicegate_keys_evicted_total") > 0, "{metrics}");
    assert_eq!(search("sluicegate_keys_refused_total"), 0, "{metrics}");
    server.stop().await;
}

/// A lease table's fill shows in /metrics: keys held, capacity, refusals; and no lease
/// is asked for longer than the policy's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_table_shows_its_fill() {
    let (server, admin) = TestServer::start_with(Config {
        max_keys: 4,
        ..config()
    })
    .await;
    let web = app(&server, &admin, "web").await;
    let workers = r#"{"algorithm":"concurrency","limit":1,"lease":"1h","apps":["web"]}"#;
    create_policy(&server, &admin, "workers", workers).await;
    let acquire = |key: usize| {
        let (url, web) = (server.url("/v1/lease/acquire"), web.clone());
        async move {
            let body = format!(r#"{{"policy":"workers","key":"k{key}","owner":"a"}}"#);
            post(&url, &web, &body).await.json["acquired"] == true
        }
    };
    let mut acquired = 0;
    for key in 0..8 {
        acquired += usize::from(acquire(key).await);
    }
    // No lease outlasts the policy's (its max_lease by default): the table cannot be
    // held for longer than that.
    let body = r#"{"policy":"workers","key":"k0","owner":"b","ttl_us":3600000001}"#;
    let long = post(&server.url("/v1/lease/acquire"), &web, body).await;
    assert_eq!(long.status.as_u16(), 422, "{}", long.text);
    assert_eq!(long.json["field"], "ttl_us");
    let metrics = get(&server.url("/metrics"), &admin).await.text;
    let workers = |name| metric(&metrics, name, "workers");
    assert_eq!(workers("sluicegate_keys_capacity"), 4, "{metrics}");
    assert_eq!(workers("sluicegate_keys"), acquired as u64, "{metrics}");
    assert_eq!(
        workers("sluicegate_keys_refused_total"),
        8 - acquired as u64
    );
    server.stop().await;
}

/// `--max-policy-bytes` lowers the key cap of a policy whose keys could take much
/// memory (a sliding log of 10^5 entries), and leaves a window's at `--max-keys`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_s_memory_is_bounded_in_bytes() {
    let (server, admin) = TestServer::start_with(Config {
        max_keys: 10_000,
        max_policy_bytes: 64 << 20,
        ..config()
    })
    .await;
    app(&server, &admin, "web").await;
    let log = r#"{"algorithm":"sliding-log","limit":100000,"period":"1s","apps":["web"]}"#;
    create_policy(&server, &admin, "log", log).await;
    let window = r#"{"algorithm":"fixed-window","limit":100000,"period":"1s","apps":["web"]}"#;
    create_policy(&server, &admin, "window", window).await;
    let metrics = get(&server.url("/metrics"), &admin).await.text;
    // 10^5 entries of 32 bytes at the worst: 3.2 MB a key, some twenty keys in 64 MiB.
    let log = metric(&metrics, "sluicegate_keys_capacity", "log");
    assert!((1..100).contains(&log), "{metrics}");
    assert_eq!(
        metric(&metrics, "sluicegate_keys_capacity", "window"),
        10_000
    );
    server.stop().await;
}
