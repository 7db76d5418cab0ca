//! `sluicegate policy list|show|apply|delete`: the policies of a `sluicegate serve`, managed
//! from scripts and CI with a user token (its management API, `server/API.md`); and
//! `sluicegate policy validate`, which checks policy files in CI without a server.
//!
//! The token is read from `--token-file` or `SLUICEGATE_TOKEN`, never from a flag (a flag
//! shows in the process list). Exit codes: 0 done, 1 refused by the server (401 unknown
//! token, 403 no role, 409/428 the policy changed meanwhile), 2 bad flags or input (a
//! policy file the shared parser refuses, or a policy the server finds invalid: 400,
//! 422), 3 no such policy (`show`, `delete`), 4 the server unreachable, too slow (10 s)
//! or failing (5xx), 5 the output could not be written.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use sluicegate_policy::{envoy, limitador, Policy, PolicyFile};

use crate::failure::{output, Failure};

/// The longest a request to the server may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read (a list of many policies).
const MAX_ANSWER: usize = 16 * 1024 * 1024;

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The server's URL.
    #[arg(
        long,
        env = "SLUICEGATE_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    server: String,
    /// A file holding a user token (else the SLUICEGATE_TOKEN environment variable).
    #[arg(long)]
    token_file: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// List the policies the token may read (NAME ALGORITHM vVERSION APPS), or one
    /// app's with --app.
    List {
        #[command(flatten)]
        server: ServerArgs,
        /// Only the policies listing this app.
        #[arg(long)]
        app: Option<String>,
        /// Print the server's JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Check policy files (FILE, or every *.toml, *.yaml and *.yml in DIR) with the
    /// parsers of `apply` and `--config`, of `serve --envoy-config` for
    /// envoyproxy/ratelimit's YAML, and of `serve --limitador-config` for limitador's
    /// limits file (a YAML list), without a server: exit 0 if all are valid, else 2
    /// with each file's problem (file, line and column).
    Validate {
        /// A policy file, or a directory of them.
        path: String,
    },
    /// Print one policy as a policy file's table (metadata as comments), or --json.
    Show {
        #[command(flatten)]
        server: ServerArgs,
        name: String,
        /// Print the server's JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Create or update every policy of a TOML policy file (unchanged ones are left
    /// alone); --prune also deletes the policies the token can read that the file does
    /// not name.
    Apply {
        #[command(flatten)]
        server: ServerArgs,
        /// The policy file (the format of examples/policies.toml).
        file: String,
        /// Delete the readable policies the file does not name.
        #[arg(long)]
        prune: bool,
    },
    /// Delete a policy.
    Delete {
        #[command(flatten)]
        server: ServerArgs,
        name: String,
    },
}

pub fn run(command: PolicyCommand) -> Result<ExitCode, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Backend(format!("cannot start: {e}")))?;
    runtime.block_on(command.run_async())?;
    Ok(ExitCode::SUCCESS)
}

impl PolicyCommand {
    async fn run_async(self) -> Result<(), Failure> {
        let mut out = std::io::stdout().lock();
        match self {
            Self::Validate { path } => {
                let mut problems = Vec::new();
                for file in policy_files(&path)? {
                    if envoy::is_yaml(Path::new(&file)) {
                        match read_envoy(&file) {
                            Ok(done) => writeln!(out, "{done}").map_err(output)?,
                            Err(problem) => problems.push(problem),
                        }
                        continue;
                    }
                    match read_file(&file) {
                        Ok(policies) => {
                            let names: Vec<&str> = policies.keys().map(String::as_str).collect();
                            let count = names.len();
                            let names = names.join(", ");
                            writeln!(out, "{file}: {count} policies valid ({names})")
                                .map_err(output)?;
                        }
                        Err(Failure::Input(problem)) => problems.push(problem),
                        Err(e) => return Err(e),
                    }
                }
                if !problems.is_empty() {
                    return Err(Failure::Input(problems.join("\n")));
                }
            }
            Self::List { server, app, json } => {
                let server = server.connect()?;
                let path = match &app {
                    Some(app) => format!("/v1/policies?app={}", encode(app)),
                    None => "/v1/policies".to_owned(),
                };
                let list = server
                    .send(Method::GET, &path, None, None)
                    .await?
                    .success()?;
                if json {
                    writeln!(out, "{list}").map_err(output)?;
                    return Ok(());
                }
                for policy in list["policies"].as_array().into_iter().flatten() {
                    let apps: Vec<&str> = policy["apps"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    writeln!(
                        out,
                        "{}\t{}\tv{}\t{}",
                        policy["name"].as_str().unwrap_or("?"),
                        policy["algorithm"].as_str().unwrap_or("?"),
                        policy["version"],
                        apps.join(",")
                    )
                    .map_err(output)?;
                }
            }
            Self::Show { server, name, json } => {
                let server = server.connect()?;
                let policy = server
                    .get_policy(&name)
                    .await?
                    .ok_or_else(|| no_policy(&name))?;
                if json {
                    writeln!(out, "{policy}").map_err(output)?;
                } else {
                    writeln!(out, "{}", as_toml(&name, &policy)?).map_err(output)?;
                }
            }
            Self::Apply {
                server,
                file,
                prune,
            } => {
                let policies = read_file(&file)?;
                let server = server.connect()?;
                for (name, policy) in &policies {
                    let done = server.apply(name, policy).await?;
                    writeln!(out, "{done}").map_err(output)?;
                }
                if prune {
                    let list = server
                        .send(Method::GET, "/v1/policies", None, None)
                        .await?
                        .success()?;
                    for listed in list["policies"].as_array().into_iter().flatten() {
                        let Some(name) = listed["name"].as_str() else {
                            continue;
                        };
                        if !policies.contains_key(name) {
                            server.delete(name, &listed["version"]).await?;
                            writeln!(out, "deleted {name}").map_err(output)?;
                        }
                    }
                }
            }
            Self::Delete { server, name } => {
                let server = server.connect()?;
                let policy = server
                    .get_policy(&name)
                    .await?
                    .ok_or_else(|| no_policy(&name))?;
                server.delete(&name, &policy["version"]).await?;
                writeln!(out, "deleted {name}").map_err(output)?;
            }
        }
        Ok(())
    }
}

fn no_policy(name: &str) -> Failure {
    Failure::NoPolicyForApp(format!("no policy {name:?} this token may read"))
}

/// `path` if it is a file, else the policy files (`*.toml`, and Envoy's `*.yaml` and
/// `*.yml`) of the directory `path`, sorted.
fn policy_files(path: &str) -> Result<Vec<String>, Failure> {
    let wanted =
        |file: &Path| file.extension().is_some_and(|ext| ext == "toml") || envoy::is_yaml(file);
    let files = sluicegate_policy::listed(Path::new(path), wanted)?;
    if files.is_empty() {
        return Err(Failure::Input(format!(
            "{path} holds no policy file (.toml, .yaml, .yml)"
        )));
    }
    Ok(files
        .iter()
        .map(|f| f.to_string_lossy().into_owned())
        .collect())
}

/// The file's policies, each checked by the shared parser (positions in its errors).
fn read_file(path: &str) -> Result<BTreeMap<String, Policy>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Input(format!("cannot read {path}: {e}")))?;
    // The command line's loader's checks, pointing at the line at fault.
    let file = PolicyFile::parse_built(path, &text)?;
    Ok(file.policies)
}

/// An envoyproxy/ratelimit file, or limitador's limits file, checked by the server's
/// parser: what it defines.
fn read_envoy(path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    if limitador::is_limits_file(&text) {
        let config = limitador::Config::parse(path, &text).map_err(|e| e.to_string())?;
        let namespaces = config.namespaces().count();
        let limits: usize = config.namespaces().map(|(_, ns)| ns.limits.len()).sum();
        return Ok(format!(
            "{path}: limitador's limits valid ({namespaces} namespaces, {limits} limits)"
        ));
    }
    let config = envoy::Config::parse(path, &text).map_err(|e| e.to_string())?;
    let (name, domain) = config
        .domains()
        .next()
        .ok_or(format!("{path}: no domain"))?;
    let rules = domain.rules().len();
    Ok(format!("{path}: domain {name:?} valid ({rules} rules)"))
}

/// A policy as the table of a policy file, its metadata as comments.
fn as_toml(name: &str, policy: &Value) -> Result<String, Failure> {
    let mut fields = policy.clone();
    let mut comments = String::new();
    if let Value::Object(map) = &mut fields {
        for key in sluicegate_policy::STORED_FIELDS {
            if let Some(value) = map.remove(key) {
                if key != "name" {
                    comments.push_str(&format!("# {key}: {value}\n"));
                }
            }
        }
    }
    let parsed: Policy = serde_json::from_value(fields).map_err(|e| {
        Failure::Backend(format!(
            "the server sent a policy this tool cannot read: {e}"
        ))
    })?;
    let table = BTreeMap::from([("policies", BTreeMap::from([(name, parsed)]))]);
    let text = toml::to_string(&table)
        .map_err(|e| Failure::Backend(format!("cannot write the policy as TOML: {e}")))?;
    Ok(format!("{comments}{}", text.trim_end()))
}

/// `%`-encodes a query value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl ServerArgs {
    fn connect(self) -> Result<Server, Failure> {
        let token = match &self.token_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| Failure::Input(format!("cannot read {path}: {e}")))?,
            None => std::env::var("SLUICEGATE_TOKEN").map_err(|_| {
                Failure::Input("no token: give --token-file or set SLUICEGATE_TOKEN".into())
            })?,
        };
        let token = token.trim();
        if token.is_empty() {
            return Err(Failure::Input("the token is empty".into()));
        }
        let base = self.server.trim_end_matches('/').to_owned();
        match base.parse::<hyper::Uri>() {
            Ok(uri) if uri.scheme_str() == Some("http") && uri.authority().is_some() => {}
            _ => {
                return Err(Failure::Input(format!(
                    "--server is http://HOST:PORT: {:?}",
                    self.server
                )))
            }
        }
        Ok(Server {
            client: Client::builder(TokioExecutor::new()).build_http(),
            base,
            authorization: format!("Bearer {token}"),
        })
    }
}

/// A server and the user's token.
struct Server {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    authorization: String,
}

/// An answer: its status, `ETag`-free JSON body (or `Null`) and text.
struct Answer {
    status: StatusCode,
    json: Value,
    text: String,
}

impl Server {
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        version: Option<&Value>,
    ) -> Result<Answer, Failure> {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("authorization", &self.authorization);
        if let Some(version) = version {
            request = request.header("if-match", format!("\"{version}\""));
        }
        let body = match body {
            Some(body) => {
                request = request.header("content-type", "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(body))
            .map_err(|e| Failure::Input(format!("cannot build the request: {e}")))?;
        let unreachable = |e: &dyn std::fmt::Display| {
            Failure::Backend(format!(
                "the server at {} cannot be reached: {e}",
                self.base
            ))
        };
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| unreachable(&e))?;
            let status = response.status();
            let bytes = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| unreachable(&e))?
                .to_bytes();
            Ok::<_, Failure>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| unreachable(&format!("no answer within {} s", TIMEOUT.as_secs())))??;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(Answer {
            status,
            json: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        })
    }

    /// The policy `name`, or `None` where it does not exist (or may not be seen).
    async fn get_policy(&self, name: &str) -> Result<Option<Value>, Failure> {
        let path = format!("/v1/policies/{}", encode(name));
        let answer = self.send(Method::GET, &path, None, None).await?;
        match answer.status {
            StatusCode::OK => Ok(Some(answer.json)),
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(refusal(&answer)),
        }
    }

    /// Creates or updates `name`; what was done, for people.
    async fn apply(&self, name: &str, policy: &Policy) -> Result<String, Failure> {
        let wanted = serde_json::to_value(policy)
            .map_err(|e| Failure::Input(format!("policy {name:?}: {e}")))?;
        let current = self.get_policy(name).await?;
        let version = match &current {
            Some(current) => {
                let mut fields = current.clone();
                if let Value::Object(map) = &mut fields {
                    for key in sluicegate_policy::STORED_FIELDS {
                        map.remove(key);
                    }
                }
                // Compared as policies, not as JSON: the server writes fields the file
                // may leave out (an empty description).
                if serde_json::from_value::<Policy>(fields).is_ok_and(|current| current == *policy)
                {
                    return Ok(format!("unchanged {name} (version {})", current["version"]));
                }
                Some(&current["version"])
            }
            None => None,
        };
        let path = format!("/v1/policies/{}", encode(name));
        let stored = self
            .send(Method::PUT, &path, Some(&wanted), version)
            .await?
            .success()?;
        let done = if version.is_some() {
            "updated"
        } else {
            "created"
        };
        Ok(format!("{done} {name} (version {})", stored["version"]))
    }

    async fn delete(&self, name: &str, version: &Value) -> Result<(), Failure> {
        let path = format!("/v1/policies/{}", encode(name));
        self.send(Method::DELETE, &path, None, Some(version))
            .await?
            .success()
            .map(drop)
    }
}

impl Answer {
    /// A 2xx answer's JSON; any other a failure.
    fn success(self) -> Result<Value, Failure> {
        if self.status.is_success() {
            Ok(self.json)
        } else {
            Err(refusal(&self))
        }
    }
}

/// A non-2xx answer as a failure with its exit code and the server's message.
fn refusal(answer: &Answer) -> Failure {
    let message = answer.json["error"]
        .as_str()
        .map_or_else(|| answer.text.trim().to_owned(), str::to_owned);
    let field = answer.json["field"]
        .as_str()
        .map_or_else(String::new, |f| format!(" ({f})"));
    let message = format!("the server answered {}: {message}{field}", answer.status);
    match answer.status {
        StatusCode::UNAUTHORIZED
        | StatusCode::FORBIDDEN
        | StatusCode::CONFLICT
        | StatusCode::PRECONDITION_REQUIRED
        | StatusCode::PRECONDITION_FAILED => Failure::Refused(message),
        StatusCode::NOT_FOUND => Failure::NoPolicyForApp(message),
        s if s.is_server_error() => Failure::Backend(message),
        _ => Failure::Input(message),
    }
}
