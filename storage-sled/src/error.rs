//! What can go wrong over sled.

use std::path::PathBuf;

use sluicegate_core::{DecodeError, KeyDisplay, ParamError};

/// What can go wrong deciding over sled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// sled failed: I/O, a corrupt database file, or the database being closed.
    #[error("sled: {0}")]
    Storage(#[from] sled::Error),
    /// A record holds bytes no state of this algorithm encodes (written by something
    /// else, or by a limiter with other parameters). The record is left as it is. The
    /// message is worded as the Redis host's, the key shown by [`KeyDisplay`] and the
    /// reason by the core's decoder, so every host says the same of the same bytes.
    #[error("key {} holds a state sluicegate cannot read: {source}", KeyDisplay(.key))]
    Corrupt {
        /// The key as given (without the prefix).
        key: Vec<u8>,
        /// Why the bytes were refused.
        source: DecodeError,
    },
    /// A time given by the caller is beyond [`MAX_TICKS`](https://docs.rs/sluicegate-core/0.1/sluicegate_core/constant.MAX_TICKS.html)
    /// (see [`check_now`](https://docs.rs/sluicegate-core/0.1/sluicegate_core/fn.check_now.html)): nothing was decided.
    #[error("{0}")]
    Time(ParamError),
    /// A lease call that cannot be carried out (bad owner or ttl, a lease not held by
    /// that owner): nothing was changed.
    #[error("{0}")]
    Lease(#[from] sluicegate_core::LeaseError),
    /// Another process has the database open: sled allows one process at a time.
    #[error("the sled database at {} is in use by another process (sled allows one process at a time)", .path.display())]
    InUse {
        /// The database's directory.
        path: PathBuf,
    },
    /// The crate's `open` was asked not to create a database, and there is none at the path.
    #[error("no sled database at {}", .path.display())]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The crate's `open` was asked to create a database where the parent directory is missing.
    #[error("cannot create a sled database at {}: the directory {} does not exist", .path.display(), .parent.display())]
    NoParentDir {
        /// The path given.
        path: PathBuf,
        /// Its parent directory, which does not exist.
        parent: PathBuf,
    },
}

/// The error of a record under `key` that does not decode.
pub(crate) fn corrupt(key: &[u8], source: DecodeError) -> Error {
    Error::Corrupt {
        key: key.to_vec(),
        source,
    }
}
