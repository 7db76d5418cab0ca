//! Calls to Redis, coalesced: one sender at a time sends every call queued for Redis
//! as one batch (a policy's decisions, limitador's counters: each a [`Carrier`]). While it waits for one batch's replies, new requests queue up,
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

use futures_util::future::BoxFuture;
use sluicegate_core::{AnyAlgorithm, Decision, Request};
use sluicegate_redis::{ConnectedAsync, ReconnectingAsync, RedisLimiter};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// A policy's limiter in Redis, with the connection its own calls go through.
pub(crate) type ConnectedLimiter = ConnectedAsync<RedisLimiter<AnyAlgorithm>>;

/// The most decisions in one batch.
pub(crate) const MAX_PIPELINE: usize = 256;

/// What carries calls to Redis in batches: the calls queued for one carrier go
/// together, each still its own atomic call, answered in order.
pub(crate) trait Carrier: Send + Sync + 'static {
    /// A call, owned while it waits in the queue.
    type Call: Send + 'static;
    /// Its answer.
    type Answer: Send + 'static;

    /// Sends `calls` over `con` in one batch: an answer for each, in order.
    fn send<'a>(
        &'a self,
        con: &'a ReconnectingAsync,
        calls: Vec<Self::Call>,
    ) -> BoxFuture<'a, Vec<Self::Answer>>;
}

/// Why a call sent through the queue has no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error<E> {
    /// Redis failed or refused.
    #[error(transparent)]
    Redis(E),
    /// The runtime stopped before the call was sent.
    #[error("the Redis task stopped")]
    Stopped,
}

/// A call waiting to be sent.
struct Job<C: Carrier> {
    carrier: Arc<C>,
    call: C::Call,
    reply: oneshot::Sender<C::Answer>,
}

/// The queue of calls for Redis, of one kind of carrier.
#[derive(Debug)]
pub(crate) struct Coalescer<C: Carrier = ConnectedLimiter> {
    shared: Arc<Shared<C>>,
}

impl<C: Carrier> Clone for Coalescer<C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

#[derive(Debug)]
struct Shared<C: Carrier> {
    queue: Mutex<Queue<C>>,
    con: ReconnectingAsync,
    /// Where batches left by their sender go on.
    runtime: Handle,
    /// Shared by the queues of one backend.
    sent: Arc<Sent>,
}

#[derive(Debug)]
struct Queue<C: Carrier> {
    jobs: Vec<Job<C>>,
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

impl<C: Carrier> std::fmt::Debug for Job<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").finish_non_exhaustive()
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

impl<C: Carrier> Coalescer<C> {
    /// A queue sending over `con`, its spare batches on the current runtime.
    pub(crate) fn start(con: ReconnectingAsync) -> Self {
        Self::counted(con, Arc::default())
    }

    /// [`Coalescer::start`], counting what it sends in `sent`.
    fn counted(con: ReconnectingAsync, sent: Arc<Sent>) -> Self {
        let shared = Shared {
            queue: Mutex::new(Queue {
                jobs: Vec::new(),
                sending: false,
            }),
            con,
            runtime: Handle::current(),
            sent,
        };
        Self {
            shared: Arc::new(shared),
        }
    }

    /// A queue for another kind of carrier over the same connection, counted with this.
    pub(crate) fn sibling<D: Carrier>(&self) -> Coalescer<D> {
        Coalescer::counted(self.shared.con.clone(), Arc::clone(&self.shared.sent))
    }

    /// What was sent so far.
    pub(crate) fn sent(&self) -> &Sent {
        &self.shared.sent
    }

    /// Sends `call` on `carrier`, with the calls queued meanwhile.
    pub(crate) async fn send<T, E>(&self, carrier: &Arc<C>, call: C::Call) -> Result<T, Error<E>>
    where
        C: Carrier<Answer = Result<T, E>>,
        T: Send,
        E: Send,
    {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            carrier: Arc::clone(carrier),
            call,
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
        answer
            .await
            .map_err(|_| Error::Stopped)?
            .map_err(Error::Redis)
    }
}

impl Coalescer {
    /// Decides `cost` units of `key` on `limiter` in Redis, with the decisions queued
    /// meanwhile.
    pub(crate) async fn check(
        &self,
        limiter: &Arc<ConnectedLimiter>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error<sluicegate_redis::Error>> {
        self.send(limiter, (key.into(), cost)).await
    }
}

impl<C: Carrier> Shared<C> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<C>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends one batch of what is queued: up to [`MAX_PIPELINE`] calls, one batch per
    /// carrier in the order of their first request.
    async fn send_queued(&self) {
        let mut jobs: Vec<Job<C>> = {
            let mut queue = self.lock();
            let n = queue.jobs.len().min(MAX_PIPELINE);
            queue.jobs.drain(..n).collect()
        };
        while let Some(first) = jobs.first() {
            // The jobs of the first job's carrier, in order; the others wait their turn.
            let carrier = Arc::clone(&first.carrier);
            let (calls, replies): (Vec<_>, Vec<_>) = jobs
                .extract_if(.., |job| Arc::ptr_eq(&job.carrier, &carrier))
                .map(|job| (job.call, job.reply))
                .unzip();
            self.sent.pipelines.fetch_add(1, Ordering::Relaxed);
            self.sent
                .decisions
                .fetch_add(calls.len() as u64, Ordering::Relaxed);
            let answers = carrier.send(&self.con, calls).await;
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
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
async fn lead_once<C: Carrier>(shared: Arc<Shared<C>>) {
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

/// A policy's decisions: a key and a cost each.
impl Carrier for ConnectedLimiter {
    type Call = (Box<[u8]>, u64);
    type Answer = Result<Decision, sluicegate_redis::Error>;

    fn send<'a>(
        &'a self,
        con: &'a ReconnectingAsync,
        calls: Vec<Self::Call>,
    ) -> BoxFuture<'a, Vec<Self::Answer>> {
        Box::pin(async move {
            let requests: Vec<Request> = calls
                .iter()
                .map(|(key, cost)| Request::new(key).cost(*cost))
                .collect();
            self.host().check_batch_async(con, &requests).await
        })
    }
}
