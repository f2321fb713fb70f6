//! HTTP clients for tests.

/// A reqwest builder with ring installed as the TLS crypto provider.
///
/// The workspace builds reqwest without a bundled provider (ring is the one crypto library;
/// reqwest's `rustls` feature would compile aws-lc-rs beside it), so a test that builds a
/// client before any library code has run needs one in place.
pub fn client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// A default reqwest client (see [`client_builder`]).
pub fn client() -> reqwest::Client {
    client_builder().build().expect("a default HTTP client")
}
