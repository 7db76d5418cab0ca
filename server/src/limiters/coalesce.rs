//! Decisions in Redis, coalesced: one sender at a time sends every decision queued for
//! Redis as one batch. While it waits for one batch's replies, new requests queue up,
//! and the next batch carries them all; so under load one round trip serves many
//! decisions, and Redis reads them in one go. Exact: each is still one atomic call, in
//! the order the requests arrived, as if each had been sent alone.
//!
//! The queue is a vector under a lock. A request finding no batch in flight sends on its
//! own task (no hand-off to another task and back when the queue is idle); the batches
//! queued meanwhile go on a task spawned for them, which sends until the queue is empty.
//! A request dropped while it sends (its client gone) leaves its batch to a spawned task,
//! so the others in it still get their answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use sluicegate_core::{AnyAlgorithm, Decision, Request};
use sluicegate_redis::{ConnectedAsync, ReconnectingAsync, RedisLimiter};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// A policy's limiter in Redis, with the connection its own calls go through.
pub(crate) type ConnectedLimiter = ConnectedAsync<RedisLimiter<AnyAlgorithm>>;

/// The most decisions in one batch.
pub(crate) const MAX_PIPELINE: usize = 256;

/// Why a decision sent through the queue has no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// Redis failed or refused.
    #[error(transparent)]
    Redis(#[from] sluicegate_redis::Error),
    /// The runtime stopped before the decision was sent.
    #[error("the Redis task stopped")]
    Stopped,
}

/// A decision waiting to be sent.
struct Job {
    limiter: Arc<ConnectedLimiter>,
    key: Box<[u8]>,
    cost: u64,
    reply: oneshot::Sender<Result<Decision, sluicegate_redis::Error>>,
}

/// The queue of decisions for Redis.
#[derive(Debug, Clone)]
pub(crate) struct Coalescer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    con: ReconnectingAsync,
    /// Where batches left by their sender go on.
    runtime: Handle,
    sent: Sent,
}

#[derive(Debug, Default)]
struct Queue {
    jobs: Vec<Job>,
    /// A sender is at work: it takes what is queued when its batch is answered.
    sending: bool,
}

/// What the task sent: batches and the decisions in them (their ratio is the
/// coalescing achieved; `/metrics` shows both).
#[derive(Debug, Default)]
pub(crate) struct Sent {
    /// Batches sent.
    pub(crate) pipelines: AtomicU64,
    /// Decisions sent in them.
    pub(crate) decisions: AtomicU64,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("cost", &self.cost).finish()
    }
}

impl Sent {
    /// Its counters in Prometheus' text format.
    pub(crate) fn render(&self) -> String {
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        format!(
            "# HELP sluicegate_redis_pipelines_total Pipelines of decisions sent to Redis.\n# TYPE sluicegate_redis_pipelines_total counter\nsluicegate_redis_pipelines_total {}\n# HELP sluicegate_redis_decisions_total Decisions sent to Redis (in the pipelines).\n# TYPE sluicegate_redis_decisions_total counter\nsluicegate_redis_decisions_total {}\n",
            load(&self.pipelines),
            load(&self.decisions)
        )
    }
}

impl Coalescer {
    /// A queue sending over `con`, its spare batches on the current runtime.
    pub(crate) fn start(con: ReconnectingAsync) -> Self {
        let shared = Shared {
            queue: Mutex::default(),
            con,
            runtime: Handle::current(),
            sent: Sent::default(),
        };
        Self {
            shared: Arc::new(shared),
        }
    }

    /// What was sent so far.
    pub(crate) fn sent(&self) -> &Sent {
        &self.shared.sent
    }

    /// Decides `cost` units of `key` on `limiter` in Redis, with the decisions queued
    /// meanwhile.
    pub(crate) async fn check(
        &self,
        limiter: &Arc<ConnectedLimiter>,
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
        let lead = {
            let mut queue = self.shared.lock();
            queue.jobs.push(job);
            !std::mem::replace(&mut queue.sending, true)
        };
        if lead {
            let runtime = self.shared.runtime.clone();
            Leading(Some(Box::pin(lead_once(Arc::clone(&self.shared)))), runtime).await;
        }
        Ok(answer.await.map_err(|_| Error::Stopped)??)
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends one batch of what is queued: up to [`MAX_PIPELINE`] decisions, one call
    /// per limiter in the order of their first request.
    async fn send_queued(&self) {
        let mut jobs: Vec<Job> = {
            let mut queue = self.lock();
            let n = queue.jobs.len().min(MAX_PIPELINE);
            queue.jobs.drain(..n).collect()
        };
        while let Some(first) = jobs.first() {
            // The jobs of the first job's limiter, in order; the others wait their turn.
            let limiter = Arc::clone(&first.limiter);
            let mine: Vec<Job> = jobs
                .extract_if(.., |job| Arc::ptr_eq(&job.limiter, &limiter))
                .collect();
            self.sent.pipelines.fetch_add(1, Ordering::Relaxed);
            self.sent
                .decisions
                .fetch_add(mine.len() as u64, Ordering::Relaxed);
            send(&self.con, &limiter, mine).await;
        }
    }

    /// Whether the queue is empty; if so the next request sends.
    fn done(&self) -> bool {
        let mut queue = self.lock();
        queue.sending = !queue.jobs.is_empty();
        !queue.sending
    }
}

/// The batch holding the caller's request, sent on its task; what queued meanwhile
/// goes on a task of its own, so that the caller answers after one round trip.
async fn lead_once(shared: Arc<Shared>) {
    shared.send_queued().await;
    if !shared.done() {
        let runtime = shared.runtime.clone();
        runtime.spawn(async move {
            loop {
                shared.send_queued().await;
                if shared.done() {
                    break;
                }
            }
        });
    }
}

type Sending = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A sender on a request's task; dropped before it is done, it finishes on a task of
/// its own.
struct Leading(Option<Sending>, Handle);

impl Future for Leading {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(sending) = self.0.as_mut() else {
            return Poll::Ready(());
        };
        let done = sending.as_mut().poll(cx);
        if done.is_ready() {
            self.0 = None;
        }
        done
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        if let Some(sending) = self.0.take() {
            // Through the handle: dropped outside the runtime too, it does not panic (and
            // on a runtime shut down, the batch's requests end `Stopped`).
            drop(self.1.spawn(sending));
        }
    }
}

/// One batch of `jobs` on `limiter`, each answered with its own result.
async fn send(con: &ReconnectingAsync, limiter: &ConnectedLimiter, jobs: Vec<Job>) {
    let requests: Vec<Request> = jobs
        .iter()
        .map(|j| Request::new(&j.key).cost(j.cost))
        .collect();
    let results = limiter.host().check_batch_async(con, &requests).await;
    for (job, result) in jobs.into_iter().zip(results) {
        let _ = job.reply.send(result);
    }
}
