//! A policy's `when` and `key`: CEL over a request's descriptors, as limitador's
//! conditions and variables, compiled when the policy is built.

use std::borrow::Cow;

use crate::cel::{Bindings, EvalError, Expression, DESCRIPTORS, POLICY};
use crate::model::Policy;
use crate::problem::{Problem, Style};

/// A policy's compiled `when` and `key`: which requests it counts, and on which counter.
#[derive(Debug, Clone)]
pub struct Selector {
    when: Option<Expression>,
    key: Option<Expression>,
}

/// Two selectors are one where their expressions' texts are.
impl PartialEq for Selector {
    fn eq(&self, other: &Self) -> bool {
        fn text(e: &Option<Expression>) -> Option<&str> {
            e.as_ref().map(Expression::source)
        }
        text(&self.when) == text(&other.when) && text(&self.key) == text(&other.key)
    }
}

impl Eq for Selector {}

/// Compiles the expression of `field`, naming nothing but the bindings.
fn compile(source: &str, field: &str, style: Style) -> Result<Expression, Problem> {
    let problem = |message: String| Problem {
        field: Some(field.to_owned()),
        message: format!("{}: {message}", style.name(field)),
    };
    let expr = Expression::parse(source).map_err(problem)?;
    // A misspelt name would make `when` false for every request: refused here.
    if expr.reads_other_than(&[DESCRIPTORS, POLICY]) {
        return Err(problem(format!(
            "{source} names something other than `{DESCRIPTORS}` and `{POLICY}`"
        )));
    }
    Ok(expr)
}

impl Policy {
    /// The policy's `when` and `key` compiled, `None` if it has neither.
    pub(crate) fn selector(&self, style: Style) -> Result<Option<Selector>, Problem> {
        if self.when.is_none() && self.key.is_none() {
            return Ok(None);
        }
        let when = self.when.as_deref().map(|s| compile(s, "when", style));
        let key = self.key.as_deref().map(|s| compile(s, "key", style));
        Ok(Some(Selector {
            when: when.transpose()?,
            key: key.transpose()?,
        }))
    }
}

impl Selector {
    /// The counter a request asking for `key` under the policy `name` counts on: `key`,
    /// or the `key` expression's value; `None` where `when` does not hold or a key the
    /// expressions read is missing (the policy does not apply). A `when` that is not a
    /// boolean, a `key` that is a list or a map, or any other failure is an error.
    pub fn select<'k>(
        &self,
        name: &str,
        key: &'k str,
        bindings: &mut Bindings,
    ) -> Result<Option<Cow<'k, str>>, EvalError> {
        bindings.for_policy(name);
        if let Some(when) = &self.when {
            if !when.test(bindings)? {
                return Ok(None);
            }
        }
        match &self.key {
            Some(expr) => Ok(expr.value(bindings)?.map(Cow::Owned)),
            None => Ok(Some(Cow::Borrowed(key))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Bindings;
    use crate::{Kind, Policy, Style};

    fn policy(when: Option<&str>, key: Option<&str>) -> Policy {
        let mut policy = Policy::from_flags(Kind::FixedWindow, Some(1), None, None, None);
        policy.when = when.map(str::to_owned);
        policy.key = key.map(str::to_owned);
        policy
    }

    #[test]
    fn when_gates_and_key_names_the_counter() {
        let p = policy(
            Some(r#"descriptors[0]["tier"] == "free" && policy.name == "api""#),
            Some(r#"descriptors[0]["user"]"#),
        );
        let s = p.selector(Style::File).unwrap().unwrap();
        let mut free = Bindings::new([vec![("tier", "free"), ("user", "ann")]]);
        assert_eq!(s.select("api", "k", &mut free).unwrap().unwrap(), "ann");
        assert_eq!(s.select("other", "k", &mut free).unwrap(), None);
        let mut paid = Bindings::new([vec![("tier", "paid"), ("user", "ann")]]);
        assert_eq!(s.select("api", "k", &mut paid).unwrap(), None);
        let mut anonymous = Bindings::new([vec![("tier", "free")]]);
        assert_eq!(s.select("api", "k", &mut anonymous).unwrap(), None);
    }

    #[test]
    fn without_key_the_request_key_counts() {
        let s = policy(Some("true"), None).selector(Style::File);
        let s = s.unwrap().unwrap();
        let mut b = Bindings::new([Vec::<(&str, &str)>::new()]);
        assert_eq!(s.select("api", "k", &mut b).unwrap().unwrap(), "k");
        assert_eq!(policy(None, None).selector(Style::File), Ok(None));
    }

    #[test]
    fn non_bool_when_and_list_key_are_errors() {
        let mut b = Bindings::new([vec![("a", "1")]]);
        let s = policy(Some("descriptors[0]"), None).selector(Style::File);
        let e = s.unwrap().unwrap().select("api", "k", &mut b).unwrap_err();
        assert_eq!(e.0, "unexpected value of type map");
        let s = policy(None, Some("descriptors")).selector(Style::File);
        assert!(s.unwrap().unwrap().select("api", "k", &mut b).is_err());
    }
}
