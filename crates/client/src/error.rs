//! The client's one error type.
//!
//! A variant with a cause carries it as its `source` (the message keeps the text it had, the
//! cause's included); `#[non_exhaustive]`, so a later cause is not a breaking change.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The name given by the app is not valid.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The URL given by the app does not parse.
    #[error("invalid input: URL {url:?}: {source}")]
    InvalidUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },
    /// The HTTP client could not be built from the options.
    #[error("invalid input: HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// Neither the HTTPDNS service nor LocalDNS produced a usable address.
    #[error("no usable address for {name}: {detail}")]
    NoAddress { name: String, detail: String },
    /// The HTTPDNS service refused or failed the request.
    #[error("HTTPDNS service: {0}")]
    Service(String),
    /// The config document is missing, unsigned, refused or invalid.
    #[error("config: {0}")]
    Config(String),
    /// The config center (or its public key) could not be reached or read.
    #[error("config: {}", crate::service::error_chain(.0))]
    ConfigFetch(#[source] reqwest::Error),
    /// The config center's public key is not the JSON it should be.
    #[error("config: public key: {0}")]
    ConfigKey(#[source] reqwest::Error),
    /// A config answer or document is not the JSON it should be.
    #[error("config: {what}: {source}")]
    ConfigParse {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The request failed on every host it was allowed to try; `source` is the last failure.
    #[error("request failed after {attempts} attempts: {last}")]
    Request {
        attempts: usize,
        last: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
