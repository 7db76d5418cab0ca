//! A client of Envoy's rate limit service generated from the server's vendored protos.

use sluicegate_server::grpc::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use sluicegate_server::grpc::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

use super::TestServer;

/// A descriptor of `entries`, costing `hits` (none: the request's).
pub fn descriptor(entries: &[(&str, &str)], hits: Option<u32>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        limit: None,
        hits_addend: hits,
    }
}

/// Asks `domain` about `descriptors`, with app token `token`.
pub async fn ask(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    token: Option<&str>,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    });
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    client
        .should_rate_limit(request)
        .await
        .map(|r| r.into_inner())
}

/// Asks `domain` about one descriptor of `entries`, costing `hits` (none: 1), with app
/// token `token`.
pub async fn ask_one(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    token: &str,
    domain: &str,
    entries: &[(&str, &str)],
    hits: Option<u32>,
) -> Result<RateLimitResponse, tonic::Status> {
    ask(client, Some(token), domain, vec![descriptor(entries, hits)]).await
}

/// A client of the server's gRPC listener.
pub async fn client(server: &TestServer) -> RateLimitServiceClient<tonic::transport::Channel> {
    let grpc = server.grpc.expect("gRPC listener");
    RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect")
}
