//! Starting a store: the first admin's name is checked as any user's, and the embedded
//! store's files are for the server's user only.

use tollgate_server::{init_admin, Config, Error};

#[tokio::test]
async fn the_first_admin_name_is_checked_as_any_user_name() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = Config {
        data_dir: dir.path().join("data"),
        ..Config::default()
    };
    for bad in ["", "two\nlines", "a b", &"x".repeat(300)] {
        let refused = init_admin(&config, bad).await;
        assert!(
            matches!(refused, Err(Error::AdminName(_))),
            "{bad:?}: {refused:?}"
        );
    }
    init_admin(&config, "root").await.expect("a valid name");
}

#[cfg(unix)]
#[tokio::test]
async fn the_embedded_store_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temporary directory");
    let data = dir.path().join("data");
    let config = Config {
        data_dir: data.clone(),
        ..Config::default()
    };
    init_admin(&config, "root").await.expect("first admin");
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("tollgate.db")), 0o600);
}
