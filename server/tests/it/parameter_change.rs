//! A policy whose parameters change (same algorithm) carries each key's use into the
//! new limit: a raise applies at once, a cut refuses until the use has passed.

use crate::common::*;

/// `n` decisions of key `k` on `policy`: how many were admitted.
async fn admitted(server: &TestServer, web: &str, policy: &str, n: usize) -> usize {
    let mut count = 0;
    for _ in 0..n {
        let body = format!(r#"{{"policy":"{policy}","key":"k"}}"#);
        let answer = post(&server.url("/v1/decide"), web, &body).await;
        count += usize::from(answer.json["allowed"] == true);
    }
    count
}

fn window(limit: u64) -> String {
    format!(r#"{{"algorithm":"fixed-window","limit":{limit},"period":"1h","apps":["web"]}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_limit_carries_the_use_made_under_the_old_in_this_process() {
    a_new_limit_carries_the_use_made_under_the_old(config()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_limit_carries_the_use_made_under_the_old_in_redis() {
    let redis = Redis::start();
    a_new_limit_carries_the_use_made_under_the_old(in_redis(&redis)).await;
}

async fn a_new_limit_carries_the_use_made_under_the_old(config: sluicegate_server::Config) {
    let (server, admin) = TestServer::start_with(config).await;
    let web = app(&server, &admin, "web").await;
    let url = |name: &str| server.url(&format!("/v1/policies/{name}"));
    // Raised from 3 to 5 after 1 used: 4 more, at once.
    create_policy(&server, &admin, "up", &window(3)).await;
    assert_eq!(admitted(&server, &web, "up", 1).await, 1);
    let changed = put(&url("up"), &admin, &window(5), Some(1)).await;
    assert!(changed.status.is_success(), "{}", changed.text);
    assert_eq!(admitted(&server, &web, "up", 5).await, 4);
    // A token bucket of 3 raised to 5 after 1 used: 4 more, at once.
    let bucket = |capacity: u64| {
        format!(
            r#"{{"algorithm":"token-bucket","capacity":{capacity},"rate":1,"period":"1h","apps":["web"]}}"#
        )
    };
    create_policy(&server, &admin, "bucket", &bucket(3)).await;
    assert_eq!(admitted(&server, &web, "bucket", 1).await, 1);
    let changed = put(&url("bucket"), &admin, &bucket(5), Some(1)).await;
    assert!(changed.status.is_success(), "{}", changed.text);
    assert_eq!(admitted(&server, &web, "bucket", 5).await, 4);
    // Lowered from 5 to 2 after 3 used: none until the window ends.
    create_policy(&server, &admin, "down", &window(5)).await;
    assert_eq!(admitted(&server, &web, "down", 3).await, 3);
    let changed = put(&url("down"), &admin, &window(2), Some(1)).await;
    assert!(changed.status.is_success(), "{}", changed.text);
    assert_eq!(admitted(&server, &web, "down", 3).await, 0);
    // Lowered from 5 to 4 after 2 used: 2 more.
    create_policy(&server, &admin, "less", &window(5)).await;
    assert_eq!(admitted(&server, &web, "less", 2).await, 2);
    let changed = put(&url("less"), &admin, &window(4), Some(1)).await;
    assert!(changed.status.is_success(), "{}", changed.text);
    assert_eq!(admitted(&server, &web, "less", 5).await, 2);
    server.stop().await;
}
