//! `--policies DIR`: policy files (sluicegate's TOML and Envoy's YAML) watched and
//! applied without a restart while requests keep coming, an invalid edit refused whole,
//! and the file's policies read-only through the API.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluicegate_server::Config;

const API: &str = "[policies.api]\nalgorithm = \"fixed-window\"\nlimit = 1000000\nperiod = \"1h\"\napps = [\"web\"]\n";
const EDGE: &str = "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";

/// Replaces the file `name` of `dir` at once (written beside it, then renamed), as
/// editors and configuration tools do.
fn replace(dir: &Path, name: &str, text: &str) {
    let temporary = dir.join(format!(".{name}.new"));
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, dir.join(name)).unwrap();
}

async fn reload_errors(server: &TestServer, admin: &str) -> u64 {
    let metrics = get(&server.url("/metrics"), admin).await.text;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("sluicegate_policy_reload_errors_total "))
        .and_then(|v| v.parse().ok())
        .expect("the reload error counter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_apply_within_a_second_under_load_and_an_invalid_one_is_refused() {
    let files = tempfile::tempdir().unwrap();
    replace(files.path(), "api.toml", API);
    replace(files.path(), "edge.yaml", EDGE);
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        policies: Some(files.path().to_owned()),
        ..config()
    })
    .await;
    let web = app(&server, &admin, "web").await;
    let url = server.url("/v1/decide");

    // Load: every request gets a decision, whatever the files are doing meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let load: Vec<_> = (0..2)
        .map(|i| {
            let (url, web, stop, decided) =
                (url.clone(), web.clone(), stop.clone(), decided.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let body = format!(r#"{{"policy":"api","key":"k{i}"}}"#);
                    let answer = post(&url, &web, &body).await;
                    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
                    assert_eq!(answer.json["allowed"], true, "{}", answer.text);
                    decided.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    // An invalid edit: refused whole, counted, the previous policies kept.
    let invalid = API.replace("limit = 1000000", "limit = 0") + "[policies.fresh]\nalgorithm = \"fixed-window\"\nlimit = 2\nperiod = \"1h\"\napps = [\"web\"]\n";
    replace(files.path(), "api.toml", &invalid);
    assert!(
        // Files polled every 250 ms: 5 s for a loaded machine, never seen fails.
        eventually(Duration::from_secs(5), || async {
            reload_errors(&server, &admin).await == 1
        })
        .await,
        "the invalid edit is counted"
    );
    let fresh = r#"{"policy":"fresh","key":"x"}"#;
    assert_eq!(post(&url, &web, fresh).await.status, StatusCode::FORBIDDEN);

    // A valid edit: a new policy, and the Envoy rule lowered, within 5 s (a 250 ms poll
    // late on a loaded machine; an edit missed never applies).
    let valid = API.to_owned() + "[policies.fresh]\nalgorithm = \"fixed-window\"\nlimit = 2\nperiod = \"1h\"\napps = [\"web\"]\n";
    let start = Instant::now();
    replace(files.path(), "api.toml", &valid);
    replace(files.path(), "edge.yaml", &EDGE.replace("1000", "1"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            post(&url, &web, fresh).await.status == StatusCode::OK
        })
        .await,
        "the new policy within 5 s"
    );
    let grpc = client(&server).await;
    let over = || {
        let mut grpc = grpc.clone();
        let web = web.clone();
        async move {
            let answer = ask_one(&mut grpc, &web, "edge", &[("ip", "1")], Some(2))
                .await
                .expect("an answer");
            answer.overall_code == Code::OverLimit as i32
        }
    };
    assert!(eventually(Duration::from_secs(5), over).await);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );

    // The files' policies are read-only through the API: 403 naming the file.
    let file = files.path().join("api.toml").display().to_string();
    let put = put(&server.url("/v1/policies/api"), &admin, API_JSON, Some(0)).await;
    assert_eq!(put.status, StatusCode::FORBIDDEN, "{}", put.text);
    assert!(put.text.contains(&file), "{}", put.text);
    let delete = delete(&server.url("/v1/policies/fresh"), &admin, Some(0)).await;
    assert_eq!(delete.status, StatusCode::FORBIDDEN, "{}", delete.text);
    let shown = get(&server.url("/v1/policies/api"), &admin).await;
    assert_eq!(shown.json["file"], file.as_str(), "{}", shown.text);

    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await
            .expect("every request of the load got a decision");
    }
    assert!(decided.load(Ordering::Relaxed) > 0);
    assert_eq!(reload_errors(&server, &admin).await, 1);
    server.stop().await;
}

const API_JSON: &str = r#"{"algorithm":"fixed-window","limit":5,"period":"1h","apps":["web"]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_at_start_names_its_line() {
    let files = tempfile::tempdir().unwrap();
    replace(
        files.path(),
        "api.toml",
        &API.replace("limit = 1000000", "limit = 0"),
    );
    let data = tempfile::tempdir().unwrap();
    let error = sluicegate_server::Server::bind(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: data.path().to_owned(),
        policies: Some(files.path().to_owned()),
        ..config()
    })
    .await
    .expect_err("refused");
    let file = files.path().join("api.toml").display().to_string();
    assert!(
        error
            .to_string()
            .starts_with(&format!("{file}:3:9: policy \"api\": `limit`")),
        "{error}"
    );
}

/// A file written in place in two writes (as `echo >>` or a slow copy does) is read once
/// whole, never half-written: no refused half is counted, and the last edit applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_in_two_writes_is_never_read_half_written() {
    let files = tempfile::tempdir().unwrap();
    replace(files.path(), "api.toml", API);
    let (server, admin) = TestServer::start_with(Config {
        policies: Some(files.path().to_owned()),
        ..config()
    })
    .await;
    let path = files.path().join("api.toml");
    // Halves that stood 200 ms or more: a writer that slow may be read half-written.
    let mut slow = 0;
    for limit in 1..=6 {
        let text = API.replace("1000000", &format!("{limit}000"));
        // Cut inside `"fixed-window"`: the first half alone is no policy file.
        let (head, tail) = text.split_at(text.find("window").unwrap());
        std::fs::write(&path, head).unwrap();
        let written = Instant::now();
        tokio::time::sleep(Duration::from_millis(150)).await;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, tail.as_bytes()).unwrap();
        drop(file);
        // Below the 250 ms poll, it cannot stand across two polls; a late wake-up can.
        slow += u64::from(written.elapsed() >= Duration::from_millis(200));
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    // Two polls and a read: 5 s for a loaded machine, the last edit never read fails.
    let last =
        || async { get(&server.url("/v1/policies/api"), &admin).await.json["limit"] == 6000 };
    assert!(
        eventually(Duration::from_secs(5), last).await,
        "the last edit applies"
    );
    assert!(
        reload_errors(&server, &admin).await <= slow,
        "{slow} slow halves"
    );
    server.stop().await;
}
