/// The algorithms a policy can name: the one list of names that files, flags, JSON,
/// the Redis module and the scripts share.
///
/// [`name`](Self::name) is the canonical spelling (`token-bucket`).
/// [`from_name`](Self::from_name) and deserialization also accept the snake_case
/// spelling (`token_bucket`, the Redis module's and the scripts'), and `leaky-pacing`,
/// the name [`Pacing`](Self::Pacing) had in earlier policy files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
#[non_exhaustive]
pub enum Kind {
    /// [`FixedWindow`](crate::FixedWindow): `limit` per aligned `period`.
    #[cfg_attr(feature = "serde", serde(alias = "fixed_window"))]
    FixedWindow,
    /// [`SlidingLog`](crate::SlidingLog): `limit` in any `period`, exactly.
    #[cfg_attr(feature = "serde", serde(alias = "sliding_log"))]
    SlidingLog,
    /// [`SlidingCounter`](crate::SlidingCounter): `limit` per `period`, the two-window
    /// estimate.
    #[cfg_attr(feature = "serde", serde(alias = "sliding_counter"))]
    SlidingCounter,
    /// [`TokenBucket`](crate::TokenBucket): `capacity`, refilled `rate` per `period`.
    #[cfg_attr(feature = "serde", serde(alias = "token_bucket"))]
    TokenBucket,
    /// [`LeakyBucket`](crate::LeakyBucket) (the meter): `capacity`, leaking `rate` per
    /// `period`.
    #[cfg_attr(feature = "serde", serde(alias = "leaky_bucket"))]
    LeakyBucket,
    /// [`Pacing`](crate::Pacing) (the queue): `rate` per `period` exactly spaced,
    /// `capacity` waiting.
    #[cfg_attr(feature = "serde", serde(alias = "leaky-pacing"))]
    Pacing,
    /// Leases ([`Concurrency`](crate::Concurrency)): at most `limit` held at once, each
    /// for `lease`.
    Concurrency,
    /// Several limits (`limits`) on one key, admitted only if all admit.
    Composite,
    /// [`CalendarLimit`](crate::CalendarLimit): `limit` per calendar day, ISO week or
    /// month (`calendar`) in a time zone.
    #[cfg_attr(feature = "serde", serde(alias = "calendar_window"))]
    CalendarWindow,
}

impl Kind {
    /// Every kind, in the order help texts list them.
    pub const ALL: [Self; 9] = [
        Self::FixedWindow,
        Self::SlidingLog,
        Self::SlidingCounter,
        Self::TokenBucket,
        Self::LeakyBucket,
        Self::Pacing,
        Self::Concurrency,
        Self::Composite,
        Self::CalendarWindow,
    ];

    /// The canonical name, as files, flags and JSON write it: `token-bucket`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed-window",
            Self::SlidingLog => "sliding-log",
            Self::SlidingCounter => "sliding-counter",
            Self::TokenBucket => "token-bucket",
            Self::LeakyBucket => "leaky-bucket",
            Self::Pacing => "pacing",
            Self::Concurrency => "concurrency",
            Self::Composite => "composite",
            Self::CalendarWindow => "calendar-window",
        }
    }

    /// The kind `name` spells: the canonical name, its snake_case spelling
    /// (`token_bucket`) or the old `leaky-pacing`.
    pub fn from_name(name: &str) -> Option<Self> {
        if name == "leaky-pacing" {
            return Some(Self::Pacing);
        }
        Self::ALL.into_iter().find(|kind| {
            let canonical = kind.name().as_bytes();
            canonical.len() == name.len()
                && canonical
                    .iter()
                    .zip(name.as_bytes())
                    .all(|(&c, &n)| c == n || (c == b'-' && n == b'_'))
        })
    }

    /// The parameters each kind takes: windows a limit and a period, buckets a capacity,
    /// a rate and a period, leases a limit and a lease, a composite its limits, a
    /// calendar window a limit and a calendar (its time zone is optional: UTC).
    pub const fn fields(self) -> &'static [&'static str] {
        match self {
            Self::FixedWindow | Self::SlidingLog | Self::SlidingCounter => &["limit", "period"],
            Self::TokenBucket | Self::LeakyBucket | Self::Pacing => &["capacity", "rate", "period"],
            Self::Concurrency => &["limit", "lease"],
            Self::Composite => &["limits"],
            Self::CalendarWindow => &["limit", "calendar"],
        }
    }
}

impl core::fmt::Display for Kind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
