//! The gateway's failures as clients see them, decided in one place: which side failed, whether
//! trying again may help, the status, code and message, and the metric.
//!
//! Only a client's own mistake is explained in detail (it is about their request). For the
//! origin, the store and the gateway itself the client gets a fixed sentence; the detail
//! (addresses, paths, IO errors) goes to the log.

use std::borrow::Cow;
use std::fmt::Display;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use httpdns_image::RenderError;

use crate::fill::FillError;
use crate::metrics::Outcome;
use crate::origin::FetchError;

/// How long a client is told to wait before trying a busy or failing gateway again.
pub(crate) const RETRY_AFTER_S: &str = "1";

/// The side of the gateway a failure came from (the `side` label of
/// `httpdns_mirror_errors_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The request: a bad parameter, no rule, a method the mirror does not serve.
    Client,
    /// The origin: not found, unreachable, timed out, a bad or oversized response.
    Origin,
    /// The object store.
    Store,
    /// The gateway itself: out of image memory, an encoder failure, a fill that ended early.
    Internal,
}

impl Side {
    pub const ALL: [Side; 4] = [Side::Client, Side::Origin, Side::Store, Side::Internal];

    pub fn label(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Origin => "origin",
            Side::Store => "store",
            Side::Internal => "internal",
        }
    }
}

/// One failed request, ready to become its response.
#[derive(Debug)]
pub(crate) struct Failure {
    side: Side,
    status: StatusCode,
    code: &'static str,
    field: Option<Cow<'static, str>>,
    /// What the client reads.
    message: Cow<'static, str>,
    /// What the log reads (never sent).
    detail: Option<String>,
    /// Whether the same request may succeed later (sent as `Retry-After`).
    retry: bool,
}

impl Failure {
    /// The client's mistake, explained.
    pub(crate) fn client(
        status: StatusCode,
        code: &'static str,
        field: Option<&str>,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        let field = field.map(|f| Cow::Owned(f.to_owned()));
        Self { side: Side::Client, status, code, field, message: message.into(), detail: None, retry: false }
    }

    /// The gateway failed in itself (a fill or render that ended early, an encoder); `detail`
    /// is logged.
    pub(crate) fn internal(
        code: &'static str,
        message: &'static str,
        detail: impl Display,
        retry: bool,
    ) -> Self {
        let status = if retry { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::INTERNAL_SERVER_ERROR };
        Self {
            side: Side::Internal,
            status,
            code,
            field: None,
            message: message.into(),
            detail: Some(detail.to_string()),
            retry,
        }
    }

    /// The store failed; `detail` is logged.
    pub(crate) fn store(detail: impl Display) -> Self {
        Self {
            side: Side::Store,
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "StoreUnavailable",
            field: None,
            message: "the object store failed; try again".into(),
            detail: Some(detail.to_string()),
            retry: true,
        }
    }

    /// The gateway is out of a resource for now (image memory, a shared render's time); the
    /// message says which, and holds nothing internal.
    pub(crate) fn busy(message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            side: Side::Internal,
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "ImageBusy",
            field: None,
            message: message.into(),
            detail: None,
            retry: true,
        }
    }

    /// The client's address (or the process) holds all the connections, streams and open
    /// files it may: a body streamed from a file or the store would hold one more.
    pub(crate) fn too_many(why: httpdns_net::Refused) -> Self {
        let (status, message) = match why {
            httpdns_net::Refused::PerAddress => {
                (StatusCode::TOO_MANY_REQUESTS, "too many downloads in progress from this address")
            }
            httpdns_net::Refused::Full => {
                (StatusCode::SERVICE_UNAVAILABLE, "the server has no connection free")
            }
        };
        Self {
            side: Side::Client,
            status,
            code: "TooManyConnections",
            field: None,
            message: message.into(),
            detail: None,
            retry: true,
        }
    }

    fn origin(
        status: StatusCode,
        code: &'static str,
        message: &'static str,
        detail: String,
        retry: bool,
    ) -> Self {
        Self {
            side: Side::Origin,
            status,
            code,
            field: None,
            message: message.into(),
            detail: Some(detail),
            retry,
        }
    }

    #[cfg(test)]
    fn side(&self) -> Side {
        self.side
    }

    #[cfg(test)]
    fn retryable(&self) -> bool {
        self.retry
    }

    /// The request outcome for `mirror_requests_total`.
    pub(crate) fn outcome(&self) -> Outcome {
        if self.status == StatusCode::NOT_FOUND && self.side == Side::Origin {
            Outcome::NotFound
        } else {
            Outcome::Error
        }
    }

    /// The JSON error response (`error`, `code`, `field`), marked with its side for the metric.
    pub(crate) fn response(self) -> Response {
        if let Some(detail) = &self.detail {
            match self.side {
                Side::Store | Side::Internal => {
                    tracing::error!(side = self.side.label(), code = self.code, error = %detail, "Mirror request failed.");
                }
                _ => {
                    tracing::warn!(side = self.side.label(), code = self.code, error = %detail, "Mirror request failed.");
                }
            }
        }
        let mut body = serde_json::json!({ "error": self.message, "code": self.code });
        if let Some(f) = self.field {
            body["field"] = f.as_ref().into();
        }
        let mut r = (self.status, body.to_string()).into_response();
        let headers = r.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if self.retry && self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
        }
        r.extensions_mut().insert(self.side);
        r
    }

    /// The outcome and the response, as the serving paths return them.
    pub(crate) fn served(self) -> (Outcome, Response) {
        (self.outcome(), self.response())
    }
}

impl From<&FillError> for Failure {
    fn from(e: &FillError) -> Self {
        let detail = e.to_string();
        match e {
            FillError::Fetch(FetchError::NotFound) => Failure::origin(
                StatusCode::NOT_FOUND,
                "NoSuchKey",
                "the origin does not have this object",
                detail,
                false,
            ),
            FillError::Fetch(FetchError::Timeout) => Failure::origin(
                StatusCode::GATEWAY_TIMEOUT,
                "OriginTimeout",
                "the origin timed out",
                detail,
                true,
            ),
            FillError::Fetch(FetchError::Forbidden(_)) => Failure::origin(
                StatusCode::BAD_GATEWAY,
                "OriginForbidden",
                "the origin redirected to an address the mirror does not fetch from",
                detail,
                false,
            ),
            FillError::Fetch(FetchError::Unreachable(_)) => Failure::origin(
                StatusCode::BAD_GATEWAY,
                "MirrorFailed",
                "the origin could not be reached",
                detail,
                true,
            ),
            FillError::Fetch(FetchError::Status(s)) => Failure::origin(
                StatusCode::BAD_GATEWAY,
                "MirrorFailed",
                "the origin answered with an error",
                format!("{detail} ({s})"),
                *s >= 500,
            ),
            FillError::Fetch(FetchError::TooManyRedirects) => Failure::origin(
                StatusCode::BAD_GATEWAY,
                "MirrorFailed",
                "the origin redirected too many times",
                detail,
                false,
            ),
            FillError::Fetch(FetchError::Invalid(_)) => Failure::origin(
                StatusCode::BAD_GATEWAY,
                "MirrorFailed",
                "the origin sent a bad response",
                detail,
                false,
            ),
            FillError::TooLarge(_) => Failure::origin(
                StatusCode::BAD_GATEWAY,
                "ObjectTooLarge",
                "the object is larger than this rule allows",
                detail,
                false,
            ),
            FillError::Truncated { .. } => Failure::origin(
                StatusCode::BAD_GATEWAY,
                "MirrorFailed",
                "the origin body was cut short",
                detail,
                true,
            ),
            FillError::Md5Mismatch => Failure::origin(
                StatusCode::BAD_GATEWAY,
                "MirrorFailed",
                "the origin body does not match its Content-MD5",
                detail,
                true,
            ),
            FillError::Store(_) => Failure::store(detail),
            FillError::Ended => {
                Failure::internal("MirrorFailed", "the fill ended early; try again", detail, true)
            }
        }
    }
}

impl From<&RenderError> for Failure {
    fn from(e: &RenderError) -> Self {
        let bad = |field: &str| {
            Failure::client(StatusCode::BAD_REQUEST, "InvalidArgument", Some(field), e.to_string())
        };
        match e {
            RenderError::UnsupportedFormat => Failure::client(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "ImageFormatUnsupported",
                None,
                e.to_string(),
            ),
            RenderError::OutputTooLarge { .. } => bad("x-oss-process"),
            RenderError::BadParameter { param, .. } => bad(param),
            RenderError::WatermarkMissing(_) => bad("image"),
            RenderError::TimedOut => Failure::busy(e.to_string()),
            RenderError::Encode(_) => {
                Failure::internal("ImageEncodeFailed", "the image could not be encoded", e, false)
            }
            // The original is not an image this gateway can decode within its limits: about
            // the object the client named, so the reason is theirs to read.
            _ => Failure::client(
                StatusCode::UNPROCESSABLE_ENTITY,
                "ImageTooLargeOrInvalid",
                None,
                e.to_string(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_side_failures_never_send_their_detail() {
        let secret = "connect 10.1.2.3:8080: connection refused";
        for e in [
            FillError::Fetch(FetchError::Unreachable(secret.into())),
            FillError::Fetch(FetchError::Forbidden(secret.into())),
            FillError::Fetch(FetchError::Invalid(secret.into())),
            FillError::Store(std::sync::Arc::new(std::io::Error::other(secret))),
        ] {
            let failure = Failure::from(&e);
            assert_ne!(failure.side(), Side::Client);
            let resp = failure.response();
            assert!(resp.status().is_server_error());
            assert!(resp.extensions().get::<Side>().is_some());
            let body = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(axum::body::to_bytes(resp.into_body(), 4096))
                .unwrap();
            let text = String::from_utf8_lossy(&body);
            assert!(!text.contains("10.1.2.3"), "{e:?} leaked: {text}");
        }
    }

    #[test]
    fn sides_retries_and_outcomes() {
        let not_found = Failure::from(&FillError::Fetch(FetchError::NotFound));
        assert_eq!(
            (not_found.side(), not_found.outcome(), not_found.retryable()),
            (Side::Origin, Outcome::NotFound, false)
        );
        let timeout = Failure::from(&FillError::Fetch(FetchError::Timeout));
        assert_eq!(
            (timeout.side(), timeout.outcome(), timeout.retryable()),
            (Side::Origin, Outcome::Error, true)
        );
        let store = Failure::from(&FillError::Store(std::sync::Arc::new(std::io::Error::other("disk"))));
        assert!(store.retryable());
        let resp = store.response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], RETRY_AFTER_S);
        assert_eq!(resp.extensions().get::<Side>(), Some(&Side::Store));
        let bad = Failure::client(StatusCode::BAD_REQUEST, "InvalidArgument", Some("path"), "bad segment");
        assert_eq!(bad.side(), Side::Client);
    }
}
