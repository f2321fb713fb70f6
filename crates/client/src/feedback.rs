//! Connection outcomes for the server's live scores (`POST /feedback`, docs/live-scores.md), as
//! the Android SDK's `eventListenerFactory()` reports them from OkHttp's `connectEnd` /
//! `connectFailed`.
//!
//! [`FeedbackLayer`] wraps reqwest's connector (`ClientBuilder::connector_layer`), so it sees
//! every connection the client opens, and only those (a pooled connection reused is not a new
//! report): the time from the connector being asked to the connection being ready (TCP, and
//! TLS for HTTPS; the name is already in the resolver's cache, since `CdnClient` resolves it
//! before each attempt), and the node's address (`HttpInfo::remote_addr`). A connection that
//! failed tried every address the resolver gave for the name, so each is reported as failed.
//! Connections to IP literals are not reported: the server scores a domain's nodes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connection, HttpInfo};
use tokio::time::Instant;

use crate::events::{FeedbackReport, Reporter};
use crate::resolver::Resolver;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// At most this many addresses of a name are reported for one failed connection.
const MAX_FAILED_REPORTS: usize = 8;

/// The connector layer reporting each new connection to a [`Reporter::feedback`].
#[derive(Clone)]
pub struct FeedbackLayer {
    reporter: Reporter,
    resolver: Resolver,
}

impl FeedbackLayer {
    pub fn new(reporter: Reporter, resolver: Resolver) -> Self {
        Self { reporter, resolver }
    }
}

impl fmt::Debug for FeedbackLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedbackLayer").finish_non_exhaustive()
    }
}

impl<S> tower::Layer<S> for FeedbackLayer {
    type Service = FeedbackService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FeedbackService { inner, layer: self.clone() }
    }
}

#[derive(Clone)]
pub struct FeedbackService<S> {
    inner: S,
    layer: FeedbackLayer,
}

impl<S> fmt::Debug for FeedbackService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedbackService").finish_non_exhaustive()
    }
}

/// The domain of a connector request. reqwest's request type is sealed: only its `Debug`
/// (`Unnameable(<uri>)`) names the URI; anything else is no domain, and no report.
fn domain_of(request: &str) -> Option<String> {
    let uri = request.strip_prefix("Unnameable(")?.strip_suffix(')')?;
    let url = reqwest::Url::parse(uri).ok()?;
    match url.host()? {
        url::Host::Domain(d) => Some(d.trim_end_matches('.').to_ascii_lowercase()),
        _ => None,
    }
}

impl<S, Req, R> tower::Service<Req> for FeedbackService<S>
where
    S: tower::Service<Req, Response = R, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    Req: fmt::Debug,
    R: Connection + Send + 'static,
{
    type Response = R;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let domain = domain_of(&format!("{req:?}"));
        // The service that was polled ready serves this call; a fresh clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        let started = Instant::now();
        let connecting = inner.call(req);
        Box::pin(async move {
            let result = connecting.await;
            if let Some(domain) = domain {
                layer.report(&domain, &result, started);
            }
            result
        })
    }
}

impl FeedbackLayer {
    fn report<R: Connection>(&self, domain: &str, result: &Result<R, BoxError>, started: Instant) {
        let network = FeedbackReport::network_of(&self.resolver.network());
        match result {
            Ok(conn) => {
                let mut extensions = http::Extensions::new();
                conn.connected().get_extras(&mut extensions);
                let Some(info) = extensions.get::<HttpInfo>() else { return };
                self.reporter.record_feedback(&FeedbackReport {
                    ip: info.remote_addr().ip().to_canonical(),
                    domain: domain.to_owned(),
                    ok: true,
                    connect: Some(started.elapsed()),
                    network,
                });
            }
            Err(_) => {
                for ip in self
                    .resolver
                    .cached_addresses(domain)
                    .unwrap_or_default()
                    .into_iter()
                    .take(MAX_FAILED_REPORTS)
                {
                    self.reporter.record_feedback(&FeedbackReport {
                        ip,
                        domain: domain.to_owned(),
                        ok: false,
                        connect: None,
                        network,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_domain_of_a_connector_request() {
        assert_eq!(
            domain_of("Unnameable(https://Image.Example.com./a)").as_deref(),
            Some("image.example.com")
        );
        assert_eq!(domain_of("Unnameable(http://127.0.0.1:8080/)"), None);
        assert_eq!(domain_of("Unnameable(http://[::1]:8080/)"), None);
        assert_eq!(domain_of("Something(http://a.example.com/)"), None);
    }

    #[test]
    fn reports_in_the_server_schema() {
        let ok = FeedbackReport {
            ip: "1.1.1.1".parse().unwrap(),
            domain: "www.example.com".into(),
            ok: true,
            connect: Some(std::time::Duration::from_millis(23)),
            network: FeedbackReport::network_of("wifi:home"),
        };
        assert_eq!(
            ok.to_json(),
            serde_json::json!({"ip": "1.1.1.1", "domain": "www.example.com", "ok": true, "connect_ms": 23, "network": "wifi"})
        );
        let failed = FeedbackReport { ok: false, network: FeedbackReport::network_of("default"), ..ok };
        assert_eq!(
            failed.to_json(),
            serde_json::json!({"ip": "1.1.1.1", "domain": "www.example.com", "ok": false})
        );
        assert_eq!(FeedbackReport::network_of("cellular:46001"), Some("cellular"));
    }
}
