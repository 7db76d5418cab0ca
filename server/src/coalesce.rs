//! Decisions in Redis, coalesced: one task on the server's runtime owns the decisions
//! queued for Redis and sends every one waiting as one batch. While it waits for one
//! batch's replies, new requests queue up, and the next batch carries them all; so under
//! load one round trip serves many decisions, and Redis reads them in one go. Exact: each
//! is still one atomic call, in the order the requests arrived, as if each had been sent
//! alone.
//!
//! The task runs on the runtime's workers, with the asynchronous connection: a request's
//! task and the sending task wake each other within the runtime (a worker busy with
//! other requests picks the woken task up; no thread outside it to wake).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluicegate_core::{AnyAlgorithm, Decision, Request};
use sluicegate_redis::{ReconnectingAsync, RedisLimiter};
use tokio::sync::{mpsc, oneshot};

/// The most decisions in one batch.
pub const MAX_PIPELINE: usize = 256;

/// Why a decision sent through the queue has no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Redis failed or refused.
    #[error(transparent)]
    Redis(#[from] sluicegate_redis::Error),
    /// The sending task is gone.
    #[error("the Redis task stopped")]
    Stopped,
}

/// A decision waiting to be sent.
struct Job {
    limiter: Arc<RedisLimiter<AnyAlgorithm>>,
    key: Box<[u8]>,
    cost: u64,
    reply: oneshot::Sender<Result<Decision, sluicegate_redis::Error>>,
}

/// The queue of decisions for Redis, and the task sending them.
#[derive(Debug, Clone)]
pub struct Coalescer {
    jobs: mpsc::UnboundedSender<Job>,
    sent: Arc<Sent>,
}

/// What the task sent: batches and the decisions in them (their ratio is the
/// coalescing achieved; `/metrics` shows both).
#[derive(Debug, Default)]
pub struct Sent {
    /// Batches sent.
    pub pipelines: AtomicU64,
    /// Decisions sent in them.
    pub decisions: AtomicU64,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("cost", &self.cost).finish()
    }
}

impl Coalescer {
    /// Starts the task sending over `con` on the current runtime; it ends when the last
    /// clone is dropped.
    pub fn start(con: ReconnectingAsync) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        let sent = Arc::new(Sent::default());
        tokio::spawn(run(con, queue, Arc::clone(&sent)));
        Self { jobs, sent }
    }

    /// What was sent so far.
    pub fn sent(&self) -> &Sent {
        &self.sent
    }

    /// Decides `cost` units of `key` on `limiter` in Redis, with the decisions queued
    /// meanwhile.
    pub async fn check(
        &self,
        limiter: &Arc<RedisLimiter<AnyAlgorithm>>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            limiter: Arc::clone(limiter),
            key: key.into(),
            cost,
            reply,
        };
        self.jobs.send(job).map_err(|_| Error::Stopped)?;
        Ok(answer.await.map_err(|_| Error::Stopped)??)
    }
}

/// Sends what is queued, one batch per limiter in the order of their first request,
/// until every sender is gone.
async fn run(con: ReconnectingAsync, mut queue: mpsc::UnboundedReceiver<Job>, sent: Arc<Sent>) {
    let mut jobs = Vec::with_capacity(MAX_PIPELINE);
    while queue.recv_many(&mut jobs, MAX_PIPELINE).await > 0 {
        while let Some(first) = jobs.first() {
            // The jobs of the first job's limiter, in order; the others wait their turn.
            let limiter = Arc::clone(&first.limiter);
            let mine: Vec<Job> = jobs
                .extract_if(.., |job| Arc::ptr_eq(&job.limiter, &limiter))
                .collect();
            sent.pipelines.fetch_add(1, Ordering::Relaxed);
            sent.decisions
                .fetch_add(mine.len() as u64, Ordering::Relaxed);
            send(&con, &limiter, mine).await;
        }
    }
}

/// One batch of `jobs` on `limiter`, each answered with its own result.
async fn send(con: &ReconnectingAsync, limiter: &RedisLimiter<AnyAlgorithm>, jobs: Vec<Job>) {
    let requests: Vec<Request> = jobs
        .iter()
        .map(|j| Request::new(&j.key).cost(j.cost))
        .collect();
    let results = limiter.check_batch_async(con, &requests).await;
    for (job, result) in jobs.into_iter().zip(results) {
        let _ = job.reply.send(result);
    }
}
