//! The one place the library builds an HTTP client.

/// A reqwest builder with a TLS crypto provider in place.
///
/// reqwest is built without a bundled provider (the workspace uses ring, and the `rustls`
/// feature would compile aws-lc-rs beside it), so one must be installed before a client is
/// built. Ring becomes the process default unless the application installed its own first;
/// then that one is kept.
pub(crate) fn client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}
