//! Envoy's quota service (RLQS, `StreamRateLimitQuotas`): one stream per proxy and
//! domain, usage reports in, assignments out, each limit shared among its streams by
//! their demand (see `quotas.rs`); the guide's RLQS chapter says what Envoy sends.
//!
//! A stream is admitted as an RLS call is (its app token in the metadata). Each bucket
//! is governed as `governs.rs` says: a shared limit gets a token bucket of its share,
//! no limit `ALLOW_ALL`, a limit of 0 `DENY_ALL`, and a bucket that cannot be governed
//! (a malformed id, a policy the app may not use, a lease) no assignment at all, which
//! leaves the stream and its other buckets as they are. A bucket idle for
//! [`ABANDON_AFTER`] reports is abandoned.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::Stream;
use opentelemetry::KeyValue;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use super::admitted::Admitted;
use super::envoy::r#type::v3::rate_limit_strategy::BlanketRule;
use super::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action,
};
use super::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use super::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use super::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use super::governs::{govern, Governed};
use super::mailbox::Mailbox;
use super::quotas::{assign, blanket, bucket_id, entries, Entries, Quotas, Usage};
use crate::metrics::Shown;
use crate::service::auth::App;
use crate::service::Service;
use crate::telemetry;

/// Streams open at once; more are refused `RESOURCE_EXHAUSTED`.
const MAX_STREAMS: usize = 10_000;
/// Buckets one stream may hold; a report past it ends the stream.
pub(super) const MAX_BUCKETS: usize = 1_000;
/// Entries of one bucket id; a longer id gets no assignment.
const MAX_ENTRIES: usize = 16;
/// Reports one stream may send per report interval: one first report per new bucket,
/// and a few periodic ones.
const MAX_REPORTS: u64 = MAX_BUCKETS as u64 + 24;
/// The largest report, in bytes (a thousand buckets of a few entries fit well within).
pub(super) const MAX_MESSAGE: usize = 1 << 20;
/// Reports in a row with no request after which a bucket is abandoned.
pub(super) const ABANDON_AFTER: u32 = 12;
/// Assignments live this many report intervals.
const TTL_INTERVALS: u32 = 3;
/// How long assignments sent at shutdown live: no longer than any time to live, so that
/// a stopped replica's subscribers in Redis outlive them.
const SHUTDOWN_TTL: Duration = Duration::from_secs(1);

/// What every quota stream shares.
#[derive(Debug)]
pub(crate) struct Streams {
    service: Arc<Service>,
    quotas: Arc<Quotas>,
    interval: Duration,
    permits: Arc<Semaphore>,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Mailbox>>>,
    /// Shutting down: new streams are refused.
    closing: AtomicBool,
}

impl Streams {
    /// The streams of `service`, whose proxies report every `interval`.
    pub(crate) fn new(service: Arc<Service>, interval: Duration) -> Self {
        // An interval of 0 would never end a report window.
        let interval = interval.max(Duration::from_millis(1));
        let ttl = interval.saturating_mul(TTL_INTERVALS);
        let whole = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let con = service.backend.redis();
        let quotas = Arc::new(Quotas::new(Duration::from_secs(whole), interval, con));
        tokio::spawn(Quotas::run(Arc::downgrade(&quotas)));
        Self {
            service,
            quotas,
            interval,
            permits: Arc::new(Semaphore::new(MAX_STREAMS)),
            next: AtomicU64::new(0),
            open: Mutex::default(),
            closing: AtomicBool::new(false),
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Mailbox>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Shutdown: every share re-sent with a short time to live, then every stream
    /// ended `UNAVAILABLE`, so that proxies fall back soon and reconnect elsewhere.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.quotas.close(SHUTDOWN_TTL);
        for mailbox in self.open().values() {
            mailbox.end(Some(Status::unavailable("the server is shutting down")));
        }
    }
}

impl Shown for Streams {
    fn render(&self) -> String {
        self.quotas.render()
    }

    fn figures(&self, name: &str) -> Option<serde_json::Value> {
        self.quotas.figures(name)
    }
}

/// The quota service over [`Streams`].
#[derive(Debug, Clone)]
pub(crate) struct Rlqs(Arc<Streams>);

impl Rlqs {
    /// The gRPC service over `streams`.
    pub(crate) fn server(streams: Arc<Streams>) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(Self(streams)).max_decoding_message_size(MAX_MESSAGE)
    }
}

/// A stream's responses.
type Responses = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for Rlqs {
    type StreamRateLimitQuotasStream = Responses;

    async fn stream_rate_limit_quotas(
        &self,
        mut request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Responses>, Status> {
        let Some(Admitted { app, .. }) = request.extensions_mut().remove::<Admitted>() else {
            return Err(Status::unauthenticated("the call was not admitted"));
        };
        let permit = Arc::clone(&self.0.permits)
            .try_acquire_owned()
            .map_err(|_| Status::resource_exhausted("too many quota streams; retry"))?;
        let streams = &self.0;
        let id = streams.next.fetch_add(1, Ordering::Relaxed);
        let mailbox = Arc::new(Mailbox::default());
        {
            let mut open = streams.open();
            // Checked under the lock `close` ends the open streams under.
            if streams.closing.load(Ordering::Acquire) {
                return Err(Status::unavailable("the server is shutting down"));
            }
            open.insert(id, Arc::clone(&mailbox));
        }
        let (gone, watching) = oneshot::channel::<()>();
        let reader = Reader {
            streams: Arc::clone(streams),
            app,
            id,
            metadata: request.metadata().clone(),
            mailbox: Arc::clone(&mailbox),
            domain: None,
            buckets: HashMap::new(),
            window: (Instant::now(), 0),
        };
        tokio::spawn(reader.run(request.into_inner(), watching, permit));
        let responses = futures_util::stream::unfold((mailbox, gone), |(mailbox, gone)| async {
            let next = mailbox.next().await?;
            Some((next, (mailbox, gone)))
        });
        Ok(Response::new(Box::pin(responses)))
    }
}

/// A bucket a stream holds.
#[derive(Debug)]
struct Held {
    id: Entries,
    /// The shared limit it is subscribed to.
    limit: Option<String>,
    /// Reports in a row with no request.
    idle: u32,
}

impl Held {
    fn new(id: &BucketId) -> Self {
        Self {
            id: entries(id),
            limit: None,
            idle: 0,
        }
    }
}

/// Whether `held` are the entries of `id` (without copying them).
fn same(held: &Entries, id: &BucketId) -> bool {
    held.len() == id.bucket.len()
        && (held.iter()).all(|(k, v)| id.bucket.get(&**k).is_some_and(|w| **v == **w))
}

/// One stream's reports, read on a task of their own.
#[derive(Debug)]
struct Reader {
    streams: Arc<Streams>,
    app: App,
    id: u64,
    metadata: MetadataMap,
    mailbox: Arc<Mailbox>,
    domain: Option<String>,
    buckets: HashMap<u64, Held>,
    /// The current report interval's start and its reports so far.
    window: (Instant, u64),
}

impl Reader {
    /// Reads reports until the proxy ends the stream, its response is dropped, or a
    /// bound ends it; then frees its shares.
    async fn run(
        mut self,
        mut reports: Streaming<RateLimitQuotaUsageReports>,
        mut gone: oneshot::Receiver<()>,
        _permit: OwnedSemaphorePermit,
    ) {
        let ended = loop {
            let report = tokio::select! {
                report = reports.message() => report,
                _ = &mut gone => break None,
            };
            match report {
                Ok(Some(report)) => {
                    let traced =
                        Request::from_parts(self.metadata.clone(), Default::default(), report);
                    if let Err(status) = self.traced(traced).await {
                        break Some(status);
                    }
                }
                Ok(None) => break None,
                // A message too large or not one: said to the proxy, if it still listens.
                Err(status) => break Some(status),
            }
        };
        let held = self
            .buckets
            .drain()
            .filter_map(|(n, b)| Some((b.limit?, n)));
        self.streams.quotas.leave(self.id, held);
        self.streams.open().remove(&self.id);
        self.mailbox.end(ended);
    }

    /// Takes one report as a span of the stream's trace.
    async fn traced(&mut self, report: Request<RateLimitQuotaUsageReports>) -> Result<(), Status> {
        telemetry::request(
            report,
            |_| {
                "envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"
                    .into()
            },
            |report| {
                let report = report.get_ref();
                vec![
                    KeyValue::new("rpc.system", "grpc"),
                    KeyValue::new("sluicegate.domain", telemetry::clipped(&report.domain)),
                    KeyValue::new(
                        "sluicegate.buckets",
                        report.bucket_quota_usages.len() as i64,
                    ),
                ]
            },
            |report| std::future::ready(self.take(report.into_inner())),
            |taken| match taken {
                Ok(()) => (Vec::new(), None),
                Err(status) => (
                    vec![KeyValue::new("rpc.grpc.status_code", status.code() as i64)],
                    Some(status.code().description().to_owned()),
                ),
            },
        )
        .await
    }

    /// Takes one report; an error ends the stream with it.
    fn take(&mut self, report: RateLimitQuotaUsageReports) -> Result<(), Status> {
        let now = Instant::now();
        self.count(now)?;
        let domain = match &self.domain {
            Some(domain) => domain.clone(),
            None if report.domain.is_empty() => {
                return Err(Status::invalid_argument(
                    "a quota stream's first report names its domain",
                ))
            }
            None => self.domain.insert(report.domain).clone(),
        };
        let numbered: Vec<(u64, _)> = report
            .bucket_quota_usages
            .into_iter()
            .map(|usage| (number(usage.bucket_id.as_ref()), usage))
            .collect();
        let new = numbered
            .iter()
            .filter(|(n, _)| !self.buckets.contains_key(n))
            .count();
        if self.buckets.len() + new > MAX_BUCKETS {
            return Err(Status::resource_exhausted(format!(
                "a quota stream holds at most {MAX_BUCKETS} buckets"
            )));
        }
        let served = self.streams.service.served();
        let rules = self.streams.service.envoy();
        let ttl = self.streams.quotas.ttl();
        let (mut usages, mut left) = (Vec::new(), Vec::new());
        for (number, usage) in numbered {
            let Some(id) = usage.bucket_id.filter(well_formed) else {
                continue;
            };
            let requests = usage
                .num_requests_allowed
                .saturating_add(usage.num_requests_denied);
            let held = match self.buckets.entry(number) {
                Entry::Occupied(held) if same(&held.get().id, &id) => held.into_mut(),
                Entry::Occupied(mut held) => {
                    left.extend(held.get_mut().limit.take().map(|l| (l, number)));
                    held.insert(Held::new(&id));
                    held.into_mut()
                }
                Entry::Vacant(vacant) => vacant.insert(Held::new(&id)),
            };
            // One copy of the entries per bucket held, shared with its subscription.
            let id = Arc::clone(&held.id);
            held.idle = if requests == 0 { held.idle + 1 } else { 0 };
            if held.idle >= ABANDON_AFTER {
                left.extend(held.limit.take().map(|l| (l, number)));
                self.buckets.remove(&number);
                self.mailbox.post(number, abandon(bucket_id(&id)));
                continue;
            }
            let pairs: Vec<(&str, &str)> = id.iter().map(|(k, v)| (&**k, &**v)).collect();
            let governed = govern(&served, &rules, &self.app, &domain, &pairs);
            let shared = match &governed {
                Ok(Governed::Shared { id: limit, .. }) => Some(limit.as_str()),
                _ => None,
            };
            if held.limit.as_deref() != shared {
                left.extend(held.limit.take().map(|l| (l, number)));
            }
            match governed {
                Ok(Governed::Unlimited) => {
                    self.mailbox
                        .post(number, assign(&id, blanket(BlanketRule::AllowAll), ttl));
                }
                Ok(Governed::Denied) => {
                    self.mailbox
                        .post(number, assign(&id, blanket(BlanketRule::DenyAll), ttl));
                }
                Ok(Governed::Shared {
                    id: limit,
                    name,
                    rate,
                }) => {
                    held.limit = Some(limit.clone());
                    usages.push(Usage {
                        bucket: number,
                        id,
                        limit,
                        name,
                        rate,
                        requests,
                    });
                }
                Err(_) => {}
            }
        }
        self.streams.quotas.leave(self.id, left);
        self.streams
            .quotas
            .report(self.id, &self.mailbox, now, usages);
        Ok(())
    }

    /// Counts a report against the stream's bound per report interval.
    fn count(&mut self, now: Instant) -> Result<(), Status> {
        let (start, reports) = &mut self.window;
        if now.duration_since(*start) >= self.streams.interval {
            *start = now;
            *reports = 0;
        }
        *reports += 1;
        if *reports > MAX_REPORTS {
            return Err(Status::resource_exhausted(format!(
                "a quota stream sends at most {MAX_REPORTS} reports per report interval"
            )));
        }
        Ok(())
    }
}

/// Whether `id` names a bucket: 1 to [`MAX_ENTRIES`] entries, none empty.
fn well_formed(id: &BucketId) -> bool {
    (1..=MAX_ENTRIES).contains(&id.bucket.len())
        && id
            .bucket
            .iter()
            .all(|(k, v)| !k.is_empty() && !v.is_empty())
}

/// Tells the proxy to forget `bucket`.
fn abandon(bucket: BucketId) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}

/// The stream's number for a bucket id (as Envoy numbers its buckets: a hash of the id,
/// whose entries are in name order); an id that differs under the same number replaces
/// the bucket held, so a collision costs a share, never another bucket's.
fn number(id: Option<&BucketId>) -> u64 {
    let mut hasher = DefaultHasher::new();
    if let Some(id) = id {
        id.bucket.hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// A report as Envoy's filter encodes it (`add_bucket_quota_usages`: a list), byte for
    /// byte: domain "d", one bucket {k: v}, 5 s elapsed, 7 allowed.
    #[test]
    fn a_report_decodes_as_envoy_writes_it() {
        let wire = [
            0x0a, 0x01, b'd', 0x12, 0x10, 0x0a, 0x08, 0x0a, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01,
            b'v', 0x12, 0x02, 0x08, 0x05, 0x18, 0x07,
        ];
        let report = RateLimitQuotaUsageReports::decode(&wire[..]).expect("Envoy's encoding");
        assert_eq!(report.domain, "d");
        let [usage] = &report.bucket_quota_usages[..] else {
            panic!("one usage: {report:?}");
        };
        let id = usage.bucket_id.as_ref().expect("a bucket id");
        assert_eq!(id.bucket.get("k").map(String::as_str), Some("v"));
        assert_eq!(usage.time_elapsed.map(|d| d.seconds), Some(5));
        assert_eq!(usage.num_requests_allowed, 7);
        assert_eq!(report.encode_to_vec(), wire);
    }
}
