//! The shapes Kuadrant's operator and limitador's guide write — `descriptors[N]['name']`
//! (or `descriptors[N].name`), and it `==` or `!=` a string — recognised at compile time
//! and evaluated without the interpreter. Exact: where the answer is not a descriptor's
//! entry found or missing (an index past the end), the interpreter answers.

use cel::common::ast::{operators, Expr, IdedExpr};
use cel::common::value::CelVal;

use super::DESCRIPTORS;

/// `descriptors[index][key]`, or `descriptors[index].key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    index: usize,
    key: String,
}

/// An expression of a shape evaluated here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Shape {
    /// The entry's value.
    Entry(Entry),
    /// Whether the entry's value is (`equal`) or is not `literal`.
    Compare {
        entry: Entry,
        literal: String,
        equal: bool,
    },
}

/// What a shape gives on a request: `None` where the interpreter must answer.
pub(super) type Fast<T> = Option<Option<T>>;

impl Entry {
    fn of(expr: &IdedExpr) -> Option<Self> {
        let (map, key) = match &expr.expr {
            Expr::Call(call) if call.func_name == operators::INDEX && call.target.is_none() => {
                let [map, key] = call.args.as_slice() else {
                    return None;
                };
                let Expr::Literal(CelVal::String(key)) = &key.expr else {
                    return None;
                };
                (map, key)
            }
            Expr::Select(select) if !select.test => (&*select.operand, &select.field),
            _ => return None,
        };
        let Expr::Call(call) = &map.expr else {
            return None;
        };
        let [list, index] = call.args.as_slice() else {
            return None;
        };
        if call.func_name != operators::INDEX || call.target.is_some() {
            return None;
        }
        match (&list.expr, &index.expr) {
            (Expr::Ident(name), Expr::Literal(CelVal::Int(i))) if name == DESCRIPTORS => {
                Some(Self {
                    index: usize::try_from(*i).ok()?,
                    key: key.clone(),
                })
            }
            _ => None,
        }
    }

    /// The entry's value in `descriptors` (a repeated key's last); `None` where the
    /// descriptor is not there.
    fn find<'a>(&self, descriptors: &[Vec<(&'a str, &'a str)>]) -> Fast<&'a str> {
        let entries = descriptors.get(self.index)?;
        let found = entries.iter().rev().find(|(k, _)| *k == self.key);
        Some(found.map(|(_, v)| *v))
    }
}

impl Shape {
    /// `expr`'s shape, if it is one evaluated here.
    pub(super) fn of(expr: &IdedExpr) -> Option<Self> {
        if let Some(entry) = Entry::of(expr) {
            return Some(Self::Entry(entry));
        }
        let Expr::Call(call) = &expr.expr else {
            return None;
        };
        let equal = match call.func_name.as_str() {
            operators::EQUALS => true,
            operators::NOT_EQUALS => false,
            _ => return None,
        };
        let ([left, right], None) = (call.args.as_slice(), &call.target) else {
            return None;
        };
        let (entry, literal) = match (&left.expr, &right.expr) {
            (_, Expr::Literal(CelVal::String(s))) => (Entry::of(left)?, s.clone()),
            (Expr::Literal(CelVal::String(s)), _) => (Entry::of(right)?, s.clone()),
            _ => return None,
        };
        Some(Self::Compare {
            entry,
            literal,
            equal,
        })
    }

    /// As a condition: `Some(None)` where the entry is missing (false).
    pub(super) fn test(&self, descriptors: &[Vec<(&str, &str)>]) -> Fast<bool> {
        match self {
            Self::Entry(_) => None,
            Self::Compare {
                entry,
                literal,
                equal,
            } => Some(entry.find(descriptors)?.map(|v| (v == literal) == *equal)),
        }
    }

    /// As a variable: `Some(None)` where the entry is missing (the limit is skipped).
    pub(super) fn value<'a>(&self, descriptors: &[Vec<(&'a str, &'a str)>]) -> Fast<&'a str> {
        match self {
            Self::Entry(entry) => entry.find(descriptors),
            Self::Compare { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{Bindings, Expression};

    /// Texts that a few keys and values are drawn from, quotes and escapes among them.
    fn word() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["k", "a", "", "x", "k'", "\\", "é"]).prop_map(str::to_owned)
    }

    /// A CEL string literal of `text`.
    fn quoted(text: &str) -> String {
        format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
    }

    /// An expression of a fast shape, or a near miss the interpreter answers.
    fn expression() -> impl Strategy<Value = String> {
        let field = prop::sample::select(vec!["k", "a", "x"]);
        let entry = prop_oneof![
            (0i64..3, word()).prop_map(|(i, k)| format!("descriptors[{i}][{}]", quoted(&k))),
            (0i64..3, field).prop_map(|(i, k)| format!("descriptors[{i}].{k}")),
        ];
        (entry, 0..6usize, word()).prop_map(|(entry, form, lit)| match form {
            0 => entry,
            1 => format!("{entry} == {}", quoted(&lit)),
            2 => format!("{entry} != {}", quoted(&lit)),
            3 => format!("{} == {entry}", quoted(&lit)),
            4 => format!("{} != {entry}", quoted(&lit)),
            _ => format!("{entry} == 1"),
        })
    }

    /// A few descriptors, whose keys repeat often.
    fn descriptors() -> impl Strategy<Value = Vec<Vec<(String, String)>>> {
        let key = prop::sample::select(vec!["k", "a", "k'"]).prop_map(str::to_owned);
        prop::collection::vec(prop::collection::vec((key, word()), 0..5), 0..3)
    }

    proptest! {
        #[test]
        fn fast_shapes_answer_as_the_interpreter(
            source in expression(),
            descriptors in descriptors(),
        ) {
            let fast = Expression::parse(&source).unwrap();
            let mut slow = fast.clone();
            slow.shape = None;
            let raw: Vec<Vec<(&str, &str)>> = descriptors
                .iter()
                .map(|d| d.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
                .collect();
            let bindings = Bindings::of(&raw);
            prop_assert_eq!(fast.test(&bindings), slow.test(&bindings));
            prop_assert_eq!(fast.value(&bindings), slow.value(&bindings));
        }
    }

    #[test]
    fn kuadrants_shapes_are_fast() {
        let cases = [
            ("descriptors[0]['k']", true),
            ("descriptors[1][\"a.b\"] == 'x'", true),
            ("'x' != descriptors[0]['k']", true),
            ("descriptors[0].k == 'x'", true),
            ("descriptors[-1]['k']", false),
            ("has(descriptors[0].k)", false),
            ("descriptors[0]['k'] == 1", false),
        ];
        for (source, fast) in cases {
            let shape = Expression::parse(source).unwrap().shape;
            assert_eq!(shape.is_some(), fast, "{source}");
        }
    }
}
