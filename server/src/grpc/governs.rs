//! Which limit governs a quota bucket: its entries in name order decided as a
//! descriptor's would be, in the stream's domain: on a rule of Envoy's YAML
//! (`--envoy-config`), else on the sluicegate policy its `policy` entry names, or the
//! domain's. The limit comes out in whole seconds, what Envoy reads of an assignment.

use sluicegate_core::{Kind, Ticks, SECOND};
use sluicegate_policy::Policy;

use super::rls::descriptor_key;
use super::wire::bounded;
use crate::service::auth::App;
use crate::service::{policy_for, Rules, Served};

/// A limit as a proxy enforces it: `units` per `period_s` whole seconds, at most `burst`
/// at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rate {
    pub(super) units: u64,
    pub(super) period_s: u64,
    pub(super) burst: u64,
}

/// What a bucket gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Governed {
    /// No limit governs it (or an `unlimited` rule, or a shadow policy): `ALLOW_ALL`.
    Unlimited,
    /// A limit of 0: `DENY_ALL`.
    Denied,
    /// A share of `rate`, split among every bucket governed by the limit `id`, of the
    /// policy or rule `name`.
    Shared {
        id: String,
        name: String,
        rate: Rate,
    },
}

/// Why a bucket gets no assignment (Envoy then applies its no-assignment behaviour).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Ungoverned {
    /// Not a policy this app may use.
    #[error("no such policy for this app")]
    NoPolicy,
    /// A policy that is not a rate (a lease).
    #[error("the policy is not a rate")]
    NotARate,
}

/// The governing limit of a bucket of `entries` (in name order) in `domain`, for `app`.
pub(super) fn govern(
    served: &Served,
    rules: &Rules,
    app: &App,
    domain: &str,
    entries: &[(&str, &str)],
) -> Result<Governed, Ungoverned> {
    if let Some(yaml) = rules.config.domain(domain) {
        if !yaml.admits_app(app.name()) {
            return Err(Ungoverned::NoPolicy);
        }
        let Some((rule, key)) = yaml.lookup(entries) else {
            return Ok(Governed::Unlimited);
        };
        if rule.shadow {
            return Ok(Governed::Unlimited);
        }
        return match (&rule.limit, rule.policy()) {
            (sluicegate_policy::envoy::Limit::Unlimited, _) => Ok(Governed::Unlimited),
            (_, None) => Ok(Governed::Denied),
            (_, Some(policy)) => shared(&policy, Source::Yaml, &rule.id, bounded(key)),
        };
    }
    let (named, key) = descriptor_key(entries.iter().copied());
    let name = named.unwrap_or(domain);
    let stored = policy_for(&served.snapshot, app, name).map_err(|_| Ungoverned::NoPolicy)?;
    if stored.policy.shadow {
        return Ok(Governed::Unlimited);
    }
    shared(&stored.policy, Source::Policy, name, bounded(key))
}

/// Where a limit is written: a policy and a rule of the same name are distinct limits.
#[derive(Debug, Clone, Copy)]
enum Source {
    Policy,
    Yaml,
}

/// `policy`'s limit, named `name` (a policy's name or a YAML rule's id), shared
/// among the buckets of `key`.
fn shared(
    policy: &Policy,
    source: Source,
    name: &str,
    key: String,
) -> Result<Governed, Ungoverned> {
    match rate(policy) {
        None => Err(Ungoverned::NotARate),
        Some(rate) if rate.units == 0 => Ok(Governed::Denied),
        Some(rate) => Ok(Governed::Shared {
            id: format!("{source:?}\0{name}\0{key}"),
            name: name.to_owned(),
            rate,
        }),
    }
}

/// The rate of `policy` in whole seconds, never above it: a period of whole seconds
/// rounded up; one under a second scaled to a second, its units rounded down. A
/// composite's is its member with the fewest units per second, burst the least.
fn rate(policy: &Policy) -> Option<Rate> {
    if let Some(members) = &policy.limits {
        let rates = members.iter().filter_map(rate);
        let strictest = rates.clone().min_by_key(|r| {
            // Units per second compared as fractions: a/p < b/q iff a·q < b·p.
            (u128::from(r.units) << 64) / u128::from(r.period_s.max(1))
        })?;
        let burst = rates.map(|r| r.burst).min().unwrap_or(0);
        return Some(Rate {
            burst: burst.min(strictest.burst),
            ..strictest
        });
    }
    let (units, burst) = match policy.algorithm {
        Kind::FixedWindow | Kind::SlidingLog | Kind::SlidingCounter | Kind::CalendarWindow => {
            let limit = policy.limit?;
            (limit, limit)
        }
        Kind::TokenBucket | Kind::LeakyBucket | Kind::Pacing => (policy.rate?, policy.capacity?),
        _ => return None,
    };
    Some(whole_seconds(units, policy.usual_period(), burst))
}

/// `units` per `period` ticks as units per whole seconds, never more than it.
fn whole_seconds(units: u64, period: Ticks, burst: u64) -> Rate {
    if period >= SECOND {
        return Rate {
            units,
            period_s: period.div_ceil(SECOND),
            burst,
        };
    }
    let per_second = u128::from(units) * u128::from(SECOND) / u128::from(period.max(1));
    Rate {
        units: u64::try_from(per_second).unwrap_or(u64::MAX),
        period_s: 1,
        burst,
    }
}

#[cfg(test)]
mod tests {
    use super::{rate, whole_seconds, Rate};
    use sluicegate_core::{Kind, MILLISECOND, SECOND};
    use sluicegate_policy::{Policy, PolicyDuration};

    #[test]
    fn a_composite_takes_its_strictest_member_and_a_lease_is_no_rate() {
        let window = |limit, seconds| {
            let period = Some(PolicyDuration(seconds * SECOND));
            Policy::from_flags(Kind::FixedWindow, Some(limit), None, None, period)
        };
        let mut both = Policy::from_flags(Kind::Composite, None, None, None, None);
        // 10 a second, and 300 a minute (5 a second): the minute's governs.
        both.limits = Some(vec![window(10, 1), window(300, 60)]);
        let strictest = Rate {
            units: 300,
            period_s: 60,
            burst: 10,
        };
        assert_eq!(rate(&both), Some(strictest));
        let lease = Policy::from_flags(Kind::Concurrency, Some(5), None, None, None);
        assert_eq!(rate(&lease), None);
    }

    #[test]
    fn periods_become_whole_seconds_never_a_faster_rate() {
        let rate = |units, period_s, burst| Rate {
            units,
            period_s,
            burst,
        };
        assert_eq!(whole_seconds(10, 60 * SECOND, 10), rate(10, 60, 10));
        assert_eq!(whole_seconds(10, 1500 * MILLISECOND, 10), rate(10, 2, 10));
        assert_eq!(whole_seconds(3, 100 * MILLISECOND, 3), rate(30, 1, 3));
        assert_eq!(whole_seconds(2, 300 * MILLISECOND, 2), rate(6, 1, 2));
    }
}
