//! Synthetic traffic: `steady:rate=R`, `poisson:rate=R,seed=S`, `burst:size=N,every=D`,
//! each optionally with `keys=K` (spread over K keys) and `cost=C`.

use sluicegate_core::{Ticks, SECOND};

use sluicegate_policy::parse_duration;

#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    /// As written, for messages.
    spec: String,
    shape: Shape,
    keys: u64,
    cost: u64,
}

impl std::fmt::Display for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.spec)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// `rate` requests per second, evenly spaced.
    Steady { rate: u64 },
    /// `rate` per second on average, exponential gaps from a seeded generator.
    Poisson { rate: u64, seed: u64 },
    /// `size` requests at once, every `every` ticks.
    Burst { size: u64, every: Ticks },
}

/// One offered request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub at: Ticks,
    /// The key's number: the key is `key-N`.
    pub index: u64,
    pub cost: u64,
}

impl Request {
    /// The key as the backend sees it.
    pub fn key(&self) -> String {
        format!("key-{}", self.index)
    }
}

impl std::str::FromStr for Traffic {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        let (kind, options) = spec.split_once(':').unwrap_or((spec, ""));
        let mut rate = None;
        let mut seed = 0;
        let mut size = None;
        let mut every = None;
        let mut keys = 1;
        let mut cost = 1;
        for option in options.split(',').filter(|o| !o.is_empty()) {
            let (name, value) = option
                .split_once('=')
                .ok_or_else(|| format!("bad traffic option {option:?}: use name=value"))?;
            let number = || {
                value
                    .parse::<u64>()
                    .map_err(|_| format!("bad number in {option:?}"))
            };
            match name {
                "rate" => rate = Some(number()?),
                "seed" => seed = number()?,
                "size" => size = Some(number()?),
                "every" => every = Some(parse_duration(value).map_err(|e| e.to_string())?.0),
                "keys" => keys = number()?,
                "cost" => cost = number()?,
                _ => return Err(format!("unknown traffic option {name:?}")),
            }
        }
        let positive = |v: Option<u64>, what: &str| match v {
            Some(v) if v > 0 => Ok(v),
            _ => Err(format!("{kind} traffic needs {what} > 0")),
        };
        let shape = match kind {
            "steady" => Shape::Steady {
                rate: positive(rate, "rate")?,
            },
            "poisson" => Shape::Poisson {
                rate: positive(rate, "rate")?,
                seed,
            },
            "burst" => Shape::Burst {
                size: positive(size, "size")?,
                every: positive(every, "every")?,
            },
            _ => {
                return Err(format!(
                    "unknown traffic {kind:?}: use steady, poisson or burst"
                ))
            }
        };
        if keys == 0 {
            return Err("keys must be at least 1".into());
        }
        Ok(Self {
            spec: spec.to_owned(),
            shape,
            keys,
            cost,
        })
    }
}

impl Traffic {
    /// The traffic node `index` of a fleet offers: the same shape, with a seed of its
    /// own for Poisson traffic, so nodes do not offer identical sequences.
    #[cfg(feature = "redis")]
    pub fn for_node(&self, index: u64) -> Self {
        let mut traffic = self.clone();
        if let Shape::Poisson { seed, .. } = &mut traffic.shape {
            *seed = seed.wrapping_add(index);
        }
        traffic
    }

    /// How many keys the traffic is spread over.
    pub const fn keys(&self) -> u64 {
        self.keys
    }

    /// How many requests `duration` offers (for Poisson traffic, on average), computed
    /// without generating them, so a run too large is refused before it starts.
    pub fn expected(&self, duration: Ticks) -> u128 {
        let duration = u128::from(duration);
        match self.shape {
            Shape::Steady { rate } => (duration * u128::from(rate)).div_ceil(u128::from(SECOND)),
            Shape::Poisson { rate, .. } => duration * u128::from(rate) / u128::from(SECOND),
            Shape::Burst { size, every } => duration.div_ceil(u128::from(every)) * u128::from(size),
        }
    }

    /// The requests offered in `[0, duration)`, in time order.
    pub fn requests(&self, duration: Ticks) -> impl Iterator<Item = Request> + '_ {
        let mut random = XorShift(match self.shape {
            Shape::Poisson { seed, .. } => seed ^ 0x9E37_79B9_7F4A_7C15,
            _ => 0x2545_F491_4F6C_DD1D,
        });
        let mut poisson_at = 0.0f64;
        (0u64..)
            .map(move |n| {
                let at = match self.shape {
                    // Exact: the n-th request at floor(n / rate) seconds.
                    Shape::Steady { rate } => {
                        u64::try_from(u128::from(n) * u128::from(SECOND) / u128::from(rate))
                            .unwrap_or(u64::MAX)
                    }
                    Shape::Burst { size, every } => (n / size).saturating_mul(every),
                    Shape::Poisson { rate, .. } => {
                        let at = poisson_at;
                        // Traffic generation only: no decision uses floating point.
                        #[allow(clippy::cast_precision_loss)]
                        let mean_gap = SECOND as f64 / rate as f64;
                        poisson_at += -random.unit().ln() * mean_gap;
                        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                        let at = at as u64;
                        at
                    }
                };
                let key = match self.shape {
                    Shape::Poisson { .. } => random.next() % self.keys,
                    _ => n % self.keys,
                };
                Request {
                    at,
                    index: key,
                    cost: self.cost,
                }
            })
            .take_while(move |r| r.at < duration)
    }
}

/// A small, seedable generator: the same seed gives the same traffic everywhere.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let unit = ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        unit
    }
}
