//! Clients for a URL, TLS set up, and the handshake a connection sends first: what both
//! the plain connections and the Sentinel ones build on.

use redis::{Client, Pipeline};

/// A client for `url`: `redis://` (plain TCP) or `rediss://` (TLS). With `ca_pem` (one or
/// more PEM certificates, such as a managed service's or a private CA's file), TLS trusts
/// exactly those certificate authorities instead of the system's. Give the client to
/// [`Reconnecting::new`](crate::Reconnecting::new) or [`connect_async`](crate::connect_async); both then speak TLS.
///
/// TLS needs a rustls crypto provider: this installs ring's as the process's default
/// unless the application installed one.
///
/// A CA that is not PEM, or a `ca_pem` with a `redis://` URL (a certificate that would be
/// silently unused), is [`Error::Tls`](crate::Error::Tls); so is, on the first request,
/// a server whose certificate that CA did not sign.
pub fn client(url: &str, ca_pem: Option<&[u8]>) -> Result<Client, crate::error::Error> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};

    let tls = |reason: String| crate::error::Error::Tls(reason);
    // redis's rustls support builds its configuration on the process's default crypto
    // provider; install ring's unless the application chose one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some(ca_pem) = ca_pem else {
        return Client::open(url).map_err(crate::error::Error::Redis);
    };
    if !url.starts_with("rediss://") {
        return Err(tls(format!(
            "a CA certificate was given for {url}, which is not a rediss:// URL"
        )));
    }
    let certificates = CertificateDer::pem_slice_iter(ca_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls(format!("the CA certificate is not valid PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(tls("the CA file holds no PEM certificate".to_owned()));
    }
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca_pem.to_vec()),
    };
    Client::build_with_tls(url, certificates).map_err(|e| tls(e.to_string()))
}

/// The handshake (`AUTH`, `SELECT`) for `user`, `password` and database `db`, sent
/// after connecting under the request's deadline; empty when there is nothing to send.
pub(crate) fn handshake(user: Option<&str>, password: Option<&str>, db: i64) -> Pipeline {
    let mut handshake = redis::pipe();
    if let Some(password) = password {
        let auth = handshake.cmd("AUTH");
        if let Some(user) = user {
            auth.arg(user);
        }
        auth.arg(password);
    }
    if db != 0 {
        handshake.cmd("SELECT").arg(db);
    }
    handshake
}
