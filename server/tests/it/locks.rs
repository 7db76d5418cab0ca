//! The lock family over HTTP: shared and exclusive leases, fair queues whose places are
//! kept by asking again, withdrawals, and a key's holders and queue as the page reads
//! them; in this process and in Redis, with the same answers.

use serde_json::Value;

use crate::common::*;

const FAIR: &str = r#"{"algorithm":"concurrency","limit":3,"lease":"30s","max_lease":"1m","fair":true,"apps":["web"]}"#;
const UNFAIR: &str = r#"{"algorithm":"concurrency","limit":3,"lease":"30s","apps":["web"]}"#;
const WAIT: &str = r#","wait_us":10000000"#;

/// One lease call by `owner` on key `doc` of `policy`, `extra` appended to the body.
async fn call(
    server: &TestServer,
    web: &str,
    op: &str,
    policy: &str,
    owner: &str,
    extra: &str,
) -> Answer {
    let body = format!(r#"{{"policy":"{policy}","key":"doc","owner":"{owner}"{extra}}}"#);
    post(&server.url(&format!("/v1/lease/{op}")), web, &body).await
}

fn exclusive(wait: bool) -> String {
    format!(r#","mode":"exclusive"{}"#, if wait { WAIT } else { "" })
}

/// The owners and modes of a list of holders or waiters.
fn owners(list: &Value) -> Vec<(String, String)> {
    let entries = list.as_array().expect("a list");
    let field = |e: &Value, name: &str| e[name].as_str().expect(name).to_owned();
    entries
        .iter()
        .map(|e| (field(e, "owner"), field(e, "mode")))
        .collect()
}

fn pair(owner: &str, mode: &str) -> (String, String) {
    (owner.to_owned(), mode.to_owned())
}

async fn family(server: &TestServer, admin: &str) {
    let web = app(server, admin, "web").await;
    create_policy(server, admin, "docs", FAIR).await;
    create_policy(server, admin, "pages", UNFAIR).await;
    let web = web.as_str();
    // A reader holds; a writer waits first in line, a reader behind it.
    let reader = call(server, web, "acquire", "docs", "r1", "").await;
    assert_eq!(reader.json["acquired"], true, "{}", reader.text);
    let first = reader.json["token"].as_u64().unwrap();
    let writer = call(server, web, "acquire", "docs", "w", &exclusive(true)).await;
    assert_eq!(writer.json["acquired"], false, "{}", writer.text);
    assert_eq!(writer.json["place"]["ahead"], 0, "{}", writer.text);
    let second = call(server, web, "acquire", "docs", "r2", WAIT).await;
    assert_eq!(
        second.json["acquired"], false,
        "fair: nobody overtakes the writer"
    );
    assert_eq!(second.json["place"]["ahead"], 1, "{}", second.text);
    assert!(second.json["place"]["number"].as_u64() > writer.json["place"]["number"].as_u64());
    // A try never queues, and is refused while anyone waits.
    let tried = call(server, web, "acquire", "docs", "r3", "").await;
    assert_eq!(
        (&tried.json["acquired"], &tried.json["place"]),
        (&Value::Bool(false), &Value::Null)
    );
    // The page's view: the holder, then the queue in order.
    let state = get(&server.url("/v1/policies/docs/leases/doc"), admin).await;
    assert_eq!(state.status.as_u16(), 200, "{}", state.text);
    assert_eq!(owners(&state.json["holders"]), [pair("r1", "shared")]);
    assert_eq!(
        owners(&state.json["queue"]),
        [pair("w", "exclusive"), pair("r2", "shared")]
    );
    assert_eq!(state.json["holders"][0]["token"].as_u64(), Some(first));
    let left = state.json["holders"][0]["expires_in_us"].as_u64().unwrap();
    assert!((1..=30_000_000).contains(&left), "{}", state.text);
    // The reader leaves: the writer, asking again, is granted a larger token.
    assert_eq!(
        call(server, web, "release", "docs", "r1", "").await.json["released"],
        true
    );
    let granted = call(server, web, "acquire", "docs", "w", &exclusive(true)).await;
    assert_eq!(granted.json["acquired"], true, "{}", granted.text);
    assert!(granted.json["token"].as_u64().unwrap() > first);
    let next = call(server, web, "acquire", "docs", "r2", WAIT).await;
    assert_eq!(next.json["place"]["ahead"], 0, "{}", next.text);
    // A withdrawn place is gone; withdrawing again says so.
    assert_eq!(
        call(server, web, "withdraw", "docs", "r2", "").await.json["withdrawn"],
        true
    );
    assert_eq!(
        call(server, web, "withdraw", "docs", "r2", "").await.json["withdrawn"],
        false
    );
    let state = get(&server.url("/v1/policies/docs/leases/doc"), admin).await;
    assert_eq!(owners(&state.json["holders"]), [pair("w", "exclusive")]);
    assert_eq!(owners(&state.json["queue"]), []);
    assert_eq!(
        call(server, web, "release", "docs", "w", "").await.json["released"],
        true
    );
    assert_eq!(
        call(server, web, "acquire", "docs", "r2", "").await.json["acquired"],
        true
    );
    // Unfair: a waiting writer still holds new readers back (writer preference).
    assert_eq!(
        call(server, web, "acquire", "pages", "r1", "").await.json["acquired"],
        true
    );
    let writer = call(server, web, "acquire", "pages", "w", &exclusive(true)).await;
    assert_eq!(writer.json["place"]["ahead"], 0, "{}", writer.text);
    assert_eq!(
        call(server, web, "acquire", "pages", "r2", "").await.json["acquired"],
        false
    );
    // Bad input: 422 naming the field, nothing taken.
    let refusals = [
        ("acquire", r#","wait_us":60000001"#, "wait_us"),
        ("acquire", r#","wait_us":0"#, "wait_us"),
        ("release", r#","mode":"shared""#, "mode"),
        ("withdraw", WAIT, "wait_us"),
    ];
    for (op, extra, field) in refusals {
        let refused = call(server, web, op, "docs", "x", extra).await;
        assert_eq!(
            (refused.status.as_u16(), refused.json["field"].as_str()),
            (422, Some(field)),
            "{op} {extra}: {}",
            refused.text
        );
    }
    // A body that does not parse: 400 naming what it takes.
    let unknown = call(
        server,
        web,
        "acquire",
        "docs",
        "x",
        r#","mode":"upgradable""#,
    )
    .await;
    assert_eq!(unknown.status.as_u16(), 400, "{}", unknown.text);
    assert!(
        unknown.text.contains("`shared` or `exclusive`"),
        "{}",
        unknown.text
    );
    let state = get(&server.url("/v1/policies/docs/leases/doc"), admin).await;
    assert_eq!(owners(&state.json["holders"]), [pair("r2", "shared")]);
    // A key nobody holds is empty; a rate policy has no leases.
    let empty = get(&server.url("/v1/policies/docs/leases/other"), admin).await;
    assert_eq!(
        (owners(&empty.json["holders"]), owners(&empty.json["queue"])),
        (vec![], vec![])
    );
    create_policy(
        server,
        admin,
        "api",
        r#"{"algorithm":"fixed-window","limit":5,"period":"1s","apps":["web"]}"#,
    )
    .await;
    assert_eq!(
        get(&server.url("/v1/policies/api/leases/doc"), admin)
            .await
            .status
            .as_u16(),
        422
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_family_in_process() {
    let (server, admin) = TestServer::start().await;
    family(&server, &admin).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_family_in_redis() {
    let redis = Redis::start();
    let (server, admin) = TestServer::start_with(in_redis(&redis)).await;
    family(&server, &admin).await;
    server.stop().await;
}
