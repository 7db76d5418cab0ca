//! Side by side with limitador: each row starts its server as a process of its own, warms
//! it for a second, then measures decisions a second, latency and the CPU time the
//! server (and Redis) spent per decision, read from `/proc` before and after. The servers
//! alternate row by row, in the same run, with the same limit, keys and requests.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use serde_json::{json, Value};
use sluicegate_core::Kind;

use crate::http::Ask;
use crate::measure::Phase;
use crate::procs::{
    cpu_us, limitador, sluicegate, sluicegate_bin, Running, LIMITADOR_FILES, LIMITADOR_FIXED,
};
use crate::{grpc, http, Options, Protocol};

/// A row's server.
#[derive(Clone, Copy)]
enum Server {
    /// sluicegate on this policy (a name of `procs::POLICIES`) and its algorithm.
    Sluicegate(&'static str, &'static str),
    /// sluicegate on a limitador file of `procs::LIMITADOR_FILES` (its name and text).
    SluicegateFile(&'static str, &'static str),
    /// limitador with this storage, on the fixed window ([`LIMITADOR_FIXED`]).
    Limitador(&'static str),
    /// limitador on a limitador file of `procs::LIMITADOR_FILES` (its name and text), the
    /// same file as a [`Server::SluicegateFile`] row, with this storage.
    LimitadorFile(&'static str, &'static str, &'static str),
}

impl Server {
    /// The row's `server` and `variant` columns.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Self::Sluicegate(_, algorithm) => ("sluicegate", algorithm),
            Self::SluicegateFile(name, _) => ("sluicegate", name),
            Self::Limitador(storage) => ("limitador", storage),
            Self::LimitadorFile(name, ..) => ("limitador", name),
        }
    }
}

/// The rows of a backend, the servers alternating; then each limitador file on
/// sluicegate and on limitador (its `redis` storage on Redis), the three limits' after
/// their native twin on sluicegate (a composite policy).
fn rows(redis: bool) -> Vec<Server> {
    let fixed = Server::Sluicegate("bench", Kind::FixedWindow.name());
    let bucket = Server::Sluicegate("bench_tb", Kind::TokenBucket.name());
    let [(one, one_file), (three, three_file)] = LIMITADOR_FILES;
    let storage = if redis { "redis" } else { "memory" };
    let files = [
        Server::SluicegateFile(one, one_file),
        Server::LimitadorFile(one, one_file, storage),
        Server::Sluicegate("bench_3", Kind::Composite.name()),
        Server::SluicegateFile(three, three_file),
        Server::LimitadorFile(three, three_file, storage),
    ];
    let mut rows = if redis {
        vec![
            fixed,
            Server::Limitador("redis"),
            bucket,
            Server::Limitador("redis_cached"),
        ]
    } else {
        vec![fixed, Server::Limitador("memory"), bucket]
    };
    rows.extend(files);
    rows
}

/// A Redis the rows share: its URL, its process (if this run started it) and its pid
/// (from `INFO`, so a running one's CPU is read too when it is on this machine).
pub struct Redis {
    pub url: String,
    pub pid: Option<u32>,
    _owned: Option<sluicegate_test_support::Server>,
}

impl Redis {
    /// `redis` starts one for the run; any other backend is the URL of a running one.
    pub fn new(backend: &str) -> Result<Self, String> {
        let (url, owned) = if backend == "redis" {
            let server = sluicegate_test_support::Server::start();
            (server.url(), Some(server))
        } else {
            (backend.to_owned(), None)
        };
        let mut redis = Self {
            url,
            pid: None,
            _owned: owned,
        };
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut redis.connection()?)
            .map_err(|e| e.to_string())?;
        redis.pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
            .filter(|pid| cpu_us(*pid).is_some());
        Ok(redis)
    }

    fn connection(&self) -> Result<redis::Connection, String> {
        redis::Client::open(self.url.as_str())
            .and_then(|c| c.get_connection())
            .map_err(|e| format!("{}: {e}", self.url))
    }

    /// Empties it, so each row starts from nothing.
    fn flush(&self) -> Result<(), String> {
        redis::cmd("FLUSHALL")
            .query::<()>(&mut self.connection()?)
            .map_err(|e| e.to_string())
    }
}

/// Starts a row's server.
async fn start(
    server: Server,
    sluicegate_bin: &Path,
    limitador_bin: &Path,
    redis: Option<&Redis>,
) -> Result<Running, String> {
    let url = redis.map(|r| r.url.as_str());
    match (server, url) {
        (Server::Sluicegate(..), url) => sluicegate(sluicegate_bin, url, None).await,
        (Server::SluicegateFile(_, limits), url) => {
            sluicegate(sluicegate_bin, url, Some(limits)).await
        }
        (Server::Limitador(storage), url) => {
            limitador(limitador_bin, LIMITADOR_FIXED, storage, url)
        }
        (Server::LimitadorFile(_, limits, storage), url) => {
            limitador(limitador_bin, limits, storage, url)
        }
    }
}

/// One phase of the row's requests, for `duration`.
async fn send(
    server: Server,
    running: &Running,
    options: &Options,
    duration: Duration,
) -> Result<Phase, String> {
    let load = crate::measure::Load {
        duration,
        ..options.load()
    };
    let domain = match server {
        Server::Sluicegate(policy, _) => policy,
        Server::Limitador(_) | Server::LimitadorFile(..) | Server::SluicegateFile(..) => "bench",
    };
    match options.protocol {
        Some(Protocol::Grpc) => {
            let calls = grpc::Calls::new(domain, &running.token, options.keys)?;
            grpc::phase(&running.grpc, &calls, options.connections, load).await
        }
        _ => {
            let ask = match server {
                Server::Sluicegate(policy, _) => {
                    Ask::decide(&running.http, &running.token, policy, options.keys)?
                }
                Server::Limitador(_) | Server::LimitadorFile(..) | Server::SluicegateFile(..) => {
                    let bodies: Arc<[Bytes]> = (0..options.keys)
                        .map(|k| {
                            Bytes::from(format!(
                                r#"{{"namespace":"bench","values":{{"k":"k{k}"}},"delta":1}}"#
                            ))
                        })
                        .collect();
                    // limitador ignores the token; sluicegate's namespaces need it.
                    Ask::posting(&running.http, "/check_and_report", &running.token, bodies)?
                }
            };
            Ok(http::phase(&running.http, ask, load).await)
        }
    }
}

/// A row measured: warmed for a second, then the CPU time of the server and Redis
/// around the measured phase.
async fn row(
    server: Server,
    running: &Running,
    redis: Option<&Redis>,
    options: &Options,
) -> Result<Value, String> {
    send(server, running, options, Duration::from_secs(1)).await?;
    let redis_pid = redis.and_then(|r| r.pid);
    let cpu = || (cpu_us(running.pid()), redis_pid.and_then(cpu_us));
    let before = cpu();
    let phase = send(server, running, options, options.duration).await?;
    let after = cpu();
    let decisions = phase.requests.max(1) as f64;
    let per = |a: Option<u64>, b: Option<u64>| {
        Some((b?.checked_sub(a?)? as f64 / decisions * 100.0).round() / 100.0)
    };
    if let Some(why) = &phase.first_error {
        eprintln!(
            "load: {} errors, the first: {}",
            phase.errors,
            why.trim_end()
        );
    }
    let (name, variant) = server.names();
    Ok(json!({
        "server": name,
        "variant": variant,
        "protocol": if options.protocol == Some(Protocol::Grpc) { "grpc" } else { "http" },
        "backend": if redis.is_some() { "redis" } else { "memory" },
        "offered_per_sec": options.rate,
        "decisions_per_sec": phase.per_second().round(),
        "p50_us": phase.percentile(500),
        "p99_us": phase.percentile(990),
        "p999_us": phase.percentile(999),
        "server_cpu_us_per_decision": per(before.0, after.0),
        "redis_cpu_us_per_decision": per(before.1, after.1),
        "errors": phase.errors,
    }))
}

/// The peer's binary, or why its rows are left out.
fn peer(options: &Options) -> Result<PathBuf, &'static str> {
    if !options.peer {
        return Err("no --peer limitador");
    }
    std::env::var_os("LIMITADOR_SERVER")
        .map(PathBuf::from)
        .ok_or("LIMITADOR_SERVER is not set")
}

/// A row as one JSON object, or as a line of aligned columns.
fn print(row: &Value, json: bool) {
    if json {
        println!("{row}");
        return;
    }
    println!(
        "{:<10} {:<13} {:>5} {:>6} {:>9} /s  p50 {:>6} µs  p99 {:>6} µs  p99.9 {:>6} µs  server {:>6} µs/decision  redis {:>6}",
        row["server"].as_str().unwrap_or_default(),
        row["variant"].as_str().unwrap_or_default(),
        row["protocol"].as_str().unwrap_or_default(),
        row["backend"].as_str().unwrap_or_default(),
        row["decisions_per_sec"],
        row["p50_us"],
        row["p99_us"],
        row["p999_us"],
        row["server_cpu_us_per_decision"],
        row["redis_cpu_us_per_decision"],
    );
}

/// The side-by-side rows of `options.protocol` on `options.backend`.
pub fn run(options: &Options) -> ExitCode {
    let setup = sluicegate_bin().and_then(|bin| {
        let redis = options.backend.as_deref().map(Redis::new).transpose()?;
        let runtime = crate::runtime("load")?;
        Ok((bin, redis, runtime))
    });
    let (bin, redis, runtime) = match setup {
        Ok(setup) => setup,
        Err(e) => {
            eprintln!("load: {e}");
            return ExitCode::from(4);
        }
    };
    let peer = peer(options).inspect_err(|why| eprintln!("load: {why}: sluicegate's rows alone"));
    for server in rows(redis.is_some()) {
        let peer_bin = match (server, &peer) {
            (Server::Limitador(_) | Server::LimitadorFile(..), Err(_)) => continue,
            (_, peer) => peer.as_deref().unwrap_or(Path::new("")),
        };
        let measured = runtime.block_on(async {
            if let Some(redis) = &redis {
                redis.flush()?;
            }
            let running = start(server, &bin, peer_bin, redis.as_ref()).await?;
            row(server, &running, redis.as_ref(), options).await
        });
        match measured {
            Ok(row) => print(&row, options.json),
            Err(e) => {
                eprintln!("load: {}: {e}", server.names().0);
                return ExitCode::from(3);
            }
        }
    }
    ExitCode::SUCCESS
}
