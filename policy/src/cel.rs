//! CEL expressions as limitador reads and evaluates them (the `cel` crate it uses),
//! compiled once at load and bounded: their length, their nesting, their comprehensions
//! (whose iteration variables are bound here, where limitador takes them for unbound
//! names and makes the expression silently false), and what evaluating one may panic on.
//! Shared by limitador's limits file and the `when` and `key` of sluicegate's policies.

mod shape;

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::context::VariableResolver;
use cel::objects::{Key, Map, Value};
use cel::ExecutionError;

use shape::Shape;

/// The longest expression, in bytes: Kuadrant's are a few dozen.
pub const MAX_EXPRESSION_LEN: usize = 4096;
/// The deepest nesting of brackets in an expression: the parser recurses on each.
pub const MAX_NESTING: usize = 32;
/// The most comprehensions (`exists`, `all`, `map`, `filter`) nested in one another:
/// each multiplies the work by the length of the list it walks.
pub const MAX_COMPREHENSION_DEPTH: usize = 2;

/// The names an expression is given: the request's descriptors, and the limitador
/// limit or the sluicegate policy it belongs to.
pub(crate) const DESCRIPTORS: &str = "descriptors";
pub(crate) const LIMIT: &str = "limit";
pub(crate) const POLICY: &str = "policy";

thread_local! {
    /// The standard functions, registered once per thread: a context holding them is
    /// a map of some forty entries, too costly to build for every evaluation.
    static ROOT: cel::Context<'static> = cel::Context::default();
}

/// One compiled expression and its source text.
#[derive(Debug, Clone)]
pub struct Expression {
    source: String,
    expr: IdedExpr,
    /// The names it reads that nothing in it binds.
    free: BTreeSet<String>,
    /// Its shape where it is one of Kuadrant's, evaluated without the interpreter.
    shape: Option<Shape>,
}

/// Why an expression cannot be evaluated for a request (limitador's words where it has
/// them); the call fails with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

impl Expression {
    /// Compiles `source`; the error says why not (limitador's "couldn't parse" text).
    pub fn parse(source: &str) -> Result<Self, String> {
        if source.len() > MAX_EXPRESSION_LEN {
            return Err(format!(
                "couldn't parse {}…: longer than {MAX_EXPRESSION_LEN} bytes",
                source.chars().take(40).collect::<String>()
            ));
        }
        if nesting(source) > MAX_NESTING {
            return Err(format!(
                "couldn't parse {source}: nested deeper than {MAX_NESTING} brackets"
            ));
        }
        let parsed = catch_unwind(|| cel::parser::Parser::new().parse(source));
        let expr = match parsed {
            Ok(Ok(expr)) => expr,
            Ok(Err(e)) => return Err(format!("couldn't parse {source}: {e}")),
            Err(_) => return Err(format!("couldn't parse {source}: the parser failed")),
        };
        let mut free = BTreeSet::new();
        walk(&expr, &mut Vec::new(), 0, &mut free)
            .map_err(|why| format!("couldn't parse {source}: {why}"))?;
        Ok(Self {
            source: source.to_owned(),
            shape: Shape::of(&expr),
            expr,
            free,
        })
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether it reads `name` where nothing in it binds it.
    pub(crate) fn reads(&self, name: &str) -> bool {
        self.free.contains(name)
    }

    /// Whether it reads a name other than the `allowed` ones.
    pub(crate) fn reads_other_than(&self, allowed: &[&str]) -> bool {
        self.free
            .iter()
            .any(|name| !allowed.contains(&name.as_str()))
    }

    /// Its value in `bindings`; a panic of the interpreter is an error.
    fn resolve(&self, bindings: &Bindings) -> Result<Value, ExecutionError> {
        let run = AssertUnwindSafe(|| {
            ROOT.with(|root| {
                // Looked up, not inserted: a scope of its own would cost a map a call.
                let resolver = Resolver(bindings);
                let mut context = root.new_inner_scope();
                context.set_variable_resolver(&resolver);
                Value::resolve(&self.expr, &context)
            })
        });
        catch_unwind(run).unwrap_or_else(|_| {
            Err(ExecutionError::function_error(
                &self.source,
                "not supported on these values",
            ))
        })
    }

    /// As a condition: whether it holds, a missing key or a name not bound making it
    /// false; a value that is not a boolean or any other failure (an index past the end
    /// of a list, which limitador panics on) is an error.
    pub fn test(&self, bindings: &Bindings) -> Result<bool, EvalError> {
        if let Some(Some(holds)) = self.shape.as_ref().map(|s| s.test(&bindings.raw)) {
            return Ok(holds == Some(true));
        }
        let subject = bindings
            .subject
            .as_ref()
            .map_or(DESCRIPTORS, |(name, _)| name);
        if self.reads_other_than(&[DESCRIPTORS, subject]) {
            return Ok(false);
        }
        match self.resolve(bindings) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(unexpected(&other)),
            Err(ExecutionError::NoSuchKey(_)) => Ok(false),
            Err(e) => Err(EvalError(e.to_string())),
        }
    }

    /// As a variable: its value as text, `None` where a key is missing (the limit is
    /// skipped); a list, a map or any failure is an error.
    pub fn value(&self, bindings: &Bindings) -> Result<Option<String>, EvalError> {
        Ok(self.text(bindings)?.map(Cow::into_owned))
    }

    /// [`Expression::value`], borrowed from the request where it is a descriptor's entry.
    pub fn text<'a>(&self, bindings: &Bindings<'a>) -> Result<Option<Cow<'a, str>>, EvalError> {
        if let Some(Some(found)) = self.shape.as_ref().map(|s| s.value(&bindings.raw)) {
            return Ok(found.map(Cow::Borrowed));
        }
        let owned = |text: String| Ok(Some(Cow::Owned(text)));
        match self.resolve(bindings) {
            Ok(Value::Int(i)) => owned(i.to_string()),
            Ok(Value::UInt(u)) => owned(u.to_string()),
            Ok(Value::Float(f)) => owned(f.to_string()),
            Ok(Value::String(s)) => owned(s.to_string()),
            Ok(Value::Null) => owned("null".to_owned()),
            Ok(Value::Bool(b)) => owned(b.to_string()),
            Ok(other) => Err(unexpected(&other)),
            Err(ExecutionError::NoSuchKey(_)) => Ok(None),
            Err(e) => Err(EvalError(e.to_string())),
        }
    }
}

/// limitador's message for a value of the wrong type.
fn unexpected(value: &Value) -> EvalError {
    let kind = match value {
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Function(..) => "function",
        Value::Bytes(_) => "bytes",
        Value::Duration(_) => "duration",
        Value::Timestamp(_) => "timestamp",
        Value::Int(_) => "integer",
        Value::UInt(_) => "unsigned integer",
        Value::Float(_) => "float",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Null => "null",
        Value::Opaque(_) => "opaque",
    };
    EvalError(format!("unexpected value of type {kind}"))
}

/// The deepest nesting of brackets in `source`, quotes not told apart: an upper bound.
fn nesting(source: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0);
    for c in source.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Collects the names `expr` reads that nothing in it binds (`bound`: the comprehension
/// variables in scope), and refuses what the interpreter cannot evaluate (message
/// construction) and comprehensions nested beyond [`MAX_COMPREHENSION_DEPTH`].
fn walk(
    expr: &IdedExpr,
    bound: &mut Vec<String>,
    comprehensions: usize,
    free: &mut BTreeSet<String>,
) -> Result<(), String> {
    let mut each = |e: &IdedExpr, bound: &mut Vec<String>| walk(e, bound, comprehensions, free);
    match &expr.expr {
        Expr::Unspecified => Err("an empty expression".into()),
        Expr::Struct(_) => Err("message construction is not supported".into()),
        Expr::Literal(_) => Ok(()),
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(name) {
                free.insert(name.clone());
            }
            Ok(())
        }
        Expr::Select(select) => each(&select.operand, bound),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                each(target, bound)?;
            }
            call.args.iter().try_for_each(|a| each(a, bound))
        }
        Expr::List(list) => list.elements.iter().try_for_each(|e| each(e, bound)),
        Expr::Map(map) => map.entries.iter().try_for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => {
                each(&e.key, bound)?;
                each(&e.value, bound)
            }
            EntryExpr::StructField(_) => Err("message construction is not supported".into()),
        }),
        Expr::Comprehension(c) => {
            if comprehensions >= MAX_COMPREHENSION_DEPTH {
                return Err(format!(
                    "comprehensions nested deeper than {MAX_COMPREHENSION_DEPTH}"
                ));
            }
            each(&c.iter_range, bound)?;
            each(&c.accu_init, bound)?;
            let before = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            let inner = [&c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .try_for_each(|e| walk(e, bound, comprehensions + 1, free));
            bound.truncate(before);
            inner
        }
    }
}

/// What an expression is evaluated over: `descriptors` (the request's, each a map of
/// its entries, a repeated key's last value) and either `limit` (a limitador limit's
/// `name` and `id`, null where absent) or `policy` (a sluicegate policy's `name`).
#[derive(Debug, Clone)]
pub struct Bindings<'a> {
    /// The request's descriptors, each its entries in order.
    raw: Cow<'a, [Vec<(&'a str, &'a str)>]>,
    /// `raw` as the interpreter reads it, built the first time it does.
    descriptors: OnceLock<Value>,
    subject: Option<(&'static str, Value)>,
}

impl<'a> Bindings<'a> {
    /// The bindings of a request of `descriptors` (each its entries in order).
    pub fn new<D, E>(descriptors: D) -> Self
    where
        D: IntoIterator<Item = E>,
        E: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let raw = descriptors
            .into_iter()
            .map(|entries| entries.into_iter().collect())
            .collect();
        Self::from_raw(Cow::Owned(raw))
    }

    /// [`Bindings::new`] over descriptors already collected, borrowed.
    pub fn of(descriptors: &'a [Vec<(&'a str, &'a str)>]) -> Self {
        Self::from_raw(Cow::Borrowed(descriptors))
    }

    fn from_raw(raw: Cow<'a, [Vec<(&'a str, &'a str)>]>) -> Self {
        Self {
            raw,
            descriptors: OnceLock::new(),
            subject: None,
        }
    }

    /// `descriptors` as the interpreter reads it.
    fn descriptors(&self) -> Value {
        let build = || {
            let text = |t: &str| Arc::new(t.to_owned());
            let list: Vec<Value> = (self.raw.iter())
                .map(|entries| {
                    let map: HashMap<Key, Value> = (entries.iter())
                        .map(|(k, v)| (Key::String(text(k)), Value::String(text(v))))
                        .collect();
                    Value::Map(Map { map: Arc::new(map) })
                })
                .collect();
            Value::List(Arc::new(list))
        };
        self.descriptors.get_or_init(build).clone()
    }

    /// These bindings with `limit` naming a limit of `name` and `id`: built only where
    /// it is `read`, else bound to null.
    pub(crate) fn for_limit(&mut self, name: Option<&str>, id: Option<&str>, read: bool) {
        let text = |t: Option<&str>| t.map_or(Value::Null, |t| Value::String(Arc::new(t.into())));
        let value = if read {
            let map = HashMap::from([("name", text(name)), ("id", text(id))]);
            Value::Map(Map::from(map))
        } else {
            Value::Null
        };
        self.subject = Some((LIMIT, value));
    }

    /// These bindings with `policy` naming the policy `name`.
    pub(crate) fn for_policy(&mut self, name: &str) {
        let map = HashMap::from([("name", Value::String(Arc::new(name.into())))]);
        self.subject = Some((POLICY, Value::Map(Map::from(map))));
    }
}

/// What an expression's own names resolve to: `descriptors` and the subject.
struct Resolver<'b, 'a>(&'b Bindings<'a>);

impl VariableResolver for Resolver<'_, '_> {
    fn resolve(&self, variable: &str) -> Option<Value> {
        match &self.0.subject {
            _ if variable == DESCRIPTORS => Some(self.0.descriptors()),
            Some((name, value)) if variable == *name => Some(value.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Bindings, Expression};

    fn request() -> Bindings<'static> {
        Bindings::new([vec![("a", "1"), ("b", "x")], vec![("a", "2")]])
    }

    #[test]
    fn kuadrants_conditions_and_variables() {
        let b = request();
        let cond = Expression::parse(r#"descriptors[0]["a"] == "1""#).unwrap();
        assert_eq!(cond.test(&b), Ok(true));
        let var = Expression::parse(r#"descriptors[0]["b"]"#).unwrap();
        assert_eq!(var.value(&b), Ok(Some("x".into())));
        let missing = Expression::parse(r#"descriptors[0]["c"]"#).unwrap();
        assert_eq!(missing.value(&b), Ok(None));
        assert_eq!(
            Expression::parse(r#"descriptors[0]["c"] == "1""#)
                .unwrap()
                .test(&b),
            Ok(false)
        );
    }

    #[test]
    fn unbound_names_are_false_and_macros_bind_theirs() {
        let b = request();
        let unbound = Expression::parse(r#"other == "1""#).unwrap();
        assert_eq!(unbound.test(&b), Ok(false));
        let any = Expression::parse(r#"descriptors.exists(d, d["a"] == "2")"#).unwrap();
        assert_eq!(any.test(&b), Ok(true));
        let all = Expression::parse(r#"descriptors.all(d, d["a"] == "2")"#).unwrap();
        assert_eq!(all.test(&b), Ok(false));
    }

    #[test]
    fn wrong_types_and_bad_indexes_are_errors_never_panics() {
        let b = request();
        let not_bool = Expression::parse("42").unwrap();
        assert_eq!(
            not_bool.test(&b).unwrap_err().0,
            "unexpected value of type integer"
        );
        let past = Expression::parse(r#"descriptors[5]["a"] == "1""#).unwrap();
        assert!(past.test(&b).unwrap_err().0.contains("out of bounds"));
        let list = Expression::parse("[1, 2]").unwrap();
        assert!(list.value(&b).is_err());
        // The interpreter panics on a comprehension over a number: an error here.
        let weird = Expression::parse("1.exists(x, true)").unwrap();
        assert!(weird.test(&b).is_err());
    }

    #[test]
    fn huge_and_deep_expressions_are_refused() {
        let long = format!("'{}' == 'a'", "a".repeat(5000));
        assert!(Expression::parse(&long)
            .unwrap_err()
            .contains("longer than"));
        let deep = format!("{}1{}", "(".repeat(40), ")".repeat(40));
        assert!(Expression::parse(&deep)
            .unwrap_err()
            .contains("nested deeper"));
        let nested = "descriptors.all(a, descriptors.all(b, descriptors.all(c, true)))";
        assert!(Expression::parse(nested)
            .unwrap_err()
            .contains("comprehensions"));
        assert!(Expression::parse("Foo{a: 1}").is_err());
        assert!(Expression::parse("1 +")
            .unwrap_err()
            .starts_with("couldn't parse 1 +"));
    }

    #[test]
    fn the_limit_is_bound() {
        let mut b = request();
        b.for_limit(Some("per-user"), None, true);
        let named = Expression::parse("limit.name == 'per-user' && limit.id == null").unwrap();
        assert_eq!(named.test(&b), Ok(true));
    }
}
