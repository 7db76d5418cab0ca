//! The opt-in per-key gauge of `/metrics`: how much of its limit each of a policy's most
//! used keys has taken, for the policies named by `--key-usage`. A label per key could
//! grow without bound (every client a new series), so each policy keeps only its
//! `--key-usage-max` most used keys.

use std::collections::HashMap;
use std::fmt::Write;

use sluicegate_core::Decision;

/// A policy's most used keys, each with the share of its limit its last decision left
/// taken (0 to 1).
#[derive(Debug)]
pub struct TopKeys {
    max: usize,
    used: HashMap<String, f64>,
}

impl TopKeys {
    /// At most `max` keys.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            used: HashMap::new(),
        }
    }

    /// Records `decision` for `key`: kept if the key is held or there is room, else in
    /// place of the least used key if it is used more.
    pub fn record(&mut self, key: &str, decision: &Decision) {
        if decision.limit == 0 || self.max == 0 {
            return;
        }
        let taken = decision.limit.saturating_sub(decision.remaining);
        let used = taken as f64 / decision.limit as f64;
        if let Some(held) = self.used.get_mut(key) {
            *held = used;
            return;
        }
        if self.used.len() >= self.max {
            let least = self
                .used
                .iter()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map(|(k, &u)| (k.clone(), u));
            match least {
                Some((least, least_used)) if least_used < used => {
                    self.used.remove(&least);
                }
                _ => return,
            }
        }
        self.used.insert(key.to_owned(), used);
    }

    /// The gauge's lines for `policy` (its label value, escaped), most used first.
    pub fn render(&self, policy: &str, out: &mut String) {
        let mut keys: Vec<(&String, &f64)> = self.used.iter().collect();
        keys.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
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
    use super::TopKeys;
    use sluicegate_core::Decision;

    fn used(limit: u64, remaining: u64) -> Decision {
        Decision::admit(limit, remaining, 1, 0)
    }

    #[test]
    fn keeps_the_most_used_keys_within_its_bound() {
        let mut top = TopKeys::new(2);
        top.record("a", &used(10, 9));
        top.record("b", &used(10, 5));
        // Full: a less used key is not kept, a more used one replaces the least used.
        top.record("c", &used(10, 9));
        top.record("d", &used(10, 1));
        let mut out = String::new();
        top.render("api", &mut out);
        assert_eq!(
            out,
            "sluicegate_key_usage_ratio{policy=\"api\",key=\"d\"} 0.9\n\
             sluicegate_key_usage_ratio{policy=\"api\",key=\"b\"} 0.5\n"
        );
        // A held key's share follows its last decision.
        top.record("d", &used(10, 10));
        out.clear();
        top.render("api", &mut out);
        assert!(out.ends_with("key=\"d\"} 0\n"), "{out}");
    }

    #[test]
    fn escapes_label_values() {
        let mut top = TopKeys::new(1);
        top.record("a\"b\\c\nd", &used(4, 1));
        let mut out = String::new();
        top.render("api", &mut out);
        assert_eq!(
            out,
            "sluicegate_key_usage_ratio{policy=\"api\",key=\"a\\\"b\\\\c\\nd\"} 0.75\n"
        );
    }
}
