//! Readiness (`/readyz`): whether this server can decide now, its store and its decision
//! backend each answering within a bound. Its policies are loaded before it listens.

use std::time::{Duration, Instant};

use tokio::time::timeout;

use super::Service;

/// How long the store or the decision backend may take to answer a probe.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a probe's answer is reused: each probe reads the store, and probes come
/// from every load balancer and kubelet.
const PROBE_REUSE: Duration = Duration::from_millis(200);

/// The last probe: when, and what it found not ready.
pub(crate) type Probe = tokio::sync::Mutex<Option<(Instant, Vec<&'static str>)>>;

impl Service {
    /// What this server waits for before it can decide (`store`, `decisions`); empty
    /// when ready. One probe at a time, its answer reused for [`PROBE_REUSE`].
    pub(crate) async fn waiting_for(&self) -> Vec<&'static str> {
        let mut last = self.probe.lock().await;
        if let Some((at, waiting)) = &*last {
            if at.elapsed() < PROBE_REUSE {
                return waiting.clone();
            }
        }
        let (store, decisions) = tokio::join!(
            timeout(PROBE_TIMEOUT, self.store.counter()),
            timeout(PROBE_TIMEOUT, self.backend.ready()),
        );
        let answered = [
            (
                "store",
                "the store",
                store.map(|r| r.map(drop).map_err(|e| e.to_string())),
            ),
            (
                "decisions",
                "the decision backend",
                decisions.map(|r| r.map_err(|e| e.to_string())),
            ),
        ];
        let mut waiting = Vec::new();
        for (name, what, answer) in answered {
            match answer {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => tracing::warn!(error = %e, "not ready: {what}"),
                Err(_) => {
                    tracing::warn!("not ready: {what} did not answer within {PROBE_TIMEOUT:?}")
                }
            }
            waiting.push(name);
        }
        *last = Some((Instant::now(), waiting.clone()));
        waiting
    }
}
