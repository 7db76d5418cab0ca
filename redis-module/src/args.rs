//! A command's arguments, read front to back; every malformed input is an [`ArgError`].

use sluicegate_core::clock::check_now;
use sluicegate_core::ParamError;

/// Arguments a command cannot use. Replied as an error; nothing is read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ArgError {
    /// Missing, extra or unknown words, or a number that is not one.
    Syntax(String),
    /// A parameter outside the core's range, in the core's words.
    Param(ParamError),
}

impl From<ParamError> for ArgError {
    fn from(e: ParamError) -> Self {
        Self::Param(e)
    }
}

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Syntax(what) => f.write_str(what),
            Self::Param(e) => write!(f, "{e}"),
        }
    }
}

/// A cursor over a command's arguments.
#[derive(Debug)]
pub(crate) struct Args<'a> {
    args: &'a [&'a [u8]],
    pos: usize,
}

impl<'a> Args<'a> {
    /// The arguments after the command's name.
    pub(crate) fn new(args: &'a [&'a [u8]]) -> Self {
        Self { args, pos: 0 }
    }

    /// Whether every argument has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.args.len()
    }

    /// The next argument, whatever it holds (a key, an owner).
    pub(crate) fn bytes(&mut self, what: &str) -> Result<&'a [u8], ArgError> {
        let arg = self
            .args
            .get(self.pos)
            .ok_or_else(|| ArgError::Syntax(format!("missing {what}")))?;
        self.pos += 1;
        Ok(arg)
    }

    /// The next `n` arguments, in place (the keys of a `numkeys key...` command).
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [&'a [u8]], ArgError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.args.len());
        let end = end.ok_or_else(|| ArgError::Syntax(format!("missing {what}")))?;
        let taken = &self.args[self.pos..end];
        self.pos = end;
        Ok(taken)
    }

    /// Which of `words` (any case) the next argument is; read without allocating, as
    /// every decision parses its algorithm.
    pub(crate) fn one_of(&mut self, what: &str, words: &[&str]) -> Result<usize, ArgError> {
        let arg = self.bytes(what)?;
        words
            .iter()
            .position(|w| w.as_bytes().eq_ignore_ascii_case(arg))
            .ok_or_else(|| {
                ArgError::Syntax(format!(
                    "unexpected '{}' (expected {what}: {})",
                    String::from_utf8_lossy(arg),
                    words.join(", ")
                ))
            })
    }

    /// The next argument as a decimal `u64`.
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, ArgError> {
        let arg = self.bytes(what)?;
        parse_u64(arg).ok_or_else(|| {
            ArgError::Syntax(format!(
                "{what} must be an integer from 0 to {}, got '{}'",
                u64::MAX,
                String::from_utf8_lossy(arg)
            ))
        })
    }

    /// The next argument as a decimal `i64`, with an optional leading `-`.
    pub(crate) fn i64(&mut self, what: &str) -> Result<i64, ArgError> {
        let arg = self.bytes(what)?;
        let value = match arg.strip_prefix(b"-") {
            Some(digits) => parse_u64(digits).and_then(|n| 0i64.checked_sub_unsigned(n)),
            None => parse_u64(arg).and_then(|n| i64::try_from(n).ok()),
        };
        value.ok_or_else(|| {
            ArgError::Syntax(format!(
                "{what} must be an integer from {} to {}, got '{}'",
                i64::MIN,
                i64::MAX,
                String::from_utf8_lossy(arg)
            ))
        })
    }

    /// Skips the next argument if it is `word` (any case).
    pub(crate) fn eat(&mut self, word: &str) -> bool {
        let next = self.args.get(self.pos);
        let found = next.is_some_and(|arg| arg.eq_ignore_ascii_case(word.as_bytes()));
        if found {
            self.pos += 1;
        }
        found
    }

    /// Reads the trailing options: each of `names` at most once, followed by its value.
    /// `NOW` is checked against the core's range.
    pub(crate) fn options<const N: usize>(
        &mut self,
        names: [&str; N],
    ) -> Result<[Option<u64>; N], ArgError> {
        let mut values = [None; N];
        while !self.is_empty() {
            let i = self.one_of("an option", &names)?;
            if values[i].is_some() {
                return Err(ArgError::Syntax(format!("{} given twice", names[i])));
            }
            let value = self.u64(names[i])?;
            if names[i] == "NOW" {
                check_now(value)?;
            }
            values[i] = Some(value);
        }
        Ok(values)
    }
}

/// Digits only: no sign, no spaces, no overflow. (A loop over the bytes: every
/// decision parses its parameters, and `str::parse` first checks UTF-8.)
pub(crate) fn parse_u64(arg: &[u8]) -> Option<u64> {
    if arg.is_empty() {
        return None;
    }
    arg.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|&d| d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}
