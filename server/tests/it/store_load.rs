//! The store under load: reading a long audit log does not hold up writes, and a write
//! reads back only what it changed.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use sluicegate_server::Config;

/// Entries in the audit log, and the bytes of each one's body.
const ENTRIES: i64 = 4000;
const BODY: usize = 10_000;

/// A connection to the store in `dir`, behind the server's back.
async fn store(dir: &std::path::Path) -> sqlx::SqliteConnection {
    use sqlx::Connection;
    let url = format!("sqlite://{}", dir.join("sluicegate.db").display());
    sqlx::SqliteConnection::connect(&url).await.expect("store")
}

/// Appends `ENTRIES` entries of another app to the audit log of the store in `dir`,
/// numbered below every real one.
async fn fill_audit(dir: &std::path::Path) {
    use sqlx::Connection;
    let mut db = store(dir).await;
    let body = format!("{{\"description\":\"{}\"}}", "x".repeat(BODY));
    let mut tx = db.begin().await.expect("transaction");
    for id in 1..=ENTRIES {
        sqlx::query("INSERT INTO sluicegate_audit (id, at, actor, action, policy, before_body, after_body, apps) VALUES ($1, 0, 'root', 'update', 'other', $2, $2, '[\"other\"]')")
            .bind(-id)
            .bind(&body)
            .execute(&mut *tx)
            .await
            .expect("insert");
    }
    tx.commit().await.expect("commit");
}

/// A fresh store's directory, a configuration on it, and its first admin's token.
async fn fresh() -> (tempfile::TempDir, Config, String) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        ..config()
    };
    let admin = sluicegate_server::init_admin(&config, "root")
        .await
        .expect("first admin");
    (dir, config, admin)
}

/// Eight viewers scanning the whole audit log (none of it theirs) at once do not
/// delay a policy write past a bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_reads_do_not_block_writes() {
    let (dir, config, admin) = fresh().await;
    fill_audit(dir.path()).await;
    let server = TestServer::with(config).await;
    app(&server, &admin, "web").await;
    let viewer = user(&server, &admin, "vic", r#"{"web":"viewer"}"#).await;
    let policy = r#"{"algorithm":"fixed-window","limit":5,"period":"1s","apps":["web"]}"#;
    create_policy(&server, &admin, "api", policy).await;
    let scan_url = server.url("/v1/audit?app=web");
    let scans: Vec<_> = (0..8)
        .map(|_| {
            let (url, viewer) = (scan_url.clone(), viewer.clone());
            tokio::spawn(async move {
                let start = Instant::now();
                let answer = get(&url, &viewer).await;
                assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
                start.elapsed()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = Instant::now();
    let written = put(&server.url("/v1/policies/api"), &admin, policy, Some(1)).await;
    let took = start.elapsed();
    assert_eq!(written.status, StatusCode::OK, "{}", written.text);
    let mut longest = Duration::ZERO;
    for scan in scans {
        longest = longest.max(scan.await.expect("scan"));
    }
    eprintln!("write {took:?} while scans took up to {longest:?}");
    // Queued behind the scans' reads, it took nearly half as long as they did.
    assert!(
        took < longest / 5,
        "the write took {took:?}, the longest scan {longest:?}"
    );
    server.stop().await;
}

/// A policy write reads back that policy only: another one, edited in the store behind
/// the server's back (no change counted), stays as the server last read it, until a
/// change the server cannot narrow down (an app's) reads everything again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_write_reloads_only_that_policy() {
    let (dir, config, admin) = fresh().await;
    let server = TestServer::with(config).await;
    app(&server, &admin, "web").await;
    let policy = |description: &str| {
        format!(
            r#"{{"algorithm":"fixed-window","limit":5,"period":"1s","apps":["web"],"description":"{description}"}}"#
        )
    };
    create_policy(&server, &admin, "a", &policy("one")).await;
    create_policy(&server, &admin, "b", &policy("one")).await;
    sqlx::query(
        "UPDATE sluicegate_policies SET body = replace(body, 'one', 'two') WHERE name = 'b'",
    )
    .execute(&mut store(dir.path()).await)
    .await
    .expect("edit");
    let written = put(
        &server.url("/v1/policies/a"),
        &admin,
        &policy("three"),
        Some(1),
    )
    .await;
    assert_eq!(written.status, StatusCode::OK, "{}", written.text);
    let description = |name: &'static str| {
        let url = server.url(&format!("/v1/policies/{name}"));
        let admin = admin.clone();
        async move { get(&url, &admin).await.json["description"].clone() }
    };
    assert_eq!(description("a").await, "three");
    assert_eq!(description("b").await, "one");
    app(&server, &admin, "mobile").await;
    assert_eq!(description("b").await, "two");
    server.stop().await;
}
