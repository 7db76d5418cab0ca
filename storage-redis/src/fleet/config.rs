//! How a fleet shares one limit: the mode and its settings.

use std::time::Duration;

use super::algorithm::FleetAlgorithm;
use crate::error::Error;

pub use sluicegate_core::FleetMode;

/// A fleet's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetConfig {
    /// The mode.
    pub mode: FleetMode,
    /// Prefetch: the most units one take asks for. Batch: decisions between settles.
    /// At least 1, at most the limit (a batch above it could never be granted whole, or
    /// would let one node's unsettled decisions exceed the limit by themselves).
    pub max_batch: u64,
    /// Prefetch: how long a node waits before asking again when the limit is drained.
    /// Batch: the longest time between settles. Split: the heartbeat period.
    /// `None`: 100 ms, 100 ms and 1 s.
    pub interval: Option<Duration>,
}

impl FleetConfig {
    /// `mode` with a `max_batch` of 100 and the mode's default interval.
    pub const fn new(mode: FleetMode) -> Self {
        Self {
            mode,
            max_batch: 100,
            interval: None,
        }
    }

    /// The interval in use: the configured one or the mode's default.
    pub fn interval(&self) -> Duration {
        self.interval.unwrap_or(match self.mode {
            FleetMode::Split => Duration::from_secs(1),
            _ => Duration::from_millis(100),
        })
    }

    /// Prefetch: a batch is the node's traffic over this long (two intervals), and a
    /// grant expires after it.
    pub fn horizon(&self) -> Duration {
        2 * self.interval()
    }

    /// Refuses settings that cannot work with `algorithm`, saying why.
    pub fn validate<A: FleetAlgorithm>(&self, algorithm: &A) -> Result<(), Error> {
        let limit = algorithm.limit();
        let bad = |setting, reason: String| Err(Error::FleetSetting { setting, reason });
        if self.max_batch == 0 {
            return bad("max_batch", "must be at least 1".into());
        }
        if self.max_batch > limit {
            return bad(
                "max_batch",
                format!("{} is above the limit of {limit}", self.max_batch),
            );
        }
        let interval = self.interval();
        if interval < Duration::from_millis(1) || interval > Duration::from_secs(3600) {
            return bad("interval", format!("{interval:?} is outside 1 ms..=1 h"));
        }
        Ok(())
    }
}
