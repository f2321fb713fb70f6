//! HTTP semantics of serving a stored copy (RFC 9110 §13, §14): `Range`, `If-Range`,
//! `If-None-Match`, `If-Modified-Since`. Pure: headers in, a decision out.

use std::time::SystemTime;

use axum::http::{header, HeaderMap};

/// What to send for a request, given the stored copy's validators and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// 304: the client's copy is current.
    NotModified,
    /// 200 with the whole body.
    Full,
    /// 206 with bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// The request headers that matter, as strings (absent: `None`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Preconditions<'a> {
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    pub range: Option<&'a str>,
    pub if_range: Option<&'a str>,
}

impl<'a> Preconditions<'a> {
    /// The preconditions `headers` carry (a value that is not text counts as absent).
    pub fn of(headers: &'a HeaderMap) -> Self {
        let h = |n: header::HeaderName| headers.get(n).and_then(|v| v.to_str().ok());
        Self {
            if_none_match: h(header::IF_NONE_MATCH),
            if_modified_since: h(header::IF_MODIFIED_SINCE),
            range: h(header::RANGE),
            if_range: h(header::IF_RANGE),
        }
    }
}

/// Decides the response for a `GET`/`HEAD` of a stored copy with strong `etag` (quoted) and
/// `last_modified`, `len` bytes long.
pub fn decide(p: &Preconditions<'_>, etag: &str, last_modified: SystemTime, len: u64) -> Decision {
    // §13.2.2: If-None-Match first; If-Modified-Since only when there is no If-None-Match.
    if let Some(inm) = p.if_none_match {
        if etag_list_matches(inm, etag, false) {
            return Decision::NotModified;
        }
    } else if let Some(ims) = p.if_modified_since.and_then(|v| httpdate::parse_http_date(v.trim()).ok()) {
        if truncate_to_secs(last_modified) <= ims {
            return Decision::NotModified;
        }
    }
    let Some(range) = p.range else { return Decision::Full };
    if let Some(ir) = p.if_range {
        if !if_range_holds(ir.trim(), etag, last_modified) {
            // §13.1.5: a failed If-Range means "send it all", never a splice of two versions.
            return Decision::Full;
        }
    }
    parse_range(range, len)
}

/// A single byte range against a representation of `len` bytes. Syntax this server does not
/// serve (other units, several ranges, garbage) is ignored, which RFC 9110 §14.2 allows: the
/// answer is the full 200.
pub fn parse_range(header: &str, len: u64) -> Decision {
    let Some(spec) = header.trim().strip_prefix("bytes=") else { return Decision::Full };
    let spec = spec.trim();
    if spec.contains(',') {
        return Decision::Full;
    }
    let Some((first, last)) = spec.split_once('-') else { return Decision::Full };
    let (first, last) = (first.trim(), last.trim());
    let digits = |s: &str| !s.is_empty() && s.len() <= 19 && s.bytes().all(|b| b.is_ascii_digit());
    if first.is_empty() {
        // Suffix range: the last N bytes.
        if !digits(last) {
            return Decision::Full;
        }
        let n: u64 = last.parse().unwrap_or(0);
        if n == 0 || len == 0 {
            return Decision::Unsatisfiable;
        }
        return Decision::Partial { start: len.saturating_sub(n), end: len - 1 };
    }
    if !digits(first) || !(last.is_empty() || digits(last)) {
        return Decision::Full;
    }
    let start: u64 = first.parse().unwrap_or(u64::MAX);
    let end = if last.is_empty() { u64::MAX } else { last.parse().unwrap_or(u64::MAX) };
    if end < start {
        return Decision::Full; // invalid range-spec: ignored
    }
    if start >= len {
        return Decision::Unsatisfiable;
    }
    Decision::Partial { start, end: end.min(len - 1) }
}

/// `If-None-Match` (weak comparison) or `If-Match`-style lists: `*` or quoted tags.
fn etag_list_matches(list: &str, etag: &str, strong: bool) -> bool {
    let list = list.trim();
    if list == "*" {
        return true;
    }
    let ours = etag.trim_start_matches("W/");
    list.split(',').map(str::trim).any(|t| {
        if strong && t.starts_with("W/") {
            return false;
        }
        t.trim_start_matches("W/") == ours
    })
}

fn if_range_holds(value: &str, etag: &str, last_modified: SystemTime) -> bool {
    if value.starts_with('"') || value.starts_with("W/") {
        // Strong comparison only (§13.1.5).
        return !value.starts_with("W/") && value == etag;
    }
    httpdate::parse_http_date(value).is_ok_and(|d| d == truncate_to_secs(last_modified))
}

fn truncate_to_secs(t: SystemTime) -> SystemTime {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const TAG: &str = "\"abc\"";

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn d(p: Preconditions<'_>) -> Decision {
        decide(&p, TAG, t0(), 1000)
    }

    #[test]
    fn ranges() {
        let r = |h: &str| parse_range(h, 1000);
        assert_eq!(r("bytes=0-99"), Decision::Partial { start: 0, end: 99 });
        assert_eq!(r("bytes=900-"), Decision::Partial { start: 900, end: 999 });
        assert_eq!(r("bytes=-100"), Decision::Partial { start: 900, end: 999 });
        assert_eq!(r("bytes=-5000"), Decision::Partial { start: 0, end: 999 });
        assert_eq!(r("bytes=990-5000"), Decision::Partial { start: 990, end: 999 });
        assert_eq!(r("bytes=1000-"), Decision::Unsatisfiable);
        assert_eq!(r("bytes=-0"), Decision::Unsatisfiable);
        assert_eq!(r("bytes=5-1"), Decision::Full);
        assert_eq!(r("bytes=0-1,5-9"), Decision::Full);
        assert_eq!(r("items=0-1"), Decision::Full);
        assert_eq!(r("bytes=a-b"), Decision::Full);
        assert_eq!(r("bytes=99999999999999999999-"), Decision::Full);
        assert_eq!(parse_range("bytes=0-", 0), Decision::Unsatisfiable);
    }

    #[test]
    fn conditionals() {
        assert_eq!(
            d(Preconditions { if_none_match: Some(TAG), ..Default::default() }),
            Decision::NotModified
        );
        assert_eq!(
            d(Preconditions { if_none_match: Some("\"x\", W/\"abc\""), ..Default::default() }),
            Decision::NotModified
        );
        assert_eq!(
            d(Preconditions { if_none_match: Some("*"), ..Default::default() }),
            Decision::NotModified
        );
        assert_eq!(
            d(Preconditions { if_none_match: Some("\"other\""), ..Default::default() }),
            Decision::Full
        );
        let later = httpdate::fmt_http_date(t0() + Duration::from_secs(10));
        let earlier = httpdate::fmt_http_date(t0() - Duration::from_secs(10));
        let same = httpdate::fmt_http_date(t0());
        assert_eq!(
            d(Preconditions { if_modified_since: Some(&later), ..Default::default() }),
            Decision::NotModified
        );
        assert_eq!(
            d(Preconditions { if_modified_since: Some(&same), ..Default::default() }),
            Decision::NotModified
        );
        assert_eq!(
            d(Preconditions { if_modified_since: Some(&earlier), ..Default::default() }),
            Decision::Full
        );
        // If-None-Match wins over If-Modified-Since.
        assert_eq!(
            d(Preconditions {
                if_none_match: Some("\"other\""),
                if_modified_since: Some(&later),
                ..Default::default()
            }),
            Decision::Full
        );
    }

    #[test]
    fn if_range() {
        let same = httpdate::fmt_http_date(t0());
        let p = |ir: &'static str| Preconditions {
            range: Some("bytes=0-9"),
            if_range: Some(ir),
            ..Default::default()
        };
        assert_eq!(d(p("\"abc\"")), Decision::Partial { start: 0, end: 9 });
        assert_eq!(d(p("\"old\"")), Decision::Full);
        assert_eq!(d(p("W/\"abc\"")), Decision::Full);
        let with_date =
            Preconditions { range: Some("bytes=0-9"), if_range: Some(&same), ..Default::default() };
        assert_eq!(d(with_date), Decision::Partial { start: 0, end: 9 });
    }
}
