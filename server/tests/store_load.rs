//! The store under load: reading a long audit log does not hold up writes.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hyper::StatusCode;
use tollgate_server::Config;

/// Entries in the audit log, and the bytes of each one's body.
const ENTRIES: i64 = 4000;
const BODY: usize = 10_000;

/// Appends `ENTRIES` entries of another app to the audit log of the store in `dir`,
/// numbered below every real one.
async fn fill_audit(dir: &std::path::Path) {
    use sqlx::Connection;
    let url = format!("sqlite://{}", dir.join("tollgate.db").display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.expect("store");
    let body = format!("{{\"description\":\"{}\"}}", "x".repeat(BODY));
    let mut tx = db.begin().await.expect("transaction");
    for id in 1..=ENTRIES {
        sqlx::query("INSERT INTO tollgate_audit (id, at, actor, action, policy, before_body, after_body, apps) VALUES ($1, 0, 'root', 'update', 'other', $2, $2, '[\"other\"]')")
            .bind(-id)
            .bind(&body)
            .execute(&mut *tx)
            .await
            .expect("insert");
    }
    tx.commit().await.expect("commit");
}

/// Eight viewers scanning the whole audit log (none of it theirs) at once do not
/// delay a policy write past a bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_reads_do_not_block_writes() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        ..config()
    };
    let admin = tollgate_server::init_admin(&config, "root")
        .await
        .expect("first admin");
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
