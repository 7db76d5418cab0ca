//! `on_full = "deny-new"` or `"evict"`: the core's [`OnFull`] as policies write it.

use serde::de::Error;
use serde::{Deserialize, Deserializer, Serializer};
use sluicegate_core::memory::OnFull;

/// The names, as policies write them.
const NAMES: [&str; 2] = ["deny-new", "evict"];

pub(crate) fn serialize<S: Serializer>(on_full: &Option<OnFull>, s: S) -> Result<S::Ok, S::Error> {
    match on_full {
        Some(OnFull::DenyNew) => s.serialize_str(NAMES[0]),
        Some(OnFull::Evict) => s.serialize_str(NAMES[1]),
        None => s.serialize_none(),
    }
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<OnFull>, D::Error> {
    let name = String::deserialize(d)?;
    // `deny_new` too, as algorithm names take either.
    match name.as_str() {
        "deny-new" | "deny_new" => Ok(Some(OnFull::DenyNew)),
        "evict" => Ok(Some(OnFull::Evict)),
        other => Err(D::Error::unknown_variant(other, &NAMES)),
    }
}
