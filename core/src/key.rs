//! Keys in messages: as text where they are text, escaped where they are not.

use core::fmt;

/// Shows a key in messages: quoted text when the bytes are UTF-8 (control characters
/// and quotes escaped), else each byte outside printable ASCII as `\xNN`. Keys are
/// binary-safe in every host, so a message must never lose or garble one.
///
/// ```
/// use sluicegate_core::host::KeyDisplay;
/// assert_eq!(KeyDisplay(b"user:42").to_string(), "\"user:42\"");
/// assert_eq!(KeyDisplay(b"caf\xc3\xa9").to_string(), "\"café\"");
/// assert_eq!(KeyDisplay(b"a\xff\"").to_string(), "\"a\\xff\\\"\"");
/// assert_eq!(KeyDisplay(b"don't\n").to_string(), "\"don't\\n\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDisplay<'a>(pub &'a [u8]);

impl fmt::Display for KeyDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        match core::str::from_utf8(self.0) {
            Ok(text) => {
                for c in text.chars() {
                    // Inside double quotes a single quote needs no escape.
                    match c {
                        '\'' => f.write_str("'")?,
                        c => write!(f, "{}", c.escape_debug())?,
                    }
                }
            }
            Err(_) => write!(f, "{}", self.0.escape_ascii())?,
        }
        f.write_str("\"")
    }
}
