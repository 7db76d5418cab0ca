//! A proxy speaking Envoy's quota protocol as Envoy's `rate_limit_quota` filter does
//! (the guide's RLQS chapter configures Envoy field for field as this): one stream per
//! domain with the app token in its metadata; a new bucket's first request reported
//! alone at once with `time_elapsed` 0; every interval one report of every bucket,
//! idle ones too, with whole-second `time_elapsed`; a local token bucket enforcing each
//! assignment (replaced only when `max_tokens`, `tokens_per_fill` or `fill_interval`
//! change, else its time to live extended); no assignment or an expired one: allow all
//! (`no_assignment_behavior` and `expired_assignment_behavior` ALLOW_ALL); abandoned
//! buckets forgotten; a closed stream reopened at the next tick.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluicegate_server::grpc::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use sluicegate_server::grpc::envoy::r#type::v3::TokenBucket;
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A live assignment.
#[derive(Debug, Clone)]
enum Assigned {
    Blanket(BlanketRule),
    /// A token bucket and its tokens in millionths.
    Tokens {
        bucket: TokenBucket,
        micros: u128,
        filled: Instant,
    },
}

/// One bucket the proxy holds.
#[derive(Debug)]
struct Bucket {
    id: BucketId,
    allowed: u64,
    denied: u64,
    assigned: Option<(Assigned, Instant)>,
    /// When the first token bucket arrived, since the bucket's first request.
    first_tokens: Option<Duration>,
    opened: Instant,
}

/// What a proxy knows, shared by its requests and its stream's task.
#[derive(Debug, Default)]
struct State {
    buckets: BTreeMap<u64, Bucket>,
    outbox: Option<mpsc::UnboundedSender<RateLimitQuotaUsageReports>>,
    /// Assignments Envoy would misread: described.
    misread: Vec<String>,
    /// How the last stream ended, if one did.
    ended: Vec<tonic::Code>,
    /// Every time-to-live received, in seconds.
    ttls: Vec<i64>,
    streams: usize,
}

/// A simulated Envoy.
pub struct Proxy {
    state: Arc<Mutex<State>>,
    domain: String,
    task: tokio::task::JoinHandle<()>,
}

/// The proxy's number for a bucket id (Envoy's: a hash of it).
pub fn number(id: &BucketId) -> u64 {
    let mut hasher = DefaultHasher::new();
    id.bucket.hash(&mut hasher);
    hasher.finish()
}

/// A bucket id of `entries`.
pub fn bucket(entries: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

/// Why Envoy would misread `action`, if it would.
fn misread(action: &BucketAction) -> Option<String> {
    let Some(Action::QuotaAssignmentAction(assignment)) = &action.bucket_action else {
        return None;
    };
    let whole = |d: &prost_types::Duration| d.nanos == 0 && d.seconds >= 1;
    match assignment.assignment_time_to_live.as_ref() {
        Some(ttl) if whole(ttl) => {}
        ttl => return Some(format!("time to live {ttl:?}")),
    }
    match assignment
        .rate_limit_strategy
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
    {
        Some(Strategy::BlanketRule(_)) => None,
        Some(Strategy::TokenBucket(b))
            if b.max_tokens > 0
                && b.tokens_per_fill.is_some_and(|t| t > 0)
                && b.fill_interval.as_ref().is_some_and(whole) =>
        {
            None
        }
        other => Some(format!("strategy {other:?}")),
    }
}

impl Proxy {
    /// A proxy reporting to `grpc` every `interval` as app `token` in `domain`.
    pub fn start(grpc: SocketAddr, token: &str, domain: &str, interval: Duration) -> Self {
        Self::start_any(&[grpc], token, domain, interval)
    }

    /// A proxy behind a Service of replicas `grpcs`: its stream opens on the first that
    /// answers, and reopens on the next when one goes away.
    pub fn start_any(grpcs: &[SocketAddr], token: &str, domain: &str, interval: Duration) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let task = tokio::spawn(run(
            Arc::clone(&state),
            grpcs.to_vec(),
            token.to_owned(),
            domain.to_owned(),
            interval,
        ));
        Self {
            state,
            domain: domain.to_owned(),
            task,
        }
    }

    /// One request matched into the bucket of `entries`: whether it is admitted.
    pub fn request(&self, entries: &[(&str, &str)]) -> bool {
        let id = bucket(entries);
        let n = number(&id);
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        let State {
            buckets, outbox, ..
        } = &mut *state;
        let Some(held) = buckets.get_mut(&n) else {
            // No assignment yet: allowed, and reported alone at once.
            let usage = BucketQuotaUsage {
                bucket_id: Some(id.clone()),
                time_elapsed: Some(prost_types::Duration::default()),
                num_requests_allowed: 1,
                num_requests_denied: 0,
            };
            if let Some(outbox) = outbox {
                let _ = outbox.send(RateLimitQuotaUsageReports {
                    domain: self.domain.clone(),
                    bucket_quota_usages: vec![usage],
                });
            }
            let bucket = Bucket {
                id,
                allowed: 0,
                denied: 0,
                assigned: None,
                first_tokens: None,
                opened: now,
            };
            buckets.insert(n, bucket);
            return true;
        };
        let allowed = match held.assigned.as_mut() {
            Some((assigned, expires)) if *expires > now => admit(assigned, now),
            _ => true,
        };
        if allowed {
            held.allowed += 1;
        } else {
            held.denied += 1;
        }
        allowed
    }

    /// The token bucket live for `entries`' bucket: (tokens per fill, fill seconds, max).
    pub fn live(&self, entries: &[(&str, &str)]) -> Option<(u32, i64, u32)> {
        let state = self.state.lock().unwrap();
        let (assigned, expires) = state
            .buckets
            .get(&number(&bucket(entries)))?
            .assigned
            .as_ref()?;
        match assigned {
            Assigned::Tokens { bucket, .. } if *expires > Instant::now() => Some((
                bucket.tokens_per_fill.unwrap_or(1),
                bucket.fill_interval.as_ref().map_or(0, |d| d.seconds),
                bucket.max_tokens,
            )),
            _ => None,
        }
    }

    /// The blanket rule live for `entries`' bucket, if one is.
    pub fn blanket(&self, entries: &[(&str, &str)]) -> Option<BlanketRule> {
        let state = self.state.lock().unwrap();
        match state
            .buckets
            .get(&number(&bucket(entries)))?
            .assigned
            .as_ref()?
        {
            (Assigned::Blanket(rule), expires) if *expires > Instant::now() => Some(*rule),
            _ => None,
        }
    }

    /// Whether the proxy holds `entries`' bucket (not abandoned).
    pub fn holds(&self, entries: &[(&str, &str)]) -> bool {
        self.state
            .lock()
            .unwrap()
            .buckets
            .contains_key(&number(&bucket(entries)))
    }

    /// How long after its first request `entries`' bucket got its first token bucket.
    pub fn first_tokens(&self, entries: &[(&str, &str)]) -> Option<Duration> {
        self.state
            .lock()
            .unwrap()
            .buckets
            .get(&number(&bucket(entries)))?
            .first_tokens
    }

    /// Assignments Envoy would misread, described.
    pub fn misread(&self) -> Vec<String> {
        self.state.lock().unwrap().misread.clone()
    }

    /// The codes the streams ended with so far, and how many were opened.
    pub fn ended(&self) -> (Vec<tonic::Code>, usize) {
        let state = self.state.lock().unwrap();
        (state.ended.clone(), state.streams)
    }

    /// Every time to live received, in seconds.
    pub fn ttls(&self) -> Vec<i64> {
        self.state.lock().unwrap().ttls.clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Takes one token of `assigned` at `now`, if it has one (Envoy's token bucket:
/// continuous refill of `tokens_per_fill` per `fill_interval`).
fn admit(assigned: &mut Assigned, now: Instant) -> bool {
    match assigned {
        Assigned::Blanket(rule) => *rule == BlanketRule::AllowAll,
        Assigned::Tokens {
            bucket,
            micros,
            filled,
        } => {
            let fill_s = bucket
                .fill_interval
                .as_ref()
                .map_or(1, |d| d.seconds.max(1)) as u128;
            let per_fill = u128::from(bucket.tokens_per_fill.unwrap_or(1));
            let elapsed = now.duration_since(*filled).as_micros();
            let max = u128::from(bucket.max_tokens) * 1_000_000;
            *micros = (*micros + elapsed * per_fill / fill_s).min(max);
            *filled = now;
            if *micros >= 1_000_000 {
                *micros -= 1_000_000;
                true
            } else {
                false
            }
        }
    }
}

/// Applies one response's actions to the proxy's buckets.
fn apply(state: &mut State, response: RateLimitQuotaResponse) {
    let now = Instant::now();
    for action in response.bucket_action {
        if let Some(why) = misread(&action) {
            state.misread.push(why);
        }
        let Some(id) = action.bucket_id.as_ref() else {
            continue;
        };
        let n = number(id);
        match action.bucket_action {
            Some(Action::AbandonAction(_)) => {
                state.buckets.remove(&n);
            }
            Some(Action::QuotaAssignmentAction(assignment)) => {
                let Some(held) = state.buckets.get_mut(&n) else {
                    continue;
                };
                let ttl = assignment.assignment_time_to_live.map_or(0, |d| d.seconds);
                state.ttls.push(ttl);
                let expires = now + Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
                let strategy = assignment.rate_limit_strategy.and_then(|s| s.strategy);
                let assigned = match strategy {
                    Some(Strategy::TokenBucket(bucket)) => {
                        held.first_tokens
                            .get_or_insert(now.duration_since(held.opened));
                        match held.assigned.take() {
                            // The same bucket, live: its tokens are kept, its life extended.
                            Some((
                                Assigned::Tokens {
                                    bucket: live,
                                    micros,
                                    filled,
                                },
                                until,
                            )) if until > now
                                && (live.max_tokens, live.tokens_per_fill, live.fill_interval)
                                    == (
                                        bucket.max_tokens,
                                        bucket.tokens_per_fill,
                                        bucket.fill_interval,
                                    ) =>
                            {
                                Assigned::Tokens {
                                    bucket: live,
                                    micros,
                                    filled,
                                }
                            }
                            _ => Assigned::Tokens {
                                micros: u128::from(bucket.max_tokens) * 1_000_000,
                                bucket,
                                filled: now,
                            },
                        }
                    }
                    Some(Strategy::BlanketRule(rule)) => Assigned::Blanket(
                        BlanketRule::try_from(rule).unwrap_or(BlanketRule::AllowAll),
                    ),
                    _ => Assigned::Blanket(BlanketRule::AllowAll),
                };
                held.assigned = Some((assigned, expires));
            }
            None => {}
        }
    }
}

/// The full report of every bucket, counts since the last one, and the counts reset.
fn full_report(state: &mut State, domain: &str, elapsed: Duration) -> RateLimitQuotaUsageReports {
    let bucket_quota_usages = state
        .buckets
        .values_mut()
        .map(|b| BucketQuotaUsage {
            bucket_id: Some(b.id.clone()),
            time_elapsed: Some(prost_types::Duration {
                seconds: i64::try_from(elapsed.as_secs()).unwrap_or(0),
                nanos: 0,
            }),
            num_requests_allowed: std::mem::take(&mut b.allowed),
            num_requests_denied: std::mem::take(&mut b.denied),
        })
        .collect();
    RateLimitQuotaUsageReports {
        domain: domain.to_owned(),
        bucket_quota_usages,
    }
}

/// A stream's outbox and its responses.
pub type Opened = (
    mpsc::UnboundedSender<RateLimitQuotaUsageReports>,
    tonic::Streaming<RateLimitQuotaResponse>,
);

/// Opens a stream as app `token` (none: no token): its outbox and its responses, or
/// the status refusing it.
pub async fn open(grpc: SocketAddr, token: Option<&str>) -> Result<Opened, tonic::Status> {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let metadata: Vec<_> = bearer
        .iter()
        .map(|b| ("authorization", b.as_str()))
        .collect();
    open_with(grpc, &metadata).await
}

/// Opens a stream with `metadata` (`authorization`, `traceparent`...).
pub async fn open_with(
    grpc: SocketAddr,
    metadata: &[(&'static str, &str)],
) -> Result<Opened, tonic::Status> {
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{grpc}"))
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let (outbox, mut reports) = mpsc::unbounded_channel();
    let outgoing = futures_util::stream::poll_fn(move |cx| reports.poll_recv(cx));
    let mut request = tonic::Request::new(outgoing);
    for (name, value) in metadata {
        let value = value.parse().expect("metadata");
        request.metadata_mut().insert(*name, value);
    }
    let responses = client.stream_rate_limit_quotas(request).await?.into_inner();
    Ok((outbox, responses))
}

/// The proxy's stream: reports on each tick, responses applied, reopened when closed.
async fn run(
    state: Arc<Mutex<State>>,
    grpcs: Vec<SocketAddr>,
    token: String,
    domain: String,
    interval: Duration,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut responses: Option<tonic::Streaming<RateLimitQuotaResponse>> = None;
    let mut turn = 0;
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                for _ in 0..grpcs.len() {
                    if responses.is_some() {
                        break;
                    }
                    if let Ok((outbox, opened)) = open(grpcs[turn], Some(&token)).await {
                        let mut state = state.lock().unwrap();
                        state.outbox = Some(outbox);
                        state.streams += 1;
                        responses = Some(opened);
                    } else {
                        turn = (turn + 1) % grpcs.len();
                    }
                }
                let mut state = state.lock().unwrap();
                let report = full_report(&mut state, &domain, interval);
                if let (Some(outbox), false) = (&state.outbox, report.bucket_quota_usages.is_empty()) {
                    let _ = outbox.send(report);
                }
            }
            message = async {
                match responses.as_mut() {
                    Some(r) => r.message().await,
                    None => std::future::pending().await,
                }
            } => match message {
                Ok(Some(response)) => apply(&mut state.lock().unwrap(), response),
                ended => {
                    let mut state = state.lock().unwrap();
                    state.ended.push(ended.err().map_or(tonic::Code::Ok, |s| s.code()));
                    state.outbox = None;
                    responses = None;
                }
            },
        }
    }
}
