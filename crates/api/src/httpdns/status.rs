//! The `X-Httpdns-Status` header every answer route sets: one outcome per name.

use axum::http::{HeaderName, HeaderValue};
use httpdns_answer::Outcome;

/// Header naming the outcome of each name (a constant: a name given as text is parsed and
/// looked up in the standard-header table on every insert).
pub const STATUS_HEADER: HeaderName = HeaderName::from_static("x-httpdns-status");

/// The `X-Httpdns-Status` value: one outcome per name, comma-separated.
pub fn status_header(outcomes: &[Outcome]) -> HeaderValue {
    match outcomes {
        [one] => HeaderValue::from_static(one.as_str()),
        many => {
            let joined = many.iter().map(|o| o.as_str()).collect::<Vec<_>>().join(",");
            HeaderValue::from_str(&joined).expect("outcome words are valid header text")
        }
    }
}
