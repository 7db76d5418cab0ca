//! What a policy builds: the core's one dynamic algorithm, or a lease model.

use std::sync::Arc;

use sluicegate_core::calendar::{Calendar, CalendarZone, ZonedCalendar};
use sluicegate_core::lease::Concurrency;
use sluicegate_core::limits::MAX_PERIOD;
use sluicegate_core::{AnyAlgorithm, Ban, Field, Kind, ParamError, Params, Ticks};

use crate::model::{BanSpec, Policy};
use crate::problem::{list, param_problem, Problem, Style};
use crate::selector::Selector;

/// What a policy builds: a rate limit, or leases.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Built {
    /// A rate limit: one algorithm, a composite of several, either one in a ban.
    Rule(AnyAlgorithm),
    /// Not a rate limit: leases, each held for `ttl` ticks.
    Leases {
        /// How many at once.
        model: Concurrency,
        /// How long each lasts.
        ttl: Ticks,
        /// Whether they go in the order asked.
        fair: bool,
    },
}

/// Composite members at most: each is one more key (on Redis) and one more decision.
pub const MAX_MEMBERS: usize = 16;

impl Policy {
    /// The algorithm this policy builds, or every missing parameter at once, or the
    /// parameter out of its range in the units it was written in.
    pub fn build(&self, style: Style) -> Result<Built, Problem> {
        self.build_selected(style).map(|(built, _)| built)
    }

    /// As [`build`](Self::build), with the policy's `when` and `key` compiled (`None`
    /// if it has neither).
    pub fn build_selected(&self, style: Style) -> Result<(Built, Option<Selector>), Problem> {
        self.check_fields(style)?;
        let selector = self.selector(style)?;
        self.build_checked(style).map(|built| (built, selector))
    }

    /// What a policy whose fields were checked builds.
    fn build_checked(&self, style: Style) -> Result<Built, Problem> {
        if self.algorithm == Kind::Concurrency {
            let ttl = self.lease.map_or(0, |d| d.0);
            return Concurrency::new(self.limit.unwrap_or(0))
                .map_err(|e| match e {
                    // The core calls it `max`; the policy calls it `limit`.
                    ParamError::OutOfRange {
                        value, min, max, ..
                    } => ParamError::OutOfRange {
                        name: "limit",
                        value,
                        min,
                        max,
                    },
                    e => e,
                })
                .and_then(|model| {
                    check_lease(ttl)?;
                    check_max_lease(ttl, self.max_lease())?;
                    Ok(Built::Leases {
                        model,
                        ttl,
                        fair: self.fair,
                    })
                })
                .map_err(|e| param_problem(&e, style));
        }
        let mut params = self.params();
        if let Some(members) = &self.limits {
            if members.is_empty() || members.len() > MAX_MEMBERS {
                return Err(Problem {
                    field: Some("limits".into()),
                    message: format!(
                        "{} must list 1 to {MAX_MEMBERS} limits, got {}",
                        style.name("limits"),
                        members.len()
                    ),
                });
            }
            let rates = members
                .iter()
                .enumerate()
                .map(|(i, member)| member.member_rate(style, i))
                .collect::<Result<Vec<_>, _>>()?;
            params = params.members(rates);
        }
        let rule = self.rate(params, style)?;
        Ok(Built::Rule(match self.ban {
            Some(ban) => ban_of(rule, ban, style)?,
            None => rule,
        }))
    }

    /// The parameters this algorithm takes, and those it does not.
    fn check_fields(&self, style: Style) -> Result<(), Problem> {
        let kind = self.algorithm.name();
        let wanted = self.algorithm.fields();
        let given = [
            ("limit", self.limit.is_some()),
            ("capacity", self.capacity.is_some()),
            ("rate", self.rate.is_some()),
            ("period", self.period.is_some()),
            ("lease", self.lease.is_some()),
            ("limits", self.limits.is_some()),
            ("calendar", self.calendar.is_some()),
        ];
        let names = |pick: &dyn Fn(&str, bool) -> bool| -> Vec<String> {
            given
                .iter()
                .filter(|&&(name, present)| pick(name, present))
                .map(|(name, _)| style.name(name))
                .collect()
        };
        let wants = |name: &str| wanted.iter().any(|field| field.name() == name);
        let missing = names(&|name, present| !present && wants(name));
        let extra = names(&|name, present| present && !wants(name));
        let takes: Vec<String> = wanted
            .iter()
            .map(|field| style.name(field.name()))
            .collect();
        let mut problems = Vec::new();
        if !missing.is_empty() {
            problems.push(format!("{kind} needs {}", list(&missing)));
        }
        if !extra.is_empty() {
            problems.push(format!(
                "{kind} takes {}, not {}",
                list(&takes),
                list(&extra)
            ));
        }
        // Leases take no ban nor key-table choice; only leases take a longest lease or a
        // queue, only
        // calendar windows a time zone, and only algorithms that take reports an
        // overdraft (a composite's members each take their own).
        let leases = self.algorithm == Kind::Concurrency;
        let reports = self.algorithm.takes_overdraft();
        let mut refused = Vec::new();
        for (field, present) in [
            ("ban", leases && self.ban.is_some()),
            ("on_full", leases && self.on_full.is_some()),
            ("shadow", leases && self.shadow),
            ("when", leases && self.when.is_some()),
            ("key", leases && self.key.is_some()),
            ("max_lease", !leases && self.max_lease.is_some()),
            ("fair", !leases && self.fair),
            (
                "time-zone",
                self.algorithm != Kind::CalendarWindow && self.time_zone.is_some(),
            ),
            ("overdraft", !reports && self.overdraft.is_some()),
        ] {
            if present {
                problems.push(format!("{kind} takes no {}", style.name(field)));
                refused.push(field);
            }
        }
        if self.ban.is_some() && reports && self.overdraft.is_some() {
            problems.push(format!(
                "a limit in a {} takes no {} (a ban takes no reports)",
                style.name("ban"),
                style.name("overdraft")
            ));
            refused.push("overdraft");
        }
        if problems.is_empty() {
            return Ok(());
        }
        // One field at fault is named; several are in the sentence.
        let field = match (missing.as_slice(), extra.as_slice(), refused.as_slice()) {
            ([_], [], []) => wanted
                .iter()
                .find(|field| missing.contains(&style.name(field.name())))
                .map(|field| field.name().to_owned()),
            ([], [], [field]) => Some((*field).to_owned()),
            _ => None,
        };
        Err(Problem {
            field,
            message: problems.join("; "),
        })
    }

    /// A composite's member: an algorithm and its parameters, nothing else.
    fn member_rate(&self, style: Style, i: usize) -> Result<AnyAlgorithm, Problem> {
        let at = format!("limits[{i}]");
        let plain = self.ban.is_none()
            && self.on_full.is_none()
            && self.apps.is_empty()
            && self.description.is_empty()
            && self.owner.is_empty()
            && !self.shadow
            && self.when.is_none()
            && self.key.is_none();
        if !plain || matches!(self.algorithm, Kind::Composite | Kind::Concurrency) {
            return Err(Problem::whole(format!(
                "each of {} is one rate algorithm and its parameters (no composite, concurrency, ban, on_full, shadow, when, key, apps, description or owner)",
                style.name("limits")
            ))
            .within(&at, style));
        }
        self.check_fields(style)
            .and_then(|()| self.rate(self.params(), style))
            .map_err(|p| p.within(&at, style))
    }

    /// The numbers and the calendar this policy gives, as the core's one constructor
    /// takes them (its fields were checked: only those its kind takes are set).
    fn params(&self) -> Params {
        Params::new()
            .limit(self.limit.unwrap_or(0))
            .capacity(self.capacity.unwrap_or(0))
            .rate(self.rate.unwrap_or(0))
            .period(self.period.map_or(0, |p| p.0))
            .overdraft(self.overdraft.unwrap_or(0))
    }

    /// The rate algorithm of a policy whose fields were checked, from `params` (with a
    /// composite's members built).
    fn rate(&self, mut params: Params, style: Style) -> Result<AnyAlgorithm, Problem> {
        if self.algorithm.fields().contains(&Field::Calendar) {
            params = params.calendar(Arc::new(self.calendar(style)?));
        }
        AnyAlgorithm::new(self.algorithm, params).map_err(|e| param_problem(&e, style))
    }
}

impl Policy {
    /// A calendar window's `calendar` in its `time-zone` (UTC unless given).
    fn calendar(&self, style: Style) -> Result<ZonedCalendar, Problem> {
        let name = self.calendar.as_deref().unwrap_or_default();
        let calendar = Calendar::from_name(name).ok_or_else(|| Problem {
            field: Some("calendar".into()),
            message: format!(
                "{} is day, week or month, not {name:?}",
                style.name("calendar")
            ),
        })?;
        let zone = self
            .time_zone
            .as_deref()
            .map_or(Ok(CalendarZone::UTC), CalendarZone::named);
        zone.and_then(|zone| ZonedCalendar::new(calendar, zone))
            .map_err(|e| Problem {
                field: Some("time-zone".into()),
                message: format!("{}: {e}", style.name("time-zone")),
            })
    }
}

fn ban_of(inner: AnyAlgorithm, ban: BanSpec, style: Style) -> Result<AnyAlgorithm, Problem> {
    Ban::new(inner, ban.threshold, ban.window.0, ban.duration.0)
        .map(|ban| AnyAlgorithm::Ban(Box::new(ban)))
        .map_err(|e| {
            let mut problem = param_problem(&e, style);
            // The core names the ban's own parameters; they live under `ban`.
            if let Some(field) = problem.field.take() {
                problem.field = Some(format!("ban.{field}"));
            }
            problem.message = format!("{}: {}", style.name("ban"), problem.message);
            problem
        })
}

/// A lease's ttl in the core's range: 1 µs to `MAX_PERIOD`.
pub fn check_lease(ttl: Ticks) -> Result<Ticks, ParamError> {
    if (1..=MAX_PERIOD).contains(&ttl) {
        Ok(ttl)
    } else {
        Err(ParamError::OutOfRange {
            name: "lease",
            value: ttl,
            min: 1,
            max: MAX_PERIOD,
        })
    }
}

/// A longest lease (`max_lease`) from the policy's `lease` to `MAX_PERIOD`.
fn check_max_lease(lease: Ticks, max_lease: Ticks) -> Result<Ticks, ParamError> {
    if (lease..=MAX_PERIOD).contains(&max_lease) {
        Ok(max_lease)
    } else {
        Err(ParamError::OutOfRange {
            name: "max_lease",
            value: max_lease,
            min: lease,
            max: MAX_PERIOD,
        })
    }
}
