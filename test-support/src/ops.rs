//! The limiter contract's operations, drawn at random by the differential tests that run
//! one sequence through two ways of calling a host.

use proptest::prelude::{prop_oneof, Just, Strategy};

/// One operation of the contract (`Reserve` with its longest wait, in ticks).
#[derive(Debug, Clone)]
pub enum Op {
    Check,
    Peek,
    Reserve(u64),
    Reset,
}

/// Mostly checks, some peeks and reservations (waiting up to 3 s), a few resets.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Check),
        2 => Just(Op::Peek),
        2 => (0..3_000_000u64).prop_map(Op::Reserve),
        1 => Just(Op::Reset),
    ]
}
