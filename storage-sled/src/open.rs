//! Opening a database, with typed errors for what a user meets.

use std::path::Path;

use crate::error::Error;

/// Whether [`open`] may create a database that does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Create {
    /// Never: a missing database is [`Error::NotFound`], and nothing is created (for
    /// commands that only read).
    Never,
    /// Create the database's directory if its parent directory exists, else
    /// [`Error::NoParentDir`] (a mistyped path is not silently created).
    InExistingDir,
}

/// Opens the sled database at `path`, with typed errors for what a user meets: the
/// database in use by another process ([`Error::InUse`]), no database there
/// ([`Error::NotFound`], with [`Create::Never`]), or a missing parent directory
/// ([`Error::NoParentDir`]).
pub fn open(path: &Path, create: Create) -> Result<sled::Db, Error> {
    open_with(sled::Config::new().path(path), create)
}

/// [`open`] with sled's other settings from `config` (its path included).
pub fn open_with(config: sled::Config, create: Create) -> Result<sled::Db, Error> {
    let path = config.path.clone();
    // sled keeps its settings in `conf` beside its data: a database has one.
    if !path.join("conf").is_file() {
        match create {
            Create::Never => return Err(Error::NotFound { path }),
            Create::InExistingDir => {
                let parent = match path.parent() {
                    Some(p) if p.as_os_str().is_empty() => Path::new("."),
                    Some(p) => p,
                    None => Path::new("/"),
                };
                if !parent.is_dir() {
                    let parent = parent.to_path_buf();
                    return Err(Error::NoParentDir { path, parent });
                }
            }
        }
    }
    config.open().map_err(|e| match e {
        // sled 0.34 reports its file lock held elsewhere only as this text.
        sled::Error::Io(io) if io.to_string().starts_with("could not acquire lock") => {
            Error::InUse { path }
        }
        e => Error::Storage(e),
    })
}
