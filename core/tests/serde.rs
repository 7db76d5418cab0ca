//! Parameters and decisions through serde (the `serde` feature).

use tollgate_core::*;

#[test]
fn parameters_and_decisions_serialize() {
    let params: BucketParams =
        serde_json::from_str(r#"{"capacity":10,"rate":5,"period":1000000}"#).unwrap();
    let bucket = TokenBucket::try_from(params).unwrap();
    assert_eq!(bucket.params(), params);
    let window: WindowParams = serde_json::from_str(r#"{"limit":0,"period":1000000}"#).unwrap();
    // Deserialized parameters are data; building the algorithm validates them.
    assert!(FixedWindow::try_from(window).is_err());
    let decision = bucket.decide(None, 0, 11).0;
    let json = serde_json::to_string(&decision).unwrap();
    assert_eq!(
        json,
        r#"{"allowed":false,"limit":10,"remaining":10,"retry_after":null,"reset_after":0,"delay":0}"#
    );
    assert_eq!(serde_json::from_str::<Decision>(&json).unwrap(), decision);
}
