//! What a limiter's Redis keys should hold, as the differential tests compare it.

/// The value of each of a state's Redis keys (`None`: no such key), from the state's
/// encoding as `LuaAlgorithm::lua_encode` gives it (an empty value: no key), or
/// `keys` absent ones where there is no state.
pub fn key_values(encoded: Option<Vec<Vec<u8>>>, keys: usize) -> Vec<Option<Vec<u8>>> {
    match encoded {
        Some(values) => (values.into_iter())
            .map(|value| (!value.is_empty()).then_some(value))
            .collect(),
        None => vec![None; keys],
    }
}
