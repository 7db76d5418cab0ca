//! What a lease call on etcd can fail with.

use sluicegate_core::{KeyDisplay, LeaseError};

/// Why a lease call on etcd did not complete.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No endpoint answered within the timeout (or the connection broke).
    #[error("etcd is unavailable: {0}")]
    Unavailable(#[source] etcd_client::Error),
    /// etcd answered with an error.
    #[error("etcd: {0}")]
    Etcd(#[source] etcd_client::Error),
    /// The lease call itself was refused (a bad owner or ttl, not held, too many holds).
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// A request carried its own time: etcd's leases expire on the server's clock, so a
    /// lease cannot be acquired or renewed "as of" another instant.
    #[error("etcd leases expire on the server's clock; a request cannot carry its own time")]
    ExplicitTime,
    /// A slot key holds bytes sluicegate did not write. Nothing was granted and the key
    /// is unchanged.
    #[error("key {} holds a value sluicegate cannot read: {reason}", KeyDisplay(.key))]
    Corrupt {
        /// The etcd key.
        key: Vec<u8>,
        /// What is wrong with it.
        reason: String,
    },
    /// The key changed under every one of a bounded number of attempts (calls by the
    /// same owner racing each other).
    #[error("the lease changed under every attempt; try again")]
    Contended,
    /// A blocking acquire was cancelled; its place in line was given up.
    #[error("the wait for the lock was cancelled")]
    Cancelled,
    /// The endpoint list is not `etcd://HOST:PORT[,HOST:PORT…]`.
    #[error("bad etcd URL {url:?}: {reason}")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl From<etcd_client::Error> for Error {
    fn from(e: etcd_client::Error) -> Self {
        use etcd_client::Error as E;
        use tonic::Code;
        let unreachable = match &e {
            E::TransportError(_) | E::IoError(_) => true,
            E::GRpcStatus(status) => matches!(
                status.code(),
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
            ),
            _ => false,
        };
        if unreachable {
            Self::Unavailable(e)
        } else {
            Self::Etcd(e)
        }
    }
}
