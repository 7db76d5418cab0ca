//! Parameters, decisions and kinds through serde (the `serde` feature).

use sluicegate_core::*;

#[test]
fn parameters_serialize() {
    let params: BucketParams =
        serde_json::from_str(r#"{"capacity":10,"rate":5,"period":1000000}"#).unwrap();
    let bucket = TokenBucket::try_from(params).unwrap();
    assert_eq!(bucket.params(), params);
    let window: WindowParams = serde_json::from_str(r#"{"limit":0,"period":1000000}"#).unwrap();
    // Deserialized parameters are data; building the algorithm validates them.
    assert!(FixedWindow::try_from(window).is_err());
}

/// The wire shape: durations in microseconds, `retry_after_us` 0 when admitted, a wait
/// when the cost fits later, `null` only when it never fits.
#[test]
fn decisions_serialize_in_the_wire_shape() {
    let bucket = TokenBucket::new(10, 5, SECOND).unwrap();
    let (admitted, state) = bucket.decide(None, 0, 4);
    let (later, _) = bucket.decide(state, 0, 7);
    let (never, _) = bucket.decide(None, 0, 11);
    let pacing = Pacing::new(2, 1, SECOND).unwrap();
    let (_, state) = pacing.decide(None, 0, 1);
    let (queued, _) = pacing.decide(state, 0, 1);
    for (decision, json) in [
        (
            admitted,
            r#"{"allowed":true,"limit":10,"remaining":6,"retry_after_us":0,"reset_after_us":800000,"delay_us":0}"#,
        ),
        (
            later,
            r#"{"allowed":false,"limit":10,"remaining":6,"retry_after_us":200000,"reset_after_us":800000,"delay_us":0}"#,
        ),
        (
            never,
            r#"{"allowed":false,"limit":10,"remaining":10,"retry_after_us":null,"reset_after_us":0,"delay_us":0}"#,
        ),
        (
            queued,
            r#"{"allowed":true,"limit":3,"remaining":1,"retry_after_us":0,"reset_after_us":2000000,"delay_us":1000000}"#,
        ),
    ] {
        assert_eq!(serde_json::to_string(&decision).unwrap(), json);
        assert_eq!(serde_json::from_str::<Decision>(json).unwrap(), decision);
    }
}

/// Kinds read in every accepted spelling and write their canonical name.
#[test]
fn kinds_serialize_by_name() {
    for kind in Kind::ALL {
        let json = serde_json::to_string(&kind).unwrap();
        assert_eq!(json, format!("\"{}\"", kind.name()));
        for spelling in [kind.name().to_owned(), kind.name().replace('-', "_")] {
            let read: Kind = serde_json::from_str(&format!("\"{spelling}\"")).unwrap();
            assert_eq!(read, kind);
            assert_eq!(Kind::from_name(&spelling), Some(kind));
        }
    }
    let old: Kind = serde_json::from_str("\"leaky-pacing\"").unwrap();
    assert_eq!(old, Kind::Pacing);
    assert!(serde_json::from_str::<Kind>("\"fixed window\"").is_err());
}
