//! What a request through [`CdnClient`](super::CdnClient) returns: the response, the route
//! that served it and every attempt on the way.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::Url;

use crate::resolver::Path;

/// How one attempt of a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// An HTTP status (2xx–4xx: the request is done; 5xx: a host failure).
    Status(u16),
    /// No HTTP response: connect, DNS, TLS or timeout failure.
    Failed(String),
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub url: String,
    /// How the host name was resolved (none for IP literals).
    pub resolved: Option<(Path, Vec<IpAddr>)>,
    pub outcome: Outcome,
    /// From the start of the request to the start of this attempt.
    pub started_after: Duration,
    pub elapsed: Duration,
    /// This failure disabled the host.
    pub disabled_host: bool,
    /// The attempt failed for want of an address (no connection was tried).
    pub dns_failed: bool,
    /// The attempt failed by a timeout.
    pub timed_out: bool,
}

/// Which route served a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A unified host from `hostListConfig`.
    Unified,
    /// The original URL, because every unified host failed or is disabled.
    Original,
    /// The URL as given: not under convergence.
    Direct,
}

#[derive(Debug)]
pub struct Fetched {
    pub response: reqwest::Response,
    pub url: Url,
    /// `host[:port]` that answered.
    pub host: String,
    pub route: Route,
    /// Every attempt, the last one being the response.
    pub attempts: Vec<Attempt>,
}

impl Fetched {
    /// Time lost to failed attempts before the one that answered: the switch-over time.
    pub fn switch_time(&self) -> Duration {
        self.attempts.last().map_or(Duration::ZERO, |a| a.started_after)
    }

    pub fn switched(&self) -> bool {
        self.attempts.len() > 1
    }
}
