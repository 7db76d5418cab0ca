//! The Redis keys of a caller's key: the prefix and the key, or for each member `i` of a
//! composite `prefix{key}:i`, the key as the hash tag that keeps the members on one
//! Cluster node. Written straight into a command's buffer.

use std::io::Write;

use crate::error::Error;

/// One Redis key of a caller's key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedisKey<'a> {
    prefix: &'a [u8],
    key: &'a [u8],
    /// The composite member, if the key is one.
    member: Option<usize>,
}

impl<'a> RedisKey<'a> {
    /// The prefix, then the caller's key.
    pub(crate) fn new(prefix: &'a [u8], key: &'a [u8]) -> Self {
        Self {
            prefix,
            key,
            member: None,
        }
    }

    /// The Redis keys holding the state of `key` for an algorithm of `members` keys:
    /// [`RedisKey::new`]'s one, or one per member. An empty key has no members: an
    /// empty hash tag would hash each member's whole name, scattering them.
    pub(crate) fn all(
        prefix: &'a [u8],
        key: &'a [u8],
        members: usize,
    ) -> Result<impl Iterator<Item = Self> + 'a, Error> {
        if members > 1 && key.is_empty() {
            return Err(Error::EmptyKey);
        }
        Ok((0..members).map(move |i| Self {
            prefix,
            key,
            member: (members > 1).then_some(i),
        }))
    }

    /// The key's bytes.
    pub(crate) fn to_vec(self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.prefix.len() + self.key.len() + 8);
        // Writing into a vector cannot fail.
        let _ = self.write(&mut bytes);
        bytes
    }

    fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        out.write_all(self.prefix)?;
        match self.member {
            None => out.write_all(self.key),
            Some(i) => {
                out.write_all(b"{")?;
                out.write_all(self.key)?;
                write!(out, "}}:{i}")
            }
        }
    }
}

impl redis::ToRedisArgs for RedisKey<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        // Writes into the command's buffer, which cannot fail.
        let _ = self.write(&mut out.writer_for_next_arg());
    }
}

impl redis::ToSingleRedisArg for RedisKey<'_> {}
