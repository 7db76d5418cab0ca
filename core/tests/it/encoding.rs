use proptest::prelude::*;
use sluicegate_core::*;

/// Decoding any bytes with any algorithm is a value or a typed error, never a panic,
/// and whatever decodes re-encodes to the same bytes.
fn decode_is_total<A: Algorithm>(alg: &A, bytes: &[u8]) {
    if let Ok(state) = alg.decode(bytes) {
        assert_eq!(alg.encode_to_vec(&state), bytes);
    }
}

fn every_algorithm(bytes: &[u8]) {
    decode_is_total(&FixedWindow::new(10, SECOND).unwrap(), bytes);
    decode_is_total(&SlidingLog::new(10, SECOND).unwrap(), bytes);
    decode_is_total(&SlidingCounter::new(10, SECOND).unwrap(), bytes);
    decode_is_total(&TokenBucket::new(10, 3, SECOND).unwrap(), bytes);
    decode_is_total(&LeakyBucket::new(10, 3, SECOND).unwrap(), bytes);
    decode_is_total(&Pacing::new(10, 3, SECOND).unwrap(), bytes);
    let ban = Ban::new(TokenBucket::new(10, 3, SECOND).unwrap(), 5, SECOND, SECOND).unwrap();
    decode_is_total(&ban, bytes);
    decode_is_total(
        &Composite::new(vec![SlidingLog::new(3, SECOND).unwrap(); 2]).unwrap(),
        bytes,
    );
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        every_algorithm(&bytes);
    }

    /// Valid headers with random bodies reach the field checks.
    #[test]
    fn random_bodies_never_panic(tag in 1..=8u8, body in prop::collection::vec(any::<u8>(), 0..80)) {
        let bytes: Vec<u8> = [1, tag].into_iter().chain(body).collect();
        every_algorithm(&bytes);
    }
}

#[test]
fn corrupt_states_are_typed_errors() {
    let bucket = TokenBucket::new(10, 3, SECOND).unwrap();
    let (_, state) = bucket.decide(None, 1_000, 4);
    let good = bucket.encode_to_vec(&state.unwrap());
    assert_eq!(good.len(), 18, "a bucket state is 18 bytes");
    assert_eq!(
        bucket.decode(&good[..10]),
        Err(DecodeError::Truncated { len: 10 })
    );
    assert_eq!(
        bucket.decode(&[good.clone(), vec![0]].concat()),
        Err(DecodeError::TrailingBytes { extra: 1 })
    );
    let mut newer = good.clone();
    newer[0] = 2;
    assert_eq!(
        bucket.decode(&newer),
        Err(DecodeError::UnsupportedVersion(2))
    );
    let window = FixedWindow::new(10, SECOND).unwrap();
    assert_eq!(
        window.decode(&good),
        Err(DecodeError::WrongAlgorithm {
            expected: 1,
            found: 4
        })
    );
    // Messages name the algorithms, not their tags.
    assert_eq!(
        window.decode(&good).unwrap_err().to_string(),
        "state is a token bucket's, expected a fixed window's"
    );
    let log = SlidingLog::new(10, SECOND).unwrap();
    let log_state = log.encode_to_vec(&log.decide(None, 0, 1).1.unwrap());
    assert_eq!(
        bucket.decode(&log_state).unwrap_err().to_string(),
        "state is a sliding log's, expected a token bucket's"
    );
    let unknown = [&[1, 42][..], &good[2..]].concat();
    assert_eq!(
        bucket.decode(&unknown).unwrap_err().to_string(),
        "state is for an unknown algorithm (tag 42), expected a token bucket's"
    );
    // A fraction of a tick at or beyond the rate is no state this bucket can be in.
    let mut bad_frac = good.clone();
    bad_frac[17] = 3;
    assert_eq!(
        bucket.decode(&bad_frac),
        Err(DecodeError::InvalidField { field: "tat_frac" })
    );
    // A fixed window counting more than its limit is corrupt, not "allow everything".
    let mut over = window.encode_to_vec(&window.decide(None, 0, 1).1.unwrap());
    over[17] = 11;
    assert_eq!(
        window.decode(&over),
        Err(DecodeError::InvalidField { field: "count" })
    );
    // A sliding log claiming 2^60 entries is refused before anything is allocated.
    let log = SlidingLog::new(10, SECOND).unwrap();
    let huge = [vec![1, 2], (1u64 << 60).to_be_bytes().to_vec()].concat();
    assert_eq!(
        log.decode(&huge),
        Err(DecodeError::InvalidField { field: "len" })
    );
}

#[test]
fn encodings_are_fixed_and_versioned() {
    let window = FixedWindow::new(10, SECOND).unwrap();
    let (_, state) = window.decide(None, 5 * SECOND + 1, 3);
    assert_eq!(
        window.encode_to_vec(&state.unwrap()),
        [
            vec![1, 1],
            5u64.to_be_bytes().to_vec(),
            3u64.to_be_bytes().to_vec()
        ]
        .concat()
    );
    let counter = SlidingCounter::new(10, SECOND).unwrap();
    assert_eq!(
        counter
            .encode_to_vec(&counter.decide(None, 0, 1).1.unwrap())
            .len(),
        26
    );
}
