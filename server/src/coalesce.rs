//! Decisions in Redis, coalesced: one thread owns a connection and sends every decision
//! waiting in its queue as one pipeline. While it waits for one pipeline's replies, new
//! requests queue up, and the next pipeline carries them all; so under load one round
//! trip, one write and one read serve many decisions, and Redis reads them in one go.
//! Exact: each is still one atomic call, in the order the requests arrived, as if each
//! had been sent alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;
use tollgate_core::Decision;
use tollgate_redis::{Reconnecting, RedisLimiter};

use crate::decide::DecideError;
use crate::policy::Rule;

/// The most decisions in one pipeline.
pub const MAX_PIPELINE: usize = 256;

/// A decision waiting to be sent.
struct Job {
    limiter: Arc<RedisLimiter<Rule>>,
    key: Box<[u8]>,
    cost: u64,
    reply: oneshot::Sender<Result<Decision, DecideError>>,
}

/// The queue of decisions for Redis, and the thread sending them.
#[derive(Debug, Clone)]
pub struct Coalescer {
    jobs: mpsc::Sender<Job>,
    sent: Arc<Sent>,
}

/// What the thread sent: pipelines and the decisions in them (their ratio is the
/// coalescing achieved; `/metrics` shows both).
#[derive(Debug, Default)]
pub struct Sent {
    /// Pipelines sent.
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
    /// Starts the thread sending over `con`; it ends when the last clone is dropped.
    pub fn start(con: Reconnecting) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel();
        let sent = Arc::new(Sent::default());
        let counts = Arc::clone(&sent);
        std::thread::Builder::new()
            .name("tollgate-redis".into())
            .spawn(move || run(con, &queue, &counts))?;
        Ok(Self { jobs, sent })
    }

    /// What was sent so far.
    pub fn sent(&self) -> &Sent {
        &self.sent
    }

    /// Decides `cost` units of `key` on `limiter` in Redis, with the decisions queued
    /// meanwhile.
    pub async fn check(
        &self,
        limiter: &Arc<RedisLimiter<Rule>>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, DecideError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            limiter: Arc::clone(limiter),
            key: key.into(),
            cost,
            reply,
        };
        let stopped = || DecideError::Backend("the Redis thread stopped".into());
        self.jobs.send(job).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// Sends what is queued, one pipeline per limiter in the order of their first request,
/// until every sender is gone.
fn run(mut con: Reconnecting, queue: &mpsc::Receiver<Job>, sent: &Sent) {
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_PIPELINE {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        while !jobs.is_empty() {
            // The jobs of the first job's limiter, in order; the others wait their turn.
            let limiter = Arc::clone(&jobs[0].limiter);
            let (mine, others): (Vec<Job>, Vec<Job>) = jobs
                .into_iter()
                .partition(|job| Arc::ptr_eq(&job.limiter, &limiter));
            jobs = others;
            sent.pipelines.fetch_add(1, Ordering::Relaxed);
            sent.decisions
                .fetch_add(mine.len() as u64, Ordering::Relaxed);
            send(&mut con, &limiter, mine);
        }
    }
}

/// One pipeline of `jobs` on `limiter`, each answered with its own result.
fn send(con: &mut Reconnecting, limiter: &RedisLimiter<Rule>, jobs: Vec<Job>) {
    let requests: Vec<(&[u8], u64)> = jobs.iter().map(|j| (&j.key[..], j.cost)).collect();
    match limiter.check_batch(con, &requests) {
        Ok(results) => {
            for (job, result) in jobs.into_iter().zip(results) {
                let _ = job.reply.send(result.map_err(typed));
            }
        }
        Err(e) => {
            let e = typed(e);
            for job in jobs {
                let _ = job.reply.send(Err(e.clone()));
            }
        }
    }
}

/// A Redis error as the decision's error.
pub fn typed(e: tollgate_redis::Error) -> DecideError {
    if e.is_unavailable() {
        DecideError::Unavailable(e.to_string())
    } else {
        DecideError::Backend(e.to_string())
    }
}
