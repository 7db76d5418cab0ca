//! What the HTTP and gRPC phases share: how hard and how long they send, and what they
//! measured.

use std::time::{Duration, Instant};

/// How a phase sends: `workers` senders (a connection each over HTTP/1.1, a request in
/// flight each over gRPC), for `duration` or until `requests` are answered, back to back
/// (closed loop) or together at `rate` a second (open loop, the same offered load to
/// every server).
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub workers: usize,
    pub duration: Duration,
    pub requests: Option<u64>,
    pub rate: Option<f64>,
}

impl Load {
    /// Worker `w`'s end: a time, and a count (its share of `requests`, or unbounded).
    pub fn bounds(&self, start: Instant, w: usize) -> (Instant, u64) {
        let workers = self.workers as u64;
        match self.requests {
            // A fixed number of requests has no time limit (but an hour).
            Some(total) => (
                start + Duration::from_secs(3600),
                total / workers + u64::from((w as u64) < total % workers),
            ),
            None => (start + self.duration, u64::MAX),
        }
    }

    /// Worker `w`'s schedule: its sends at `rate / workers` a second, the workers'
    /// sends interleaved, or none (back to back). The options refuse a rate whose step
    /// is not a time up to an hour.
    pub fn pace(&self, start: Instant, w: usize) -> Pace {
        Pace(self.rate.map(|rate| {
            let step = Duration::from_secs_f64(self.workers as f64 / rate);
            (start + Duration::from_secs_f64(w as f64 / rate), step)
        }))
    }
}

/// A worker's schedule: the next send's time and the step to the one after.
pub struct Pace(Option<(Instant, Duration)>);

impl Pace {
    /// Waits for the next send's time and returns what its latency counts from: the time
    /// it was due (so a late answer delays the next ones' counts too, not hiding them),
    /// or now when sending back to back.
    pub async fn next(&mut self) -> Instant {
        match &mut self.0 {
            Some((due, step)) => {
                let at = *due;
                *due += *step;
                tokio::time::sleep_until(at.into()).await;
                at
            }
            None => Instant::now(),
        }
    }
}

/// A worker's way of asking: HTTP/1.1 on one connection, or gRPC calls.
pub trait Sender {
    /// Waits until a request may be sent; an error ends the worker.
    async fn ready(&mut self) -> Result<(), String>;
    /// Sends the request of turn `n` and waits for its whole answer.
    async fn send(&mut self, n: u64) -> Result<(), String>;
}

/// Worker `w`'s turns through `sender` as `load` says: its latencies (µs) and errors.
/// Each worker walks the keys from its own place.
pub async fn turns(mut sender: impl Sender, load: Load, start: Instant, w: usize) -> Outcome {
    let mut outcome = Outcome::default();
    let (until, count) = load.bounds(start, w);
    let mut pace = load.pace(start, w);
    let mut n = w as u64 * 1_000_003;
    let mut sent = 0;
    while sent < count && Instant::now() < until {
        sent += 1;
        n = n.wrapping_add(7919);
        if let Err(why) = sender.ready().await {
            outcome.fail(why);
            break;
        }
        let due = pace.next().await;
        match sender.send(n).await {
            Ok(()) => outcome.answered(due),
            Err(why) => outcome.fail(why),
        }
    }
    outcome
}

/// What one phase measured.
pub struct Phase {
    pub requests: usize,
    pub errors: usize,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    /// Sorted latencies in microseconds.
    pub latencies: Vec<u32>,
}

impl Phase {
    /// The workers' outcomes gathered, timed from `start`.
    pub async fn gather(start: Instant, tasks: Vec<tokio::task::JoinHandle<Outcome>>) -> Self {
        let mut all = Outcome::default();
        for task in tasks {
            match task.await {
                Ok(outcome) => {
                    all.latencies.extend(outcome.latencies);
                    all.errors += outcome.errors;
                    if let Some(why) = outcome.first_error {
                        all.first_error.get_or_insert(why);
                    }
                }
                Err(e) => all.fail(e.to_string()),
            }
        }
        let elapsed = start.elapsed();
        all.latencies.sort_unstable();
        Self {
            requests: all.latencies.len(),
            errors: all.errors,
            first_error: all.first_error,
            elapsed,
            latencies: all.latencies,
        }
    }

    /// Answered requests per second of the phase.
    pub fn per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency (µs) below which `per_mille` thousandths of the answers came.
    pub fn percentile(&self, per_mille: usize) -> u32 {
        let i =
            (self.latencies.len() * per_mille / 1000).min(self.latencies.len().saturating_sub(1));
        self.latencies.get(i).copied().unwrap_or(0)
    }
}

/// What a worker saw: latencies (µs) of the answered requests, the failures and the
/// first one's reason.
#[derive(Default)]
pub struct Outcome {
    pub latencies: Vec<u32>,
    pub errors: usize,
    pub first_error: Option<String>,
}

impl Outcome {
    /// A failed request: counted, its reason kept if it is the first.
    pub fn fail(&mut self, why: String) {
        self.errors += 1;
        self.first_error.get_or_insert(why);
    }

    /// An answered request, timed from `start`.
    pub fn answered(&mut self, start: Instant) {
        self.latencies
            .push(u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX));
    }
}
