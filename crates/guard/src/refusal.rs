//! [`Refusal`]: why a guard turned a request away, as the edge answers it.

use std::borrow::Cow;

use http::StatusCode;

/// A request refused by a guard: the status, a stable machine-readable code (Alibaba-style,
/// e.g. `InvalidAccount`), the message, and the parameter at fault when there is one. The
/// HTTP edge turns it into its JSON error unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: Cow<'static, str>,
    pub field: Option<&'static str>,
}

impl Refusal {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self { status, code, message: message.into(), field: None }
    }

    pub fn with_field(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }

    pub fn bad_request(
        code: &'static str,
        field: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message).with_field(field)
    }

    pub fn forbidden(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }

    /// `429 Throttled`: the account's rate limit is reached.
    pub fn account_throttled() -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, "Throttled", "the account's rate limit is reached")
    }

    /// The 429 of a client over its per-address limit.
    pub fn client_throttled() -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Throttled",
            "too many requests from this address; slow down",
        )
    }
}
