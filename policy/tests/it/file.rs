//! A policy file's errors are typed: which file, where in it, which policy, what.

use sluicegate_policy::{load, FileError, PolicyFile, Position};

/// The line a syntax error points at, if it is one.
fn syntax_line(error: &FileError) -> Option<usize> {
    match error {
        FileError::Syntax { at, .. } => at.as_ref().map(|at| at.line),
        _ => None,
    }
}

#[test]
fn errors_name_the_file_the_place_and_the_policy() {
    let text = "[policies.p]\nalgorithm = \"fixed-window\"\nlimit = 0\nperiod = \"1s\"\n";
    let error = PolicyFile::parse_built("p.toml", text).unwrap_err();
    let FileError::Policy {
        path,
        at,
        name,
        problem,
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!((path.as_str(), name.as_str()), ("p.toml", "p"));
    assert_eq!(*at, Some(Position { line: 3, column: 9 }));
    assert_eq!(problem.field.as_deref(), Some("limit"));
    assert!(error
        .to_string()
        .starts_with("p.toml:3:9: policy \"p\": `limit` must be"));

    let error = PolicyFile::parse("p.toml", "[policies.p]\nalgorithm = 5\n").unwrap_err();
    assert_eq!(syntax_line(&error), Some(2), "{error:?}");

    let error = load("/nonexistent/p.toml", "p").unwrap_err();
    assert!(matches!(&error, FileError::Read { .. }), "{error:?}");
    assert!(error
        .to_string()
        .starts_with("cannot read /nonexistent/p.toml: "));
}

#[test]
fn a_missing_policy_lists_the_names_there_are() {
    let dir = std::env::temp_dir().join(format!("sluicegate-policy-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.toml");
    let text = "[policies.a]\nalgorithm = \"fixed-window\"\nlimit = 1\nperiod = \"1s\"\n";
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    let error = load(path, "b").unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        matches!(&error, FileError::NoPolicy { name, known, .. } if name == "b" && known == &["a"]),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!("{path}: no policy \"b\" (it has: a)")
    );
}

#[test]
fn a_fleet_mode_is_checked_with_the_file() {
    let text = "[policies.p]\nalgorithm = \"fixed-window\"\nlimit = 5\nperiod = \"1s\"\nfleet = { mode = \"fast\" }\n";
    let error = PolicyFile::parse("p.toml", text).unwrap_err();
    assert_eq!(syntax_line(&error), Some(5), "{error:?}");
    assert!(error.to_string().contains("`fast`"), "{error}");
    let text = text.replace("fast", "split");
    let file = PolicyFile::parse("p.toml", &text).unwrap();
    let fleet = file.policies["p"].fleet.as_ref().unwrap();
    assert_eq!(fleet.mode, Some(sluicegate_core::FleetMode::Split));
}
