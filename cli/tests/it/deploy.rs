//! The Kubernetes manifests (deploy/kubernetes) against the binary they run: every flag
//! and `SLUICEGATE_*` variable the Deployment and its overlays pass is one `sluicegate
//! serve` accepts, with its value, and the ConfigMap's Envoy YAML is valid. The manifests
//! are read as written, by the few YAML shapes they use (block sequences and scalars).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::common::{assert_exit, bin, sluicegate, stderr, stdout};

/// Every manifest: the base's and each overlay's YAML files.
fn manifests() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, found: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).unwrap();
                found.push((path, text));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes");
    let mut found = Vec::new();
    walk(&root, &mut found);
    found.sort();
    found
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// A scalar as YAML writes it plain or quoted.
fn scalar(text: &str) -> String {
    let text = text.trim();
    let quoted = text.len() >= 2
        && (text.starts_with('"') && text.ends_with('"')
            || text.starts_with('\'') && text.ends_with('\''));
    match quoted {
        true => text[1..text.len() - 1].to_owned(),
        false => text.to_owned(),
    }
}

/// The lines after `lines[at]` that belong to it (indented deeper, blank or comments).
fn block<'a>(lines: &[&'a str], at: usize) -> Vec<&'a str> {
    let depth = indent(lines[at]);
    lines[at + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || indent(l) > depth)
        .copied()
        .collect()
}

/// Each container's `args:` list, in order.
fn args(text: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut lists = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        if line.trim() != "args:" {
            continue;
        }
        // A block sequence may sit at its key's indentation, so read on from the key.
        let items = lines[at + 1..]
            .iter()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .take_while(|l| indent(l) >= indent(line) && l.trim_start().starts_with("- "));
        lists.push(items.map(|l| scalar(&l.trim_start()[2..])).collect());
    }
    lists
}

/// Each `SLUICEGATE_*` variable set in `text`, with its value when it is written there
/// (not when it comes from a Secret).
fn variables(text: &str) -> Vec<(String, Option<String>)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = line.trim_start().strip_prefix("- name: ").map(scalar) else {
            continue;
        };
        if !name.starts_with("SLUICEGATE_") {
            continue;
        }
        let value = block(&lines, at)
            .iter()
            .find_map(|l| l.trim_start().strip_prefix("value: ").map(scalar));
        found.push((name, value));
    }
    found
}

/// The flag a `SLUICEGATE_*` variable stands for, as `serve --help` pairs them.
fn flag_of(variable: &str) -> String {
    let name = &variable["SLUICEGATE_".len()..];
    format!("--{}", name.to_lowercase().replace('_', "-"))
}

/// `sluicegate serve ARGS --help`: clap parses every flag and value before it answers
/// the help, so exit 0 means all were accepted.
fn serve_accepts(args: &[String]) -> std::process::Output {
    let mut command = bin();
    for (name, _) in std::env::vars() {
        if name.starts_with("SLUICEGATE_") {
            command.env_remove(name);
        }
    }
    command
        .arg("serve")
        .args(args)
        .arg("--help")
        .output()
        .unwrap()
}

#[test]
fn every_flag_and_variable_of_the_manifests_is_one_serve_accepts() {
    let manifests = manifests();
    let lists: Vec<Vec<String>> = manifests.iter().flat_map(|(_, t)| args(t)).collect();
    assert_eq!(lists.len(), 1, "one container with arguments: {lists:?}");
    let args = &lists[0];
    assert_eq!(
        args.first().map(String::as_str),
        Some("serve"),
        "the container runs `serve`: {args:?}"
    );
    let variables: Vec<_> = manifests.iter().flat_map(|(_, t)| variables(t)).collect();
    // The overlay's backends: a shared decision store and a shared policy store.
    for wanted in ["SLUICEGATE_DECISIONS", "SLUICEGATE_STORE"] {
        assert!(
            variables.iter().any(|(name, _)| name == wanted),
            "{wanted} is set: {variables:?}"
        );
    }

    // The check itself: a flag serve does not have is refused despite --help.
    assert_exit(&serve_accepts(&["--no-such-flag".into()]), 2);
    assert_exit(&serve_accepts(&["--max-keys".into(), "many".into()]), 2);

    let help = stdout(&sluicegate(["serve", "--help"]));
    let mut given = args[1..].to_vec();
    for (name, value) in &variables {
        assert!(
            help.contains(&format!("[env: {name}]")),
            "`serve --help` names no variable {name}"
        );
        // A value written in the manifest is checked as its flag's value.
        match value.as_deref() {
            Some("false") => {}
            Some("true") => given.push(flag_of(name)),
            Some(value) => given.extend([flag_of(name), value.to_owned()]),
            None => {}
        }
    }
    let answer = serve_accepts(&given);
    assert!(
        answer.status.success(),
        "serve refuses the manifests' {given:?}: {}",
        stderr(&answer)
    );
}

/// The text of each `NAME.yaml: |` block scalar of a ConfigMap's `data`.
fn data_files(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut files = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = line.trim().strip_suffix(": |") else {
            continue;
        };
        let body = block(&lines, at);
        let depth = body
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| indent(l))
            .min()
            .unwrap_or(0);
        let text: Vec<&str> = body.iter().map(|l| l.get(depth..).unwrap_or("")).collect();
        files.push((name.to_owned(), text.join("\n") + "\n"));
    }
    files
}

#[test]
fn the_config_map_holds_valid_envoy_yaml_where_the_deployment_reads_it() {
    let manifests = manifests();
    let (_, config_map) = manifests
        .iter()
        .find(|(_, t)| t.contains("kind: ConfigMap"))
        .expect("a ConfigMap");
    let files = data_files(config_map);
    assert!(!files.is_empty(), "the ConfigMap holds Envoy's YAML");
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let checked = sluicegate([
        OsStr::new("policy"),
        OsStr::new("validate"),
        dir.path().as_os_str(),
    ]);
    assert_exit(&checked, 0);

    let (_, deployment) = manifests
        .iter()
        .find(|(_, t)| t.contains("kind: Deployment") && t.contains("args:"))
        .expect("the Deployment");
    let args = &args(deployment)[0];
    let at = args.iter().position(|a| a == "--envoy-config");
    let path = at
        .and_then(|at| args.get(at + 1))
        .expect("--envoy-config DIR");
    assert!(
        deployment.contains(&format!("mountPath: {path}\n")),
        "the ConfigMap is mounted at --envoy-config's {path}"
    );
}
