//! The opt-in per-key gauge of `/metrics`: how much of its limit each of a policy's most
//! used keys has taken, for the policies named by `--key-usage`. A label per key could
//! grow without bound (every client a new series), so each policy keeps only its
//! `--key-usage-max` most used keys.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use sluicegate_core::Decision;

/// The most keys a policy's gauge may keep (`--key-usage-max`): finding the least used
/// one scans them all.
pub(crate) const MAX_TOP_KEYS: usize = 1000;

/// A policy's most used keys, each with the share of its limit its last decision left
/// taken (0 to 1) and when that share lapses (the key is fresh again).
#[derive(Debug)]
pub(crate) struct TopKeys {
    max: usize,
    used: HashMap<String, (f64, Instant)>,
}

impl TopKeys {
    /// At most `max` keys (and [`MAX_TOP_KEYS`]).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max: max.min(MAX_TOP_KEYS),
            used: HashMap::new(),
        }
    }

    /// Records `decision` for `key` at `now`: kept if the key is held or there is room,
    /// else in place of the least used key (a lapsed one counting as unused) if it is
    /// used more.
    pub(crate) fn record(&mut self, key: &str, decision: &Decision, now: Instant) {
        if decision.limit == 0 || self.max == 0 {
            return;
        }
        let taken = decision.limit.saturating_sub(decision.remaining);
        let used = taken as f64 / decision.limit as f64;
        let lapses = now + Duration::from_micros(decision.reset_after);
        if let Some(held) = self.used.get_mut(key) {
            *held = (used, lapses);
            return;
        }
        if self.used.len() >= self.max {
            let share = |&(used, lapses): &(f64, Instant)| if lapses > now { used } else { 0.0 };
            let least = self
                .used
                .iter()
                .map(|(k, held)| (k, share(held)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(k, u)| (k.clone(), u));
            match least {
                Some((least, least_used)) if least_used < used => {
                    self.used.remove(&least);
                }
                _ => return,
            }
        }
        self.used.insert(key.to_owned(), (used, lapses));
    }

    /// The gauge's lines for `policy` (its label value, escaped) at `now`, most used
    /// first; keys whose share has lapsed are dropped.
    pub(crate) fn render(&mut self, policy: &str, now: Instant, out: &mut String) {
        self.used.retain(|_, (_, lapses)| *lapses > now);
        let mut keys: Vec<(&String, f64)> = self.used.iter().map(|(k, &(u, _))| (k, u)).collect();
        keys.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        for (key, used) in keys {
            let _ = writeln!(
                out,
                "sluicegate_key_usage_ratio{{policy=\"{policy}\",key=\"{}\"}} {used}",
                escape(key)
            );
        }
    }
}

/// A label value as Prometheus's text format writes it.
pub(crate) fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::TopKeys;
    use sluicegate_core::Decision;

    /// A share lasting an hour.
    fn used(limit: u64, remaining: u64) -> Decision {
        Decision::admit(limit, remaining, 3_600_000_000, 0)
    }

    impl TopKeys {
        fn record_now(&mut self, key: &str, decision: &Decision) {
            self.record(key, decision, Instant::now());
        }
    }

    #[test]
    fn a_lapsed_share_is_dropped_and_makes_room() {
        let mut top = TopKeys::new(1);
        let then = Instant::now();
        top.record("old", &Decision::admit(10, 1, 1_000_000, 0), then);
        // A second later the old key's window has ended: a less used key takes its place.
        let later = then + Duration::from_secs(2);
        top.record("new", &Decision::admit(10, 9, 1_000_000, 0), later);
        let mut out = String::new();
        top.render("api", later, &mut out);
        assert_eq!(
            out,
            "sluicegate_key_usage_ratio{policy=\"api\",key=\"new\"} 0.1\n"
        );
        // And once its own share lapses, nothing is shown.
        out.clear();
        top.render("api", later + Duration::from_secs(2), &mut out);
        assert_eq!(out, "");
    }

    #[test]
    fn keeps_the_most_used_keys_within_its_bound() {
        let mut top = TopKeys::new(2);
        top.record_now("a", &used(10, 9));
        top.record_now("b", &used(10, 5));
        // Full: a less used key is not kept, a more used one replaces the least used.
        top.record_now("c", &used(10, 9));
        top.record_now("d", &used(10, 1));
        let mut out = String::new();
        top.render("api", Instant::now(), &mut out);
        assert_eq!(
            out,
            "sluicegate_key_usage_ratio{policy=\"api\",key=\"d\"} 0.9\n\
             sluicegate_key_usage_ratio{policy=\"api\",key=\"b\"} 0.5\n"
        );
        // A held key's share follows its last decision.
        top.record_now("d", &used(10, 10));
        out.clear();
        top.render("api", Instant::now(), &mut out);
        assert!(out.ends_with("key=\"d\"} 0\n"), "{out}");
    }

    #[test]
    fn escapes_label_values() {
        let mut top = TopKeys::new(1);
        top.record_now("a\"b\\c\nd", &used(4, 1));
        let mut out = String::new();
        top.render("api", Instant::now(), &mut out);
        assert_eq!(
            out,
            "sluicegate_key_usage_ratio{policy=\"api\",key=\"a\\\"b\\\\c\\nd\"} 0.75\n"
        );
    }
}
