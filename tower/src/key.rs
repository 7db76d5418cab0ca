//! Who a request counts against: the peer's address, the client behind trusted proxies,
//! a header, a path parameter, or a closure.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{Extensions, HeaderMap, HeaderName, Request, Uri};

use crate::error::Error;

/// The key a request is limited by. IP keys are kept as addresses (no allocation per
/// request); the others as bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// A client address, masked to its group (an IPv6 /64 by default).
    Ip(IpAddr),
    /// A header value, a path parameter, a closure's answer or a fallback.
    Bytes(Bytes),
}

impl Key {
    /// The key as bytes, as stored by a shared limiter (`ip:` and the address, or the
    /// bytes as they are).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Self::Ip(ip) => format!("ip:{ip}").into_bytes(),
            Self::Bytes(bytes) => bytes.to_vec(),
        }
    }
}

/// Why no key could be read from a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// No peer address: the server did not record it (axum: serve with
    /// `into_make_service_with_connect_info::<SocketAddr>()`).
    NoPeer,
    /// The header is absent, or not visible ASCII.
    Header(HeaderName),
    /// A trusted proxy forwarded a client address that does not parse (`unknown`, an
    /// obfuscated `_node`, garbage).
    Forwarded(String),
    /// The path does not have the parameter.
    PathParam(&'static str),
    /// The closure found no key.
    Custom,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoPeer => f.write_str("the peer's address is not known"),
            Self::Header(name) => write!(f, "no usable {name} header"),
            Self::Forwarded(hop) => write!(f, "a trusted proxy forwarded {hop:?}, no address"),
            Self::PathParam(name) => write!(f, "no path parameter {name}"),
            Self::Custom => f.write_str("no key for this request"),
        }
    }
}

/// An IP network: an address and a prefix length, written `10.0.0.0/8` or `::1/128` (a
/// bare address is the network of that address alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The network of `addr`'s first `prefix` bits; an error beyond 32 (IPv4) or 128.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, Error> {
        let addr = addr.to_canonical();
        if prefix > max_prefix(addr) {
            return Err(Error::Cidr(format!("{addr}/{prefix}")));
        }
        Ok(Self {
            network: mask(addr, prefix, prefix),
            prefix,
        })
    }

    /// Whether `addr` is in the network (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        addr.is_ipv4() == self.network.is_ipv4()
            && mask(addr, self.prefix, self.prefix) == self.network
    }
}

impl FromStr for Cidr {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        let bad = || Error::Cidr(text.to_owned());
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let prefix = match prefix {
            Some(p) => p.trim().parse().map_err(|_| bad())?,
            None => max_prefix(addr.to_canonical()),
        };
        Self::new(addr, prefix).map_err(|_| bad())
    }
}

fn max_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

/// `addr` with all but its first `v4` (IPv4) or `v6` (IPv6) bits cleared.
fn mask(addr: IpAddr, v4: u8, v6: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let keep = u32::MAX
                .checked_shl(32 - u32::from(v4.min(32)))
                .unwrap_or(0);
            IpAddr::V4((u32::from(a) & keep).into())
        }
        IpAddr::V6(a) => {
            let keep = u128::MAX
                .checked_shl(128 - u32::from(v6.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & keep))
        }
    }
}

/// A closure reading a key from a request's head.
pub type KeyFn = Arc<dyn Fn(&Parts) -> Option<Bytes> + Send + Sync>;

/// How a request's key is read.
#[derive(Clone)]
pub struct KeyExtractor {
    source: Source,
    /// Prefix lengths clients are grouped by.
    v4_prefix: u8,
    v6_prefix: u8,
}

#[derive(Clone)]
enum Source {
    Peer,
    Forwarded(Arc<[Cidr]>),
    Header(HeaderName),
    PathParam {
        template: Arc<[Segment]>,
        index: usize,
        name: &'static str,
    },
    Custom(KeyFn),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Peer => "peer".to_owned(),
            Source::Forwarded(trusted) => format!("forwarded, trusting {trusted:?}"),
            Source::Header(name) => format!("header {name}"),
            Source::PathParam { name, .. } => format!("path parameter {name}"),
            Source::Custom(_) => "closure".to_owned(),
        };
        f.debug_struct("KeyExtractor")
            .field("source", &source)
            .field("v4_prefix", &self.v4_prefix)
            .field("v6_prefix", &self.v6_prefix)
            .finish()
    }
}

impl KeyExtractor {
    fn of(source: Source) -> Self {
        Self {
            source,
            v4_prefix: 32,
            v6_prefix: 64,
        }
    }

    /// The peer's address (the TCP connection's), read from axum's `ConnectInfo` or a
    /// [`SocketAddr`] in the request's extensions. Forwarding headers are ignored.
    pub fn peer_ip() -> Self {
        Self::of(Source::Peer)
    }

    /// The client's address as proxies report it, trusting only `trusted` proxies: if the
    /// peer is one of them, the `Forwarded` header (else `X-Forwarded-For`) is walked from
    /// the right past every trusted hop, and the first untrusted address is the client.
    /// From an untrusted peer the headers are ignored and the peer is the client, so a
    /// client cannot choose its own key.
    pub fn forwarded(trusted: impl IntoIterator<Item = Cidr>) -> Self {
        Self::of(Source::Forwarded(trusted.into_iter().collect()))
    }

    /// A header's value (an API key, a tenant id), which must be visible ASCII.
    pub fn header(name: HeaderName) -> Self {
        Self::of(Source::Header(name))
    }

    /// The segment of the path at `{name}` in `template` (`"/users/{id}/posts"`, `"id"`);
    /// the path must have the template's literal segments. An error if `name` is not a
    /// parameter of `template`.
    pub fn path_param(template: &str, name: &'static str) -> Result<Self, Error> {
        let segments: Vec<Segment> = template
            .trim_matches('/')
            .split('/')
            .map(
                |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Some(_) => Segment::Param,
                    None => Segment::Literal(s.to_owned()),
                },
            )
            .collect();
        let wanted = format!("{{{name}}}");
        let index = template
            .trim_matches('/')
            .split('/')
            .position(|s| s == wanted)
            .ok_or_else(|| Error::PathParam(template.to_owned(), name))?;
        Ok(Self::of(Source::PathParam {
            template: segments.into(),
            index,
            name,
        }))
    }

    /// A closure over the request's head; `None` is a missing key.
    pub fn custom(f: impl Fn(&Parts) -> Option<Bytes> + Send + Sync + 'static) -> Self {
        Self::of(Source::Custom(Arc::new(f)))
    }

    /// Groups IPv6 clients by their first `prefix` bits (64 by default: one customer's
    /// network usually has a /64 or more, so per-address limits are easy to escape).
    pub fn ipv6_prefix(mut self, prefix: u8) -> Result<Self, Error> {
        if prefix > 128 {
            return Err(Error::Cidr(format!("::/{prefix}")));
        }
        self.v6_prefix = prefix;
        Ok(self)
    }

    /// Groups IPv4 clients by their first `prefix` bits (32, one address, by default).
    pub fn ipv4_prefix(mut self, prefix: u8) -> Result<Self, Error> {
        if prefix > 32 {
            return Err(Error::Cidr(format!("0.0.0.0/{prefix}")));
        }
        self.v4_prefix = prefix;
        Ok(self)
    }

    /// The key of a request.
    pub fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        match &self.source {
            Source::Custom(f) => f(parts).map(Key::Bytes).ok_or(KeyError::Custom),
            _ => self.extract_head(&parts.headers, &parts.uri, &parts.extensions),
        }
    }

    /// The key of a request, read in place; `None` if a closure needs the request's
    /// [`Parts`] (the middleware then splits the request).
    pub(crate) fn extract_request<B>(&self, request: &Request<B>) -> Option<Result<Key, KeyError>> {
        match &self.source {
            Source::Custom(_) => None,
            _ => Some(self.extract_head(request.headers(), request.uri(), request.extensions())),
        }
    }

    fn extract_head(
        &self,
        headers: &HeaderMap,
        uri: &Uri,
        extensions: &Extensions,
    ) -> Result<Key, KeyError> {
        match &self.source {
            Source::Peer => Ok(self.ip(peer(extensions)?)),
            Source::Forwarded(trusted) => {
                forwarded_client(headers, extensions, trusted).map(|ip| self.ip(ip))
            }
            Source::Header(name) => headers
                .get(name)
                .filter(|v| v.to_str().is_ok() && !v.is_empty())
                .map(|v| Key::Bytes(Bytes::copy_from_slice(v.as_bytes())))
                .ok_or_else(|| KeyError::Header(name.clone())),
            Source::PathParam {
                template,
                index,
                name,
            } => path_param(uri.path(), template, *index)
                .map(|s| Key::Bytes(Bytes::copy_from_slice(s.as_bytes())))
                .ok_or(KeyError::PathParam(name)),
            Source::Custom(_) => Err(KeyError::Custom),
        }
    }

    fn ip(&self, ip: IpAddr) -> Key {
        Key::Ip(mask(ip.to_canonical(), self.v4_prefix, self.v6_prefix))
    }
}

/// The peer's address from the request's extensions.
fn peer(extensions: &Extensions) -> Result<IpAddr, KeyError> {
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Ok(info.0.ip());
    }
    extensions
        .get::<SocketAddr>()
        .map(SocketAddr::ip)
        .ok_or(KeyError::NoPeer)
}

/// The first untrusted address walking the forwarding chain from the peer leftwards.
/// Empty list elements are skipped (HTTP lists allow them); a hop that is no address
/// (or an element without `for=`) is an error.
fn forwarded_client(
    headers: &HeaderMap,
    extensions: &Extensions,
    trusted: &[Cidr],
) -> Result<IpAddr, KeyError> {
    let mut client = peer(extensions)?;
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if !is_trusted(client) {
        return Ok(client);
    }
    let forwarded = headers.get_all(http::header::FORWARDED);
    let hops: Vec<&str> = if forwarded.iter().next().is_some() {
        forwarded
            .iter()
            .flat_map(|v| v.to_str().unwrap_or("for=invalid").split(','))
            .filter(|element| !element.trim().is_empty())
            .map(forwarded_for)
            .collect()
    } else {
        headers
            .get_all("x-forwarded-for")
            .iter()
            .flat_map(|v| v.to_str().unwrap_or("invalid").split(','))
            .map(str::trim)
            .filter(|hop| !hop.is_empty())
            .collect()
    };
    for hop in hops.into_iter().rev() {
        client = parse_hop(hop).ok_or_else(|| KeyError::Forwarded(hop.to_owned()))?;
        if !is_trusted(client) {
            break;
        }
    }
    Ok(client)
}

/// The `for=` parameter of one `Forwarded` element (empty when it has none).
fn forwarded_for(element: &str) -> &str {
    element
        .split(';')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
        .map_or("", |(_, value)| value.trim())
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:80`, `"[2001:db8::1]:80"`,
/// `2001:db8::1`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim().trim_matches('"');
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Ok(addr) = hop.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    hop.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

fn path_param<'a>(path: &'a str, template: &[Segment], index: usize) -> Option<&'a str> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if segments.len() != template.len() {
        return None;
    }
    for (segment, expected) in segments.iter().zip(template) {
        match expected {
            Segment::Literal(text) if text != segment => return None,
            _ => {}
        }
    }
    segments.get(index).copied().filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder().uri("/users/42/posts");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let (mut parts, ()) = request.body(()).unwrap().into_parts();
        parts.extensions.insert(peer.parse::<SocketAddr>().unwrap());
        parts
    }

    fn proxies() -> KeyExtractor {
        KeyExtractor::forwarded(["10.0.0.0/8".parse().unwrap(), "::1".parse().unwrap()])
    }

    fn ip(text: &str) -> Result<Key, KeyError> {
        Ok(Key::Ip(text.parse().unwrap()))
    }

    #[test]
    fn forwarded_headers_are_read_only_from_trusted_proxies() {
        let xff = [("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.0.0.2")];
        // From an untrusted peer, the header is a lie it cannot tell.
        assert_eq!(proxies().extract(&parts("9.9.9.9:1", &xff)), ip("9.9.9.9"));
        // Through two trusted hops, the first untrusted address from the right.
        assert_eq!(proxies().extract(&parts("10.0.0.1:1", &xff)), ip("1.2.3.4"));
        // Forwarded wins over X-Forwarded-For, quoted IPv6 with a port included.
        let both = [
            (
                "forwarded",
                "for=6.6.6.6, for=\"[2001:db8::1]:4711\";proto=https",
            ),
            ("x-forwarded-for", "5.5.5.5"),
        ];
        assert_eq!(
            proxies().extract(&parts("[::1]:1", &both)),
            ip("2001:db8::")
        );
        // Every hop trusted: the leftmost.
        let all = [("x-forwarded-for", "10.1.1.1, 10.2.2.2")];
        assert_eq!(
            proxies().extract(&parts("10.0.0.1:1", &all)),
            ip("10.1.1.1")
        );
        // A trusted proxy forwarding garbage: a key error, never a guess.
        let junk = [("forwarded", "for=unknown")];
        assert!(proxies().extract(&parts("10.0.0.1:1", &junk)).is_err());
        // No header: the peer.
        assert_eq!(proxies().extract(&parts("10.0.0.1:1", &[])), ip("10.0.0.1"));
    }

    #[test]
    fn ipv6_is_grouped_by_prefix() {
        let p = parts("[2001:db8:1:2:3:4:5:6]:9", &[]);
        assert_eq!(KeyExtractor::peer_ip().extract(&p), ip("2001:db8:1:2::"));
        let wide = KeyExtractor::peer_ip().ipv6_prefix(48).unwrap();
        assert_eq!(wide.extract(&p), ip("2001:db8:1::"));
        let exact = KeyExtractor::peer_ip().ipv6_prefix(128).unwrap();
        assert_eq!(exact.extract(&p), ip("2001:db8:1:2:3:4:5:6"));
        // IPv4-mapped peers count as IPv4.
        let mapped = parts("[::ffff:1.2.3.4]:9", &[]);
        assert_eq!(KeyExtractor::peer_ip().extract(&mapped), ip("1.2.3.4"));
        assert!(KeyExtractor::peer_ip().ipv6_prefix(129).is_err());
    }

    #[test]
    fn header_path_and_closure_keys() {
        let p = parts("1.1.1.1:1", &[("x-api-key", "k1")]);
        let header = KeyExtractor::header(HeaderName::from_static("x-api-key"));
        assert_eq!(header.extract(&p), Ok(Key::Bytes("k1".into())));
        let absent = KeyExtractor::header(HeaderName::from_static("x-other"));
        assert!(absent.extract(&p).is_err());
        let path = KeyExtractor::path_param("/users/{id}/posts", "id").unwrap();
        assert_eq!(path.extract(&p), Ok(Key::Bytes("42".into())));
        let other = KeyExtractor::path_param("/teams/{id}/posts", "id").unwrap();
        assert!(other.extract(&p).is_err());
        assert!(KeyExtractor::path_param("/users/{id}", "name").is_err());
        let method = KeyExtractor::custom(|p| Some(p.method.as_str().to_owned().into()));
        assert_eq!(method.extract(&p), Ok(Key::Bytes("GET".into())));
    }

    #[test]
    fn cidrs_parse_and_match() {
        let net: Cidr = "192.168.0.0/16".parse().unwrap();
        assert!(net.contains("192.168.3.4".parse().unwrap()));
        assert!(net.contains("::ffff:192.168.3.4".parse().unwrap()));
        assert!(!net.contains("192.169.0.1".parse().unwrap()));
        assert!(!net.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        for bad in ["10.0.0.0/33", "::/129", "nonsense", "10.0.0.0/x", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
