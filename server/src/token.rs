//! Bearer tokens: 32 random bytes from the OS, URL-safe base64, with a readable prefix;
//! stored only as SHA-256. A token has 256 bits of entropy, so a fast hash suffices: no
//! guessing is feasible, and a stolen table of hashes gives no token back.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest as _, Sha256};

/// The prefix of app tokens.
pub(crate) const APP: &str = "sga_";
/// The prefix of user tokens.
pub(crate) const USER: &str = "sgu_";

/// A new token with `prefix`.
pub(crate) fn new(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    // The OS's generator failing is not something a server can work around.
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// A token's SHA-256: what a server looks a presented token up by (no allocation,
/// no text: this runs for every request).
pub(crate) type Digest = [u8; 32];

/// The SHA-256 of `token`.
pub(crate) fn digest(token: &str) -> Digest {
    Sha256::digest(token.as_bytes()).into()
}

/// The stored form of `token`: its SHA-256 in hex.
pub(crate) fn hash(token: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    digest(token)
        .iter()
        .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
        .map(char::from)
        .collect()
}

/// The digest a stored hash names; `None` unless it is 64 hex digits.
pub(crate) fn parse_hash(hash: &str) -> Option<Digest> {
    let hash = hash.as_bytes();
    if hash.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hash.chunks_exact(2)) {
        let nibble = |c: u8| char::from(c).to_digit(16);
        *byte = u8::try_from(nibble(pair[0])? << 4 | nibble(pair[1])?).ok()?;
    }
    Some(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh_and_prefixed() {
        let (a, b) = (new(APP), new(APP));
        assert_ne!(a, b);
        assert!(a.starts_with(APP) && a.len() == APP.len() + 43);
        assert_eq!(hash(&a).len(), 64);
        assert_ne!(hash(&a), hash(&b));
    }

    #[test]
    fn a_stored_hash_names_the_digest() {
        let token = new(USER);
        assert_eq!(parse_hash(&hash(&token)), Some(digest(&token)));
        // SHA-256("abc"), the standard's own example.
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(parse_hash(&hash("abc").to_uppercase()), Some(digest("abc")));
        for bad in [
            "",
            "ab",
            &"g".repeat(64),
            &"a".repeat(63),
            &"a".repeat(65),
            &"é".repeat(32),
        ] {
            assert_eq!(parse_hash(bad), None, "{bad}");
        }
    }
}
