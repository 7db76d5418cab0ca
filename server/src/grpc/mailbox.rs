//! A quota stream's outgoing actions: the newest per bucket, so that what waits for a
//! slow proxy is bounded by its buckets, sent together as one response.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tonic::Status;

use super::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use super::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;

/// What waits to be sent on one stream.
#[derive(Debug, Default)]
struct Letters {
    /// By the proxy's bucket number: a newer action replaces one not yet sent.
    actions: BTreeMap<u64, BucketAction>,
    /// The stream ends after the actions: with this status, or none for a clean end.
    end: Option<Option<Status>>,
    /// The end has been sent.
    ended: bool,
}

/// One stream's outgoing actions, written by the registry and the stream's reader,
/// read by its response.
#[derive(Debug, Default)]
pub(super) struct Mailbox {
    letters: Mutex<Letters>,
    posted: Notify,
}

impl Mailbox {
    fn letters(&self) -> MutexGuard<'_, Letters> {
        self.letters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `action` for the bucket numbered `bucket`.
    pub(super) fn post(&self, bucket: u64, action: BucketAction) {
        self.letters().actions.insert(bucket, action);
        self.posted.notify_one();
    }

    /// Ends the stream once what is queued is sent: with `status`, or cleanly.
    pub(super) fn end(&self, status: Option<Status>) {
        self.letters().end.get_or_insert(status);
        self.posted.notify_one();
    }

    /// The next response, or the stream's end; waits until there is one.
    pub(super) async fn next(&self) -> Option<Result<RateLimitQuotaResponse, Status>> {
        loop {
            let posted = self.posted.notified();
            {
                let mut letters = self.letters();
                if !letters.actions.is_empty() {
                    let actions = std::mem::take(&mut letters.actions);
                    return Some(Ok(RateLimitQuotaResponse {
                        bucket_action: actions.into_values().collect(),
                    }));
                }
                if letters.ended {
                    return None;
                }
                if let Some(end) = letters.end.take() {
                    letters.ended = true;
                    return end.map(Err);
                }
            }
            posted.await;
        }
    }
}
