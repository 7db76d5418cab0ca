//! A policy's `when` and `key` (CEL): compiled when the policy is built, an expression
//! that cannot be refused with the policy's name and where it is written.

use sluicegate_policy::cel::Bindings;
use sluicegate_policy::{FileError, PolicyFile, Position};

const HEAD: &str = "[policies.api]\nalgorithm = \"fixed-window\"\nlimit = 2\nperiod = \"1m\"\n";

/// The error of a file whose policy `api` has `line` added.
fn refused(line: &str) -> (FileError, String) {
    let error = PolicyFile::parse_built("p.toml", &format!("{HEAD}{line}\n")).unwrap_err();
    let text = error.to_string();
    (error, text)
}

#[test]
fn bad_expressions_are_refused_with_the_policy_and_the_place() {
    let (error, text) = refused("when = 'descriptors[0][\"a\"] =='");
    let FileError::Policy {
        at, name, problem, ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(name, "api");
    assert_eq!(*at, Some(Position { line: 5, column: 8 }));
    assert_eq!(problem.field.as_deref(), Some("when"));
    assert!(
        text.starts_with("p.toml:5:8: policy \"api\": `when`: couldn't parse"),
        "{text}"
    );

    let (_, text) = refused(&format!("key = '\"{}\"'", "a".repeat(5000)));
    assert!(
        text.contains("`key`: couldn't parse") && text.contains("longer than 4096 bytes"),
        "{text}"
    );
    let deep = format!("when = '{}true{}'", "(".repeat(40), ")".repeat(40));
    assert!(refused(&deep).1.contains("nested deeper than 32"));
    let (_, text) = refused("when = 'user == \"ann\"'");
    assert!(
        text.contains("names something other than `descriptors` and `policy`"),
        "{text}"
    );
    let loops = "when = 'descriptors.all(a, descriptors.all(b, descriptors.all(c, true)))'";
    assert!(refused(loops).1.contains("comprehensions nested deeper"));
}

#[test]
fn leases_and_composite_members_take_no_expressions() {
    let lease = "[policies.l]\nalgorithm = \"concurrency\"\nlimit = 1\nlease = \"1s\"\nkey = 'descriptors[0][\"u\"]'\n";
    let text = PolicyFile::parse_built("p.toml", lease)
        .unwrap_err()
        .to_string();
    assert!(text.contains("concurrency takes no `key`"), "{text}");
    let composite = "[policies.c]\nalgorithm = \"composite\"\n[[policies.c.limits]]\nalgorithm = \"fixed-window\"\nlimit = 1\nperiod = \"1s\"\nwhen = 'true'\n";
    let text = PolicyFile::parse_built("p.toml", composite)
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("no composite, concurrency, ban, on_full, shadow, when, key"),
        "{text}"
    );
    // On the composite itself they are taken.
    let whole = "[policies.c]\nalgorithm = \"composite\"\nwhen = 'true'\n[[policies.c.limits]]\nalgorithm = \"fixed-window\"\nlimit = 1\nperiod = \"1s\"\n";
    PolicyFile::parse_built("p.toml", whole).unwrap();
}

#[test]
fn a_valid_file_compiles_once_and_selects() {
    let text = format!(
        "{HEAD}when = 'descriptors[0][\"tier\"] == \"free\"'\nkey = 'policy.name + \":\" + descriptors[0][\"user\"]'\n"
    );
    let file = PolicyFile::parse_built("p.toml", &text).unwrap();
    let (_, selector) = file.policies["api"]
        .build_selected(sluicegate_policy::Style::File)
        .unwrap();
    let selector = selector.expect("a selector");
    let mut free = Bindings::new([vec![("tier", "free"), ("user", "ann")]]);
    let key = selector.select("api", "ignored", &mut free).unwrap();
    assert_eq!(key.as_deref(), Some("api:ann"));
    let mut paid = Bindings::new([vec![("tier", "paid"), ("user", "ann")]]);
    assert_eq!(selector.select("api", "ignored", &mut paid).unwrap(), None);
}
