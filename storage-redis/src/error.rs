use redis::RedisError;

/// What can go wrong deciding through Redis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached, or did not answer within the timeout.
    #[error("redis is unavailable: {0}")]
    Unavailable(#[source] RedisError),
    /// Redis answered with an error.
    #[error("redis: {0}")]
    Redis(#[source] RedisError),
    /// The key holds bytes that are not a state of this algorithm (or a state outside the
    /// scripts' range). Nothing was admitted and the key is unchanged.
    #[error("key {key:?} holds a state tollgate cannot read: {reason}", key = String::from_utf8_lossy(.key))]
    Corrupt {
        /// The caller's key.
        key: Vec<u8>,
        /// What is wrong with it.
        reason: String,
    },
    /// A parameter or input outside the range the scripts compute exactly.
    #[error("{what} is {value}, beyond {max}, the most the Redis scripts compute exactly")]
    OutOfRange {
        /// The parameter or input.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The most allowed.
        max: u64,
    },
    /// A composite's members share a hash tag made of the key, so it cannot be empty.
    #[error("a composite limit needs a non-empty key")]
    EmptyKey,
    /// The script's reply had an unexpected shape.
    #[error("unexpected reply from the script")]
    Reply,
}

impl Error {
    /// Classifies an error from Redis about `key`.
    pub(crate) fn from_redis(error: RedisError, key: &[u8]) -> Self {
        if error.code() == Some("TOLLGATE") {
            let detail = error.detail().unwrap_or_default();
            if let Some(reason) = detail.strip_prefix("corrupt state: ") {
                // Redis appends the script's location after the message.
                let reason = reason.split(" script:").next().unwrap_or(reason);
                return Self::Corrupt {
                    key: key.to_vec(),
                    reason: reason.to_owned(),
                };
            }
        }
        if error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.kind() == redis::ErrorKind::ClusterConnectionNotFound
        {
            Self::Unavailable(error)
        } else {
            Self::Redis(error)
        }
    }
}
