//! Key extraction over arbitrary forwarding headers: never a panic, and a peer that is
//! not a trusted proxy is always its own key, whatever it sends.

use std::net::{IpAddr, SocketAddr};

use http::HeaderValue;
use proptest::prelude::*;
use sluicegate_tower::{Key, KeyExtractor};

fn request(peer: SocketAddr, headers: &[(&'static str, Vec<u8>)]) -> http::request::Parts {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            parts.headers.append(*name, value);
        }
    }
    parts.extensions.insert(peer);
    parts
}

fn hop() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|b| IpAddr::from(b).to_string()),
        any::<[u8; 16]>().prop_map(|b| format!("\"[{}]:80\"", IpAddr::from(b))),
        Just("10.0.0.7".to_owned()),
        Just("unknown".to_owned()),
        "[ -~]{0,12}",
    ]
}

proptest! {
    #[test]
    fn untrusted_peers_are_their_own_key_and_nothing_panics(
        peer in any::<[u8; 4]>(),
        trusted_peer in any::<bool>(),
        hops in proptest::collection::vec(hop(), 0..6),
        raw in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let extractor = KeyExtractor::forwarded(["10.0.0.0/8".parse().unwrap()]);
        let peer = if trusted_peer { [10, peer[1], peer[2], peer[3]] } else { peer };
        let peer = SocketAddr::from((peer, 443));
        let xff = hops.join(", ");
        let forwarded = hops.iter().map(|h| format!("for={h}")).collect::<Vec<_>>().join(", ");
        let parts = request(peer, &[
            ("x-forwarded-for", xff.into_bytes()),
            ("forwarded", forwarded.into_bytes()),
            ("forwarded", raw.clone()),
            ("x-forwarded-for", raw),
        ]);
        let key = extractor.extract(&parts);
        if !peer.ip().to_string().starts_with("10.") {
            prop_assert_eq!(key, Ok(Key::Ip(peer.ip())));
        }
    }

    #[test]
    fn behind_trusted_proxies_the_client_is_the_rightmost_untrusted_hop(
        hops in proptest::collection::vec(
            prop_oneof![any::<[u8; 4]>(), any::<[u8; 3]>().prop_map(|b| [10, b[0], b[1], b[2]])],
            0..6,
        ),
        use_forwarded in any::<bool>(),
    ) {
        let extractor = KeyExtractor::forwarded(["10.0.0.0/8".parse().unwrap()]);
        let peer = SocketAddr::from(([10, 0, 0, 1], 443));
        let ips: Vec<IpAddr> = hops.iter().map(|&b| IpAddr::from(b)).collect();
        let header = if use_forwarded {
            ("forwarded", ips.iter().map(|ip| format!("for={ip}")).collect::<Vec<_>>().join(", "))
        } else {
            ("x-forwarded-for", ips.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(","))
        };
        let parts = request(peer, &[(header.0, header.1.into_bytes())]);
        let trusted = |ip: &IpAddr| ip.to_string().starts_with("10.");
        let expected = ips
            .iter()
            .rev()
            .find(|ip| !trusted(ip))
            .or(ips.first())
            .copied()
            .unwrap_or(peer.ip());
        prop_assert_eq!(extractor.extract(&parts), Ok(Key::Ip(expected)));
    }
}
