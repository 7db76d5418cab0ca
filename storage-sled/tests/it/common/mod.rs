//! What the sled tests share: a fresh database in a temporary directory.

/// A tree named `name` in a fresh database; the directory goes when the first is dropped.
pub fn temp_tree(name: &str) -> (tempfile::TempDir, sled::Db, sled::Tree) {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::Config::new().path(dir.path()).open().unwrap();
    let tree = db.open_tree(name).unwrap();
    (dir, db, tree)
}
