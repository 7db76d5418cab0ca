//! The overload strategies shared by both limiters: wait in line, or degrade.

use std::time::Duration;

use crate::{Decision, Ticks};

/// `duration` in ticks (microseconds), saturating.
pub(super) fn ticks(duration: Duration) -> Ticks {
    Ticks::try_from(duration.as_micros()).unwrap_or(Ticks::MAX)
}

/// Sleeps the thread for an admitted reservation's delay.
pub(super) fn blocking(decision: Decision) -> Result<Decision, Decision> {
    if !decision.allowed {
        return Err(decision);
    }
    if decision.delay > 0 {
        std::thread::sleep(Duration::from_micros(decision.delay));
    }
    Ok(decision)
}

/// Sleeps the task for an admitted reservation's delay.
#[cfg(feature = "tokio")]
pub(super) async fn sleep(decision: Decision) -> Result<Decision, Decision> {
    if !decision.allowed {
        return Err(decision);
    }
    if decision.delay > 0 {
        tokio::time::sleep(Duration::from_micros(decision.delay)).await;
    }
    Ok(decision)
}

pub(super) fn degrade<T>(
    decision: Decision,
    admitted: impl FnOnce() -> T,
    denied: impl FnOnce(Decision) -> T,
) -> T {
    if decision.allowed {
        admitted()
    } else {
        denied(decision)
    }
}
