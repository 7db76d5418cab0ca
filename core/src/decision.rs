use crate::Ticks;

/// The outcome of one request: whether it is admitted, and everything a caller needs
/// for `RateLimit-*` and `Retry-After` headers and for waiting.
///
/// Denial is a value, not an error.
///
/// With the `serde` feature this is the one wire shape of a decision, the serializer the
/// CLI, the service, the middleware and the wasm bindings all use:
/// `{"allowed":true,"limit":10,"remaining":9,"retry_after_us":0,"reset_after_us":100000,"delay_us":0}`.
/// Durations are whole microseconds ([`Ticks`]); `retry_after_us` is `0` when admitted
/// and `null` only when the cost can never fit.
#[must_use = "a decision says whether the request may proceed"]
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The most cost the limit admits at once from a fresh state.
    pub limit: u64,
    /// Whole units of cost still admissible right now, after this decision.
    pub remaining: u64,
    /// How long until this same request would be admitted if nothing else arrives:
    /// `Some(0)` when admitted, `None` when its cost can never fit.
    #[cfg_attr(feature = "serde", serde(rename = "retry_after_us"))]
    pub retry_after: Option<Ticks>,
    /// How long until the state is fresh again (and the key may be forgotten).
    #[cfg_attr(feature = "serde", serde(rename = "reset_after_us"))]
    pub reset_after: Ticks,
    /// How long an admitted caller must wait before acting: its slot in a pacing queue
    /// or a reservation. Zero for plain policing and for denials.
    #[cfg_attr(feature = "serde", serde(rename = "delay_us"))]
    pub delay: Ticks,
}

impl Decision {
    /// An admission; for hosts that decide elsewhere (a Lua script) and report here.
    pub const fn admit(limit: u64, remaining: u64, reset_after: Ticks, delay: Ticks) -> Self {
        Self {
            allowed: true,
            limit,
            remaining,
            retry_after: Some(0),
            reset_after,
            delay,
        }
    }

    /// A denial; for hosts that decide elsewhere (a Lua script) and report here.
    pub const fn deny(
        limit: u64,
        remaining: u64,
        retry_after: Option<Ticks>,
        reset_after: Ticks,
    ) -> Self {
        Self {
            allowed: false,
            limit,
            remaining,
            retry_after,
            reset_after,
            delay: 0,
        }
    }
}
