//! Bearer tokens: 32 random bytes from the OS, URL-safe base64, with a readable prefix;
//! stored only as SHA-256. A token has 256 bits of entropy, so a fast hash suffices: no
//! guessing is feasible, and a stolen table of hashes gives no token back.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// The prefix of app tokens.
pub const APP: &str = "tga_";
/// The prefix of user tokens.
pub const USER: &str = "tgu_";

/// A new token with `prefix`.
pub fn new(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    // The OS's generator failing is not something a server can work around.
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// The stored form of `token`: its SHA-256 in hex.
pub fn hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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
}
