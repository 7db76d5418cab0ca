//! How a fleet of hosts shares one limit through a store, by name: the Redis host runs
//! the modes, policy files and flags name them.

/// How a fleet of hosts shares one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum FleetMode {
    /// One call to the store per decision.
    Exact,
    /// Take batches of units, spend them locally; never over the limit.
    Prefetch,
    /// Decide locally, settle every `max_batch` decisions or every interval.
    Batch,
    /// Each host enforces `limit / live hosts`, counted by heartbeats.
    Split,
}

impl FleetMode {
    /// Every mode, in the order the measurements list them.
    pub const ALL: [Self; 4] = [Self::Exact, Self::Prefetch, Self::Batch, Self::Split];

    /// The mode's name in policy files and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Prefetch => "prefetch",
            Self::Batch => "batch",
            Self::Split => "split",
        }
    }

    /// The mode `name` names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.name() == name)
    }
}

impl core::fmt::Display for FleetMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::FleetMode;

    #[test]
    fn names_read_back() {
        for mode in FleetMode::ALL {
            assert_eq!(FleetMode::from_name(mode.name()), Some(mode));
        }
        assert_eq!(FleetMode::from_name("Exact"), None);
    }
}
