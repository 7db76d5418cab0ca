//! `sluicegate_sled::open` against real directories and a real second process.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use sluicegate_sled::{open, Create, Error};

/// Set in the child process: the database it holds open until its stdin closes.
const HOLD: &str = "SLUICEGATE_SLED_HOLD";

/// Run as a child (by [`a_database_open_in_another_process_is_in_use`]): opens the
/// database, says so, and keeps it open until the parent closes stdin.
#[test]
fn hold_open_in_child() {
    let Some(path) = std::env::var_os(HOLD) else {
        return;
    };
    let _db = open(Path::new(&path), Create::InExistingDir).unwrap();
    // libtest may print the test's name on the same line first.
    println!("open");
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_line(&mut String::new());
}

#[test]
fn a_database_open_in_another_process_is_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "open::hold_open_in_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLD, &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().ends_with("open")),
        "the child opened the database"
    );
    let err = open(&path, Create::Never).unwrap_err();
    assert!(
        matches!(&err, Error::InUse { path: p } if *p == path),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the sled database at {} is in use by another process (sled allows one process at a time)",
            path.display()
        )
    );
    // Once the other process is gone, it opens.
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    open(&path, Create::Never).unwrap();
}

#[test]
fn never_creates_a_missing_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing");
    let err = open(&path, Create::Never).unwrap_err();
    assert!(matches!(&err, Error::NotFound { path: p } if *p == path));
    assert_eq!(
        err.to_string(),
        format!("no sled database at {}", path.display())
    );
    assert!(!path.exists(), "nothing is created");
    // An existing directory that holds no database is not one either.
    let err = open(dir.path(), Create::Never).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn creates_only_where_the_parent_directory_exists() {
    let dir = tempfile::tempdir().unwrap();
    let mistyped = dir.path().join("nonexistent").join("dir").join("db");
    let err = open(&mistyped, Create::InExistingDir).unwrap_err();
    assert!(
        matches!(&err, Error::NoParentDir { path, parent } if *path == mistyped && *parent == dir.path().join("nonexistent/dir"))
    );
    assert!(
        !dir.path().join("nonexistent").exists(),
        "nothing is created"
    );
    let path = dir.path().join("db");
    {
        let db = open(&path, Create::InExistingDir).unwrap();
        db.insert(b"k", b"v".as_slice()).unwrap();
        db.flush().unwrap();
    }
    // Created once, it is found without creating (once sled's background thread has let
    // go of the lock of the database just dropped: a moment later, under load).
    let deadline = Instant::now() + Duration::from_secs(5);
    let db = loop {
        match open(&path, Create::Never) {
            Err(Error::InUse { .. }) if Instant::now() < deadline => {
                sleep(Duration::from_millis(10))
            }
            reopened => break reopened.unwrap(),
        }
    };
    assert_eq!(db.get(b"k").unwrap().unwrap().as_ref(), b"v");
}
