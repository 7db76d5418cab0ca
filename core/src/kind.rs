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

    /// The snake_case spelling, as the Redis scripts and module write it:
    /// `token_bucket`.
    pub const fn script_name(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed_window",
            Self::SlidingLog => "sliding_log",
            Self::SlidingCounter => "sliding_counter",
            Self::TokenBucket => "token_bucket",
            Self::LeakyBucket => "leaky_bucket",
            Self::Pacing => "pacing",
            Self::Concurrency => "concurrency",
            Self::Composite => "composite",
            Self::CalendarWindow => "calendar_window",
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
    pub const fn fields(self) -> &'static [Field] {
        match self {
            Self::FixedWindow | Self::SlidingLog | Self::SlidingCounter => {
                &[Field::Limit, Field::Period]
            }
            Self::TokenBucket | Self::LeakyBucket | Self::Pacing => {
                &[Field::Capacity, Field::Rate, Field::Period]
            }
            Self::Concurrency => &[Field::Limit, Field::Lease],
            Self::Composite => &[Field::Limits],
            Self::CalendarWindow => &[Field::Limit, Field::Calendar],
        }
    }

    /// Whether it limits a rate in periods of one fixed length: windows, buckets and
    /// pacing; not leases, composites, nor calendar windows, whose periods are the
    /// calendar's.
    pub const fn is_periodic(self) -> bool {
        matches!(
            self,
            Self::FixedWindow
                | Self::SlidingLog
                | Self::SlidingCounter
                | Self::TokenBucket
                | Self::LeakyBucket
                | Self::Pacing
        )
    }

    /// Whether it books a slot ahead ([`Reserve`](crate::Reserve) beyond `now`):
    /// buckets and pacing; a composite when each of its members does.
    pub const fn can_reserve(self) -> bool {
        matches!(
            self,
            Self::TokenBucket | Self::LeakyBucket | Self::Pacing | Self::Composite
        )
    }

    /// Whether a reported cost ([`Report`](crate::Report)) charges it: windows, buckets
    /// and calendar windows; a composite when each of its members does. Not pacing
    /// (its units are slots in time) nor leases.
    pub const fn takes_reports(self) -> bool {
        let stock = self.is_periodic() && !matches!(self, Self::Pacing);
        stock || matches!(self, Self::CalendarWindow | Self::Composite)
    }

    /// Whether it takes an `overdraft` of its own: the kinds that take reports, but not
    /// a composite, whose members each take theirs.
    pub const fn takes_overdraft(self) -> bool {
        self.takes_reports() && !matches!(self, Self::Composite)
    }
}

/// A parameter a [`Kind`] takes ([`Kind::fields`]), named as files, flags and JSON name
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// Windows: units per period. Leases: how many are held at once.
    Limit,
    /// Buckets: the most units held.
    Capacity,
    /// Buckets: units refilled or leaked per period.
    Rate,
    /// Windows and buckets: the period.
    Period,
    /// Leases: how long one is held.
    Lease,
    /// Composites: the member limits.
    Limits,
    /// Calendar windows: a day, an ISO week or a month.
    Calendar,
}

impl Field {
    /// The name files and JSON write: `limit`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Limit => "limit",
            Self::Capacity => "capacity",
            Self::Rate => "rate",
            Self::Period => "period",
            Self::Lease => "lease",
            Self::Limits => "limits",
            Self::Calendar => "calendar",
        }
    }
}

/// A field is its name, so lists of fields compare with lists of names.
impl PartialEq<&str> for Field {
    fn eq(&self, name: &&str) -> bool {
        self.name() == *name
    }
}

impl core::fmt::Display for Field {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl core::fmt::Display for Kind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
