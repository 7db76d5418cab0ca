use super::{Bindings, Config, LimitadorError};

/// The limits limitador-server's README says its example file holds.
const README: &str = r#"
---
- namespace: example.org
  max_value: 10
  seconds: 60
  conditions:
    - "descriptors[0]['req.method'] == 'GET'"
  variables:
    - descriptors[0].user_id
- namespace: example.org
  max_value: 5
  seconds: 60
  conditions:
    - "descriptors[0]['req.method'] == 'POST'"
  variables:
    - descriptors[0].user_id
"#;

fn refused(text: &str) -> String {
    match Config::parse("limits.yaml", text) {
        Err(e @ LimitadorError::Invalid { .. }) => e.to_string(),
        other => panic!("refused, not {other:?}"),
    }
}

#[test]
fn the_limits_their_readme_describes() {
    let config = Config::parse("limits.yaml", README).unwrap();
    let ns = config.namespace("example.org").unwrap();
    assert_eq!(ns.limits.len(), 2);
    let mut get = Bindings::new([vec![("req.method", "GET"), ("user_id", "alice")]]);
    let applying = ns.applying(&mut get).unwrap();
    assert_eq!(applying.len(), 1);
    let (i, values) = &applying[0];
    assert_eq!(ns.limits[*i].max_value, 10);
    assert_eq!(values[0].0, "descriptors[0].user_id");
    assert_eq!(values[0].1, "alice");
    // No user: the variable's key is missing, the limit is skipped.
    let mut anonymous = Bindings::new([vec![("req.method", "GET")]]);
    assert!(ns.applying(&mut anonymous).unwrap().is_empty());
}

#[test]
fn defaults_identity_and_unknown_fields() {
    let config = Config::parse(
        "limits.yaml",
        r#"
- namespace: ns
  seconds: 10
  conditions: []
  variables: []
  whatever: ignored
- namespace: ns
  max_value: 7
  name: second
  seconds: 10
  conditions: []
  variables: []
"#,
    )
    .unwrap();
    let ns = config.namespace("ns").unwrap();
    // Same identity: the first wins, with its max_value of 0 (the default).
    assert_eq!(ns.limits.len(), 1);
    assert_eq!(
        (ns.limits[0].max_value, ns.limits[0].name.as_deref()),
        (0, None)
    );
}

#[test]
fn refusals_name_the_place_in_their_words() {
    let no_conditions = "- namespace: ns\n  seconds: 1\n  variables: []\n";
    assert_eq!(
        refused(no_conditions),
        "limits.yaml:1:3: [0]: missing field `conditions`"
    );
    let null = "- namespace: ns\n  seconds: 1\n  conditions: ~\n  variables: []\n";
    assert_eq!(
        refused(null),
        "limits.yaml:3:15: [0]: invalid type: unit value, expected a sequence"
    );
    let bad_cel = "- namespace: ns\n  seconds: 1\n  conditions: ['1 +']\n  variables: []\n";
    assert!(refused(bad_cel).starts_with("limits.yaml:3:16: [0]: couldn't parse 1 +"));
    let zero = "- namespace: ns\n  seconds: 0\n  conditions: []\n  variables: []\n";
    assert!(refused(zero).contains("seconds: 0 is outside"));
    assert!(refused("namespace: ns").contains("expected a sequence"));
}

#[test]
fn apps_of_a_namespace() {
    let config = Config::parse(
        "limits.yaml",
        "- {namespace: a, seconds: 1, conditions: [], variables: [], sluicegate_apps: [edge]}\n\
         - {namespace: b, seconds: 1, conditions: [], variables: []}\n",
    )
    .unwrap();
    assert!(config.namespace("a").unwrap().admits_app("edge"));
    assert!(!config.namespace("a").unwrap().admits_app("other"));
    assert!(config.namespace("b").unwrap().admits_app("other"));
}

#[test]
fn an_empty_value_is_an_empty_list_as_serde_yaml_reads_it() {
    let empty = "- namespace: ns\n  seconds: 1\n  conditions:\n  variables:\n";
    let config = Config::parse("limits.yaml", empty).unwrap();
    let ns = config.namespace("ns").unwrap();
    assert!(ns.limits[0].conditions.is_empty() && ns.limits[0].variables.is_empty());
    let quoted = "- namespace: ns\n  seconds: 1\n  conditions: ''\n  variables: []\n";
    assert!(refused(quoted).contains("expected a sequence"));
}
