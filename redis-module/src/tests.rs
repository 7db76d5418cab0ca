//! The parsers and the decisions behind them on random argument vectors: every input
//! is an answer or a typed error, never a panic.

use proptest::prelude::*;
use sluicegate_core::Kind;

use crate::args::ArgError;
use crate::cell::{self, Throttle};
use crate::engine::{Failure, LeaseOp, LeaseRequest, Request};

/// Words the commands know, numbers at the edges of every range, and noise.
const WORDS: [&str; 30] = [
    "1",
    "2",
    "3",
    Kind::FixedWindow.script_name(),
    Kind::SlidingLog.script_name(),
    Kind::SlidingCounter.script_name(),
    Kind::TokenBucket.script_name(),
    Kind::LeakyBucket.script_name(),
    Kind::Pacing.script_name(),
    "ban",
    "counting_denied",
    "COST",
    "NOW",
    "MAXWAIT",
    "0",
    "1000000",
    "1000000000",
    "1000000001",
    "100000",
    "4611686018427387904",
    "4611686018427387905",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "31622400000000",
    "31622400000001",
    "9007199254740992",
    "",
    "+1",
    " 1",
];

fn word() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => proptest::sample::select(&WORDS[..]).prop_map(|w| w.as_bytes().to_vec()),
        1 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..12),
    ]
}

/// A stored value: absent, random bytes, or random bytes behind a valid header.
fn value() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        Just(None),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Some),
        (1u8..10, proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(tag, rest)| {
            let mut v = vec![1, tag];
            v.extend(rest);
            Some(v)
        }),
    ]
}

proptest! {
    #[test]
    fn no_argument_vector_panics(
        args in proptest::collection::vec(word(), 0..24),
        values in proptest::collection::vec(value(), 0..4),
        now: u64,
    ) {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let now = now >> (now % 64);
        let first = values.first().cloned().flatten();
        let values: Vec<Option<&[u8]>> = values.iter().map(Option::as_deref).collect();
        for wait in [false, true] {
            if let Ok(request) = Request::parse(&args, wait) {
                let _ = request.decide(&values, now);
                let _ = request.validate(&values);
            }
        }
        // The same words behind a numkeys and a key, so algorithms get parsed.
        let mut keyed: Vec<&[u8]> = vec![b"1", b"k"];
        keyed.extend(&args);
        if let Ok(request) = Request::parse(&keyed, true) {
            let _ = request.decide(&values, now);
        }
        for op in [LeaseOp::Acquire, LeaseOp::Release, LeaseOp::Renew] {
            if let Ok(request) = LeaseRequest::parse(&args, op) {
                let _ = request.run(op, first.as_deref(), now);
            }
        }
        if let Ok(throttle) = Throttle::parse(&args) {
            if let Ok((d, _)) = throttle.decide(first.as_deref(), now) {
                let _ = cell::reply(&d);
            }
        }
    }
}

proptest! {
    /// The byte loop reads a number exactly as `str::parse` does, digits only.
    #[test]
    fn numbers_parse_as_str_parse(arg in proptest::collection::vec(
        prop_oneof![4 => b'0'..=b'9', 1 => any::<u8>()], 0..24)) {
        let expected = if arg.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(&arg).ok().and_then(|s| s.parse::<u64>().ok())
        } else {
            None
        };
        prop_assert_eq!(crate::args::parse_u64(&arg), expected);
    }

    /// A state's bytes on the stack or spilled to the heap are the core's encoding.
    #[test]
    fn encoded_bytes_are_the_cores(len in 0usize..300) {
        let mut encoded = crate::engine::Encoded::of(|out, n: &usize| out.extend((0..*n).map(byte)), &len);
        let expected: Vec<u8> = (0..len).map(byte).collect();
        prop_assert_eq!(encoded.as_slice(), &expected[..]);
        encoded.extend([7u8]);
        prop_assert_eq!(encoded.as_slice().len(), len + 1);
    }
}

fn byte(i: usize) -> u8 {
    u8::try_from(i % 256).unwrap_or(0)
}

#[test]
fn bans_nest_a_bounded_depth() {
    let mut args: Vec<&[u8]> = vec![b"1", b"k"];
    for _ in 0..100_000 {
        args.extend([&b"ban"[..], b"1", b"1", b"1"]);
    }
    args.extend([Kind::FixedWindow.script_name().as_bytes(), b"1", b"1"]);
    assert!(Request::parse(&args, false).is_err());
}

/// An owner or ttl out of range is the caller's argument error at parsing, before
/// the key is read: a corrupt stored value does not hide it.
#[test]
fn lease_arguments_are_checked_before_the_key_is_read() {
    let long = [b'o'; 129];
    for (owner, ttl, op) in [
        (&b""[..], &b"10"[..], LeaseOp::Acquire),
        (&long[..], b"10", LeaseOp::Acquire),
        (b"a", b"0", LeaseOp::Acquire),
        (b"a", b"31622400000001", LeaseOp::Renew),
    ] {
        let args: Vec<&[u8]> = vec![b"k", b"1", owner, ttl];
        let failure = LeaseRequest::parse(&args, op).unwrap_err();
        assert!(
            matches!(failure, Failure::Arg(ArgError::Param(_))),
            "{failure}"
        );
    }
    let args: Vec<&[u8]> = vec![b"k", b"1", b"a", b"10"];
    assert!(LeaseRequest::parse(&args, LeaseOp::Acquire).is_ok());
}

#[test]
fn cell_seconds_round_as_redis_cell() {
    assert_eq!(cell::seconds(0), 0);
    assert_eq!(cell::seconds(999), 0);
    assert_eq!(cell::seconds(1000), 1);
    assert_eq!(cell::seconds(2_000_999), 2);
    assert_eq!(cell::seconds(2_001_000), 3);
    assert_eq!(cell::seconds(60_000_000), 60);
}
