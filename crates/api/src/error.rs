//! The API layer's error type and its JSON form.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use httpdns_core::model::FieldError;
use serde::Serialize;

/// An error answered to a client: a status and a JSON body
/// `{"error": "...", "field": "...", "code": "..."}`.
///
/// 5xx errors carry a generic message; their cause is logged where they are made, never sent.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    /// A stable machine-readable code (Alibaba-style for `/resolve`, e.g. `InvalidHost`).
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), field: None }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn bad_request(code: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message).with_field(field)
    }

    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }

    pub fn invalid(e: FieldError) -> Self {
        Self::bad_request("InvalidArgument", e.field, e.message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFound", what)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "missing or wrong bearer token: send 'Authorization: Bearer <admin token>'",
        )
    }

    /// An internal failure. `cause` is logged, not returned.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(%cause, "Internal error.");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", "internal error")
    }

    /// The store is unreachable. Writes are transactions, so a failed write left nothing
    /// behind; the client may retry.
    pub fn unavailable(cause: &dyn std::fmt::Display) -> Self {
        tracing::warn!(%cause, "Store unavailable.");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "StoreUnavailable",
            "the database is unavailable; nothing was changed, try again",
        )
    }
}

impl ApiError {
    /// The mirror's object store (disk or bucket) failed. Writes there are atomic, so a
    /// failed one left nothing behind; the client may retry.
    pub fn object_store_unavailable(cause: &dyn std::fmt::Display) -> Self {
        tracing::warn!(%cause, "Mirror object store unavailable.");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ObjectStoreUnavailable",
            "the mirror's object store failed; nothing was changed, try again",
        )
    }
}

impl ApiError {
    /// The response as one buffer, for the listener's shortcut (`crate::shortcut`) and the router
    /// alike.
    pub fn into_whole(self) -> Response<axum::body::Bytes> {
        let body =
            serde_json::to_vec(&Body { code: self.code, error: &self.message, field: self.field.as_deref() })
                .unwrap_or_default();
        let mut resp = Response::new(body.into());
        *resp.status_mut() = self.status;
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.into_whole().map(axum::body::Body::from)
    }
}

impl From<httpdns_guard::Refusal> for ApiError {
    fn from(r: httpdns_guard::Refusal) -> Self {
        Self {
            status: r.status,
            code: r.code,
            message: r.message.into_owned(),
            field: r.field.map(str::to_owned),
        }
    }
}
