//! The gRPC client: Envoy's `ShouldRateLimit` (the client generated in the server crate
//! from its vendored protos) over N HTTP/2 connections, M calls in flight on each.

use std::sync::Arc;
use std::time::Instant;

use sluicegate_server::grpc::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::{
    rate_limit_response::Code, RateLimitRequest,
};
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

use crate::measure::{turns, Load, Phase, Sender};

/// What the calls carry: the domain (sluicegate's policy, limitador's namespace), one
/// descriptor `k=k{i}` per key, and a bearer token (which a peer ignores).
#[derive(Clone)]
pub struct Calls {
    requests: Arc<[RateLimitRequest]>,
    token: MetadataValue<tonic::metadata::Ascii>,
}

impl Calls {
    /// The calls on `domain` for `keys` keys, carrying `token` (made once, cloned per call).
    pub fn new(domain: &str, token: &str, keys: u64) -> Result<Self, String> {
        let requests = (0..keys)
            .map(|k| RateLimitRequest {
                domain: domain.to_owned(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "k".into(),
                        value: format!("k{k}"),
                    }],
                    ..RateLimitDescriptor::default()
                }],
                hits_addend: 1,
            })
            .collect();
        let token = format!("Bearer {token}")
            .parse()
            .map_err(|e| format!("a token that is not metadata: {e}"))?;
        Ok(Self { requests, token })
    }

    /// The `n`th turn's call.
    fn call(&self, n: u64) -> tonic::Request<RateLimitRequest> {
        let i = usize::try_from(n % self.requests.len() as u64).unwrap_or(0);
        let request = &self.requests[i];
        let mut call = tonic::Request::new(request.clone());
        call.metadata_mut()
            .insert("authorization", self.token.clone());
        call
    }
}

/// Opens `n` connections to `addr` (no Nagle delay, as a gateway's client would).
async fn connect(addr: &str, n: usize) -> Result<Vec<Channel>, String> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .tcp_nodelay(true);
    let mut channels = Vec::with_capacity(n);
    for _ in 0..n {
        channels.push(
            endpoint
                .connect()
                .await
                .map_err(|e| format!("{addr}: {e}"))?,
        );
    }
    Ok(channels)
}

/// One worker's calls. An `OVER_LIMIT` is an answer like `OK`; an error status or
/// `UNKNOWN` is a failure.
struct Grpc {
    client: RateLimitServiceClient<Channel>,
    calls: Calls,
}

impl Sender for Grpc {
    async fn ready(&mut self) -> Result<(), String> {
        Ok(())
    }

    async fn send(&mut self, n: u64) -> Result<(), String> {
        match self.client.should_rate_limit(self.calls.call(n)).await {
            Ok(answer) if answer.get_ref().overall_code != Code::Unknown as i32 => Ok(()),
            Ok(answer) => Err(format!("no verdict: {:?}", answer.get_ref())),
            Err(status) => Err(status.to_string()),
        }
    }
}

/// `calls` sent to `addr` over `connections` connections, `load.workers` calls in flight
/// spread over them.
pub async fn phase(
    addr: &str,
    calls: &Calls,
    connections: usize,
    load: Load,
) -> Result<Phase, String> {
    let channels = connect(addr, connections).await?;
    let start = Instant::now();
    let tasks = (0..load.workers)
        .map(|w| {
            let channel = channels[w % channels.len()].clone();
            let client = RateLimitServiceClient::new(channel);
            let calls = calls.clone();
            tokio::spawn(turns(Grpc { client, calls }, load, start, w))
        })
        .collect();
    Ok(Phase::gather(start, tasks).await)
}
