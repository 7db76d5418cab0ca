//! `sluicegate policy` against a real `sluicegate serve` on loopback (in this process): a
//! policy file applied, shown, changed, pruned and deleted, and each exit code.

use std::process::Output;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sluicegate_server::{Config, Server};

use crate::common::{assert_contains, bin, stdout, temp_file, write};

/// A server with an app `web`, an owner of it and a viewer of it: the runtime it runs
/// on, its URL and the two users' tokens.
struct Service {
    _runtime: tokio::runtime::Runtime,
    url: String,
    owner: String,
    viewer: String,
    _dir: tempfile::TempDir,
}

async fn post(url: &str, token: &str, body: &str) -> serde_json::Value {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let request = hyper::Request::post(url)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

impl Service {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_path_buf(),
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Config::default()
        };
        let (url, owner, viewer) = runtime.block_on(async {
            let admin = sluicegate_server::init_admin(&config, "root")
                .await
                .unwrap();
            let server = Server::bind(config).await.unwrap();
            let url = format!("http://{}", server.local_addr());
            tokio::spawn(server.run(std::future::pending()));
            post(&format!("{url}/v1/apps"), &admin, r#"{"name":"web"}"#).await;
            let user = |name: &str, role: &str| {
                format!(r#"{{"name":"{name}","roles":{{"web":"{role}"}}}}"#)
            };
            let owner = post(&format!("{url}/v1/users"), &admin, &user("olga", "owner")).await;
            let viewer = post(&format!("{url}/v1/users"), &admin, &user("vic", "viewer")).await;
            let token = |v: &serde_json::Value| v["token"].as_str().unwrap().to_owned();
            (url, token(&owner), token(&viewer))
        });
        Self {
            _runtime: runtime,
            url,
            owner,
            viewer,
            _dir: dir,
        }
    }

    /// `sluicegate policy ARGS` as `token`'s user (through SLUICEGATE_TOKEN).
    fn run(&self, token: &str, args: &[&str]) -> Output {
        bin()
            .arg("policy")
            .args(args)
            .args(["--server", &self.url])
            .env("SLUICEGATE_TOKEN", token)
            .output()
            .unwrap()
    }
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap()
}

const FILE: &str = r#"
[policies.api]
description = "Public API"
algorithm = "token-bucket"
capacity = 10
rate = 5
period = "1s"
apps = ["web"]

[policies.login]
algorithm = "sliding-log"
limit = 5
period = "1m"
apps = ["web"]
ban = { threshold = 20, window = "1m", duration = "10m" }
"#;

#[test]
fn apply_show_change_prune_and_delete() {
    let service = Service::start();
    let (dir, file) = temp_file("policies.toml", FILE);
    let owner = service.owner.as_str();

    let applied = service.run(owner, &["apply", &file]);
    assert_eq!(code(&applied), 0, "{applied:?}");
    assert_eq!(
        stdout(&applied),
        "created api (version 1)\ncreated login (version 1)\n"
    );
    // Applied again: nothing to do.
    let again = service.run(owner, &["apply", &file]);
    assert_eq!(
        stdout(&again),
        "unchanged api (version 1)\nunchanged login (version 1)\n"
    );
    let list = service.run(owner, &["list"]);
    assert_eq!(
        stdout(&list),
        "api\ttoken-bucket\tv1\tweb\nlogin\tsliding-log\tv1\tweb\n"
    );
    // `show` prints a table the file format reads back: applying it changes nothing.
    let shown = service.run(owner, &["show", "login"]);
    assert_eq!(code(&shown), 0, "{shown:?}");
    assert_contains(&stdout(&shown), "# created_by: \"olga\"");
    let round = write(dir.path(), "login.toml", &stdout(&shown));
    let reapplied = service.run(owner, &["apply", &round]);
    assert_eq!(stdout(&reapplied), "unchanged login (version 1)\n");

    // A change updates (with the version read), and --prune deletes what the file lost.
    let changed = FILE.replace("capacity = 10", "capacity = 20");
    let changed = &changed[..changed.find("[policies.login]").unwrap()];
    let file = write(dir.path(), "policies.toml", changed);
    let applied = service.run(owner, &["apply", &file, "--prune"]);
    assert_eq!(code(&applied), 0, "{applied:?}");
    assert_eq!(stdout(&applied), "updated api (version 2)\ndeleted login\n");
    let shown = service.run(owner, &["show", "api", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&shown)).unwrap();
    assert_eq!(
        (json["capacity"].as_u64(), json["version"].as_u64()),
        (Some(20), Some(2))
    );

    let deleted = service.run(owner, &["delete", "api"]);
    assert_eq!(
        (code(&deleted), stdout(&deleted).as_str()),
        (0, "deleted api\n")
    );
    assert_eq!(code(&service.run(owner, &["show", "api"])), 3);
    assert_eq!(code(&service.run(owner, &["delete", "api"])), 3);
    assert_eq!(stdout(&service.run(owner, &["list", "--app", "web"])), "");
}

#[test]
fn exit_codes() {
    let service = Service::start();
    let (dir, file) = temp_file("policies.toml", FILE);
    // 1: an unknown token, and a viewer writing.
    assert_eq!(code(&service.run("sgu_nobody", &["list"])), 1);
    let viewer = service.run(&service.viewer, &["apply", &file]);
    assert_eq!(code(&viewer), 1, "{viewer:?}");
    // 2: no token; a file the parser refuses (its line named, nothing sent); a policy
    // the server refuses (a name it does not take).
    let none = bin()
        .args(["policy", "list", "--server", &service.url])
        .env_remove("SLUICEGATE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(code(&none), 2);
    let bad = write(
        dir.path(),
        "bad.toml",
        &FILE.replace("capacity = 10", "capacity = 0"),
    );
    let refused = service.run(&service.owner, &["apply", &bad]);
    assert_eq!(code(&refused), 2);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("bad.toml:5:"), "{message}");
    assert_eq!(stdout(&service.run(&service.owner, &["list"])), "");
    let odd = write(
        dir.path(),
        "odd.toml",
        "[policies.\"no spaces\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nperiod = \"1s\"\napps = [\"web\"]\n",
    );
    assert_eq!(code(&service.run(&service.owner, &["apply", &odd])), 2);
    // 3: no such policy.
    assert_eq!(code(&service.run(&service.owner, &["show", "nothing"])), 3);
    // 4: no server there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let away = bin()
        .args([
            "policy",
            "list",
            "--server",
            &format!("http://127.0.0.1:{port}"),
        ])
        .env("SLUICEGATE_TOKEN", &service.owner)
        .output()
        .unwrap();
    assert_eq!(code(&away), 4);
    // The token from a file works as the variable does.
    let token = write(dir.path(), "token", &format!("{}\n", service.owner));
    let listed = bin()
        .args([
            "policy",
            "list",
            "--server",
            &service.url,
            "--token-file",
            &token,
        ])
        .env_remove("SLUICEGATE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(code(&listed), 0, "{listed:?}");
}
