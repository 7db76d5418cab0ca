//! Why a command failed: one type whose variants map to the exit codes in `main`.

/// Why a command failed, and its exit code.
// Backend failures, lock and lease answers come from the backends not built in.
#[cfg_attr(not(all(feature = "sled", feature = "redis")), allow(dead_code))]
#[derive(Debug)]
pub enum Failure {
    Input(String),
    NoPolicyForApp(String),
    Backend(String),
    /// Standard output or an output file could not be written (a full disk, a closed
    /// pipe): not bad input, so a code of its own.
    Output(String),
    /// A lock or lease held by others (`acquire`), or not held by the owner (`release`,
    /// `renew`): a shell script's "no", exit 1.
    Refused(String),
    /// The owner holds no lease on the key (`release`, `renew`): the caller names both.
    NotHeld,
    /// A sled database in use by another process.
    InUse(String),
    /// TLS refused: the server's certificate is not signed by a trusted CA (`--redis-ca`
    /// or the system's roots) or names another host. Retrying does not help, so not 4.
    Tls(String),
    /// Standard output is a pipe whose reader has gone (`sluicegate ... | head`): exit 5
    /// without a message, as the reader asked for no more.
    ClosedPipe,
}

impl Failure {
    /// Its exit code, and its message (none for a closed pipe).
    pub fn exit(self) -> (u8, Option<String>) {
        let (code, message) = match self {
            Self::Input(m) => (2, m),
            Self::NoPolicyForApp(m) => (3, m),
            Self::Refused(m) => (1, m),
            Self::NotHeld => (1, "the owner holds no lease on this key".into()),
            Self::Backend(m) | Self::InUse(m) => (4, m),
            Self::Output(m) => (5, m),
            Self::Tls(m) => (6, m),
            Self::ClosedPipe => return (5, None),
        };
        (code, Some(message))
    }
}

/// A policy file that cannot be read or is not valid: bad input.
impl From<sluicegate_policy::FileError> for Failure {
    fn from(e: sluicegate_policy::FileError) -> Self {
        Self::Input(e.to_string())
    }
}

/// Every write of every command goes through this: one message, one exit code.
pub fn output(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::ClosedPipe
    } else {
        Failure::Output(format!("cannot write the output: {e}"))
    }
}
