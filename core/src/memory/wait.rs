//! The overload strategies shared by both limiters: wait in line, or degrade.

use std::time::Duration;

use crate::Decision;

pub(super) use crate::ticks;

/// How long an admitted reservation must wait; a denial as the error.
fn delay(decision: &Decision) -> Result<Duration, Decision> {
    if decision.allowed {
        Ok(Duration::from_micros(decision.delay))
    } else {
        Err(*decision)
    }
}

/// Sleeps the thread for an admitted reservation's delay.
pub(super) fn blocking(decision: Decision) -> Result<Decision, Decision> {
    std::thread::sleep(delay(&decision)?);
    Ok(decision)
}

/// Sleeps the task for an admitted reservation's delay.
#[cfg(feature = "tokio")]
pub(super) async fn sleep(decision: Decision) -> Result<Decision, Decision> {
    let wait = delay(&decision)?;
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
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
