//! The client's one error type.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name or URL given by the app is not valid.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Neither the HTTPDNS service nor LocalDNS produced a usable address.
    #[error("no usable address for {name}: {detail}")]
    NoAddress { name: String, detail: String },
    /// The HTTPDNS service refused or failed the request.
    #[error("HTTPDNS service: {0}")]
    Service(String),
    /// The config document could not be fetched, verified or parsed.
    #[error("config: {0}")]
    Config(String),
    /// The request failed on every host it was allowed to try.
    #[error("request failed after {attempts} attempts: {last}")]
    Request { attempts: usize, last: String },
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
