//! The canonical state encoding: a version byte, an algorithm tag, then fixed-width
//! big-endian fields. The same bytes in every host.

use crate::DecodeError;

/// The encoding version every state starts with.
pub(crate) const VERSION: u8 = 1;

/// Algorithm tags, the second byte of every encoded state.
pub(crate) mod tag {
    pub(crate) const FIXED_WINDOW: u8 = 1;
    #[cfg(feature = "alloc")]
    pub(crate) const SLIDING_LOG: u8 = 2;
    pub(crate) const SLIDING_COUNTER: u8 = 3;
    pub(crate) const TOKEN_BUCKET: u8 = 4;
    pub(crate) const LEAKY_BUCKET: u8 = 5;
    pub(crate) const PACING: u8 = 6;
    pub(crate) const BAN: u8 = 7;
    #[cfg(feature = "alloc")]
    pub(crate) const COMPOSITE: u8 = 8;
    #[cfg(feature = "alloc")]
    pub(crate) const LEASES: u8 = 9;
    pub(crate) const CALENDAR_WINDOW: u8 = 10;
    pub(crate) const ANCHORED_WINDOW: u8 = 11;
    #[cfg(feature = "alloc")]
    pub(crate) const RW_LOCK: u8 = 12;

    /// The algorithm a tag stands for, as messages name it.
    pub(crate) fn name(tag: u8) -> Option<&'static str> {
        Some(match tag {
            1 => "fixed window",
            2 => "sliding log",
            3 => "sliding window counter",
            4 => "token bucket",
            5 => "leaky bucket",
            6 => "pacing queue",
            7 => "ban",
            8 => "composite limit",
            9 => "lease table",
            10 => "calendar window",
            11 => "anchored window",
            12 => "read-write lock",
            _ => return None,
        })
    }
}

/// Writes the header and then `fields` as big-endian u64s.
pub(crate) fn write<E: Extend<u8>>(out: &mut E, tag: u8, fields: &[u64]) {
    out.extend([VERSION, tag]);
    for field in fields {
        out.extend(field.to_be_bytes());
    }
}

/// Reads an encoded state front to back; every read is bounds-checked.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Checks the version and the tag.
    pub(crate) fn new(bytes: &'a [u8], tag: u8) -> Result<Self, DecodeError> {
        let mut reader = Self { bytes, pos: 0 };
        let version = reader.u8()?;
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let found = reader.u8()?;
        if found != tag {
            return Err(DecodeError::WrongAlgorithm {
                expected: tag,
                found,
            });
        }
        Ok(reader)
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(DecodeError::Truncated {
                len: self.bytes.len(),
            })?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut buf = [0; 8];
        buf.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(buf))
    }

    /// A u64 that must satisfy `valid`, else [`DecodeError::InvalidField`]. (A trait
    /// object, not a generic: one copy of this code serves every field.)
    pub(crate) fn u64_where(
        &mut self,
        field: &'static str,
        valid: &dyn Fn(u64) -> bool,
    ) -> Result<u64, DecodeError> {
        let value = self.u64()?;
        if valid(value) {
            Ok(value)
        } else {
            Err(DecodeError::InvalidField { field })
        }
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let rest = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        rest
    }

    /// Fails if any byte is left unread.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        match self.bytes.len() - self.pos {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes { extra }),
        }
    }
}
