//! The server's pushback, read from response headers: `Retry-After` (seconds or an HTTP
//! date) pauses the queue; the IETF `RateLimit` header (with `RateLimit-Policy`) caps the
//! local budget until the server's window ends.

use sluicegate_core::{Ticks, SECOND};

use crate::scheduler::Budget;

/// What a response asks of the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Feedback {
    /// Send nothing before this instant (`Retry-After`).
    pub resume_at: Option<Ticks>,
    /// Send at most this much until the server's window ends (`RateLimit`).
    pub budget: Option<Budget>,
}

/// Reads the headers `header` looks up (by lower-case name) at `now`. Headers that do
/// not parse are ignored: a client must keep working whatever a server sends.
pub(crate) fn read(header: impl Fn(&str) -> Option<String>, now: Ticks) -> Feedback {
    let resume_at = header("retry-after")
        .and_then(|value| retry_after(&value, now))
        .filter(|&at| at > now);
    let windows = header("ratelimit-policy")
        .map(|value| policy_windows(&value))
        .unwrap_or_default();
    let granted = header("ratelimit")
        .map(|value| grants(&value, &windows))
        .unwrap_or_default()
        .into_iter()
        .chain(legacy_grant(&header));
    // The most restrictive grant binds; among equals, the longest.
    let budget = granted
        .min_by_key(|&(remaining, seconds)| (remaining, u64::MAX - seconds))
        .map(|(remaining, seconds)| Budget {
            remaining,
            until: now.saturating_add(seconds.saturating_mul(SECOND)),
        });
    Feedback { resume_at, budget }
}

/// `Retry-After`: delta seconds, or an HTTP date, as an instant.
fn retry_after(value: &str, now: Ticks) -> Option<Ticks> {
    let value = value.trim();
    match value.parse::<u64>() {
        Ok(seconds) => Some(now.saturating_add(seconds.saturating_mul(SECOND))),
        Err(_) => http_date(value),
    }
}

/// One member of a structured-field list: its name and its `key=value` parameters.
/// `"default";r=50;t=30` is `("default", [("r", "50"), ("t", "30")])`.
fn members(value: &str) -> impl Iterator<Item = (&str, Vec<(&str, &str)>)> {
    value.split(',').map(|member| {
        let mut parts = member.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default().trim_matches('"');
        let params = parts.filter_map(|part| part.split_once('=')).collect();
        (name, params)
    })
}

fn param(params: &[(&str, &str)], key: &str) -> Option<u64> {
    params
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
}

/// `RateLimit-Policy: "name";q=100;w=60, ...`: each policy's window in seconds.
fn policy_windows(value: &str) -> Vec<(String, u64)> {
    members(value)
        .filter_map(|(name, params)| Some((name.to_owned(), param(&params, "w")?)))
        .collect()
}

/// `RateLimit: "name";r=50;t=30, ...`: (remaining, seconds until the window ends) per
/// policy; `t` defaults to the named policy's window. Also the earlier drafts' form
/// `RateLimit: limit=100, remaining=50, reset=30`.
fn grants(value: &str, windows: &[(String, u64)]) -> Vec<(u64, u64)> {
    let current = members(value).filter_map(|(name, params)| {
        let remaining = param(&params, "r")?;
        let window = || windows.iter().find(|(n, _)| n == name).map(|w| w.1);
        Some((remaining, param(&params, "t").or_else(window)?))
    });
    let dictionary: Vec<(&str, &str)> = value
        .split(',')
        .filter_map(|item| item.trim().split_once('='))
        .collect();
    let earlier = param(&dictionary, "remaining").zip(param(&dictionary, "reset"));
    current.chain(earlier).collect()
}

/// The earliest drafts' separate `RateLimit-Remaining` and `RateLimit-Reset` headers.
fn legacy_grant(header: &impl Fn(&str) -> Option<String>) -> Option<(u64, u64)> {
    let number = |name| header(name)?.trim().parse().ok();
    number("ratelimit-remaining").zip(number("ratelimit-reset"))
}

/// An HTTP date in the IMF-fixdate form servers send (`Sun, 06 Nov 1994 08:49:37 GMT`,
/// RFC 9110 §5.6.7), as microseconds since the Unix epoch.
fn http_date(value: &str) -> Option<Ticks> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let mut fields = value.split_ascii_whitespace();
    let _weekday = fields.next().filter(|w| w.ends_with(','))?;
    let day: u64 = fields.next().filter(|d| d.len() == 2)?.parse().ok()?;
    let month = fields.next()?;
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    let year: u64 = fields.next().filter(|y| y.len() == 4)?.parse().ok()?;
    let mut clock = fields.next()?.split(':');
    let mut part = |max: u64| -> Option<u64> {
        let p = clock.next().filter(|p| p.len() == 2)?.parse().ok()?;
        (p <= max).then_some(p)
    };
    let (hour, minute, second) = (part(23)?, part(59)?, part(60)?);
    if fields.next()? != "GMT" || fields.next().is_some() || year < 1970 {
        return None;
    }
    let month = u64::try_from(month).ok()?;
    if !(1..=days_in_month(year, month)).contains(&day) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = ((days * 24 + hour) * 60 + minute) * 60 + second;
    Some(seconds * SECOND)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date on or after it (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use proptest::prelude::*;

    use super::*;

    fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| (*v).to_owned())
        }
    }

    const NOW: Ticks = 1_700_000_000 * SECOND;

    #[test]
    fn retry_after_in_seconds_and_as_a_date() {
        let pause = |value| read(headers(&[("Retry-After", value)]), NOW).resume_at;
        assert_eq!(pause("1"), Some(NOW + SECOND));
        assert_eq!(pause(" 120 "), Some(NOW + 120 * SECOND));
        assert_eq!(pause("0"), None);
        // 1 700 000 100 s after the epoch.
        assert_eq!(
            pause("Tue, 14 Nov 2023 22:15:00 GMT"),
            Some(1_700_000_100 * SECOND)
        );
        // Dates in the past, garbage and other date forms: no pause.
        for ignored in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "soon",
            "-5",
            "Tue, 14 Nov 2023 22:15:00 UTC",
            "Tuesday, 14-Nov-23 22:15:00 GMT",
            "Tue, 31 Nov 2023 22:15:00 GMT",
            "Tue, 14 Nov 2023 24:15:00 GMT",
        ] {
            assert_eq!(pause(ignored), None, "{ignored}");
        }
        assert_eq!(
            http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777 * SECOND)
        );
    }

    #[test]
    fn ratelimit_headers_of_every_draft() {
        let budget = |pairs: &[(&str, &str)]| read(headers(pairs), NOW).budget;
        let grant = |remaining, seconds: u64| {
            Some(Budget {
                remaining,
                until: NOW + seconds * SECOND,
            })
        };
        assert_eq!(
            budget(&[("RateLimit", "\"default\";r=50;t=30")]),
            grant(50, 30)
        );
        // The tightest of several policies binds.
        assert_eq!(
            budget(&[("RateLimit", "\"hour\";r=500;t=3000, \"minute\";r=0;t=12")]),
            grant(0, 12)
        );
        // Without `t`, the named policy's window.
        assert_eq!(
            budget(&[
                ("RateLimit", "\"burst\";r=3"),
                (
                    "RateLimit-Policy",
                    "\"burst\";q=100;w=60, \"day\";q=1000;w=86400"
                ),
            ]),
            grant(3, 60)
        );
        assert_eq!(budget(&[("RateLimit", "\"burst\";r=3")]), None);
        assert_eq!(
            budget(&[("RateLimit", "limit=100, remaining=7, reset=5")]),
            grant(7, 5)
        );
        assert_eq!(
            budget(&[("RateLimit-Remaining", "2"), ("RateLimit-Reset", "9")]),
            grant(2, 9)
        );
        assert_eq!(budget(&[("RateLimit", "nonsense;;==,")]), None);
        assert_eq!(budget(&[]), None);
    }

    proptest! {
        #[test]
        fn http_dates_read_back_the_instant_they_name(seconds in 0u64..253_402_300_800) {
            // Written by another crate's formatter, so the parser is checked against
            // code it shares nothing with.
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(seconds));
            prop_assert_eq!(http_date(&text), Some(seconds * SECOND), "{}", text);
        }

        #[test]
        fn any_header_text_is_read_without_panicking(
            retry in ".{0,40}",
            ratelimit in "[a-z0-9\";=, ]{0,60}",
        ) {
            let _ = read(headers(&[("Retry-After", &retry), ("RateLimit", &ratelimit)]), NOW);
        }
    }
}
