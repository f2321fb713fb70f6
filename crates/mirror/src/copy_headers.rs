//! The response headers of a stored copy, built once per copy instead of once per response:
//! formatting a date, an entity tag and a length is a measurable share of a small hit.

use std::time::SystemTime;

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};

use crate::objects::StoredMeta;

/// Header values of one copy. Built when its metadata is read, kept with it.
#[derive(Debug)]
pub(crate) struct CopyHeaders {
    etag: HeaderValue,
    last_modified: HeaderValue,
    content_type: HeaderValue,
    length: HeaderValue,
    replay: Vec<(HeaderName, HeaderValue)>,
    stored_at: SystemTime,
}

impl CopyHeaders {
    pub(crate) fn new(meta: &StoredMeta) -> Self {
        let replay = replayed(&meta.headers).collect();
        Self {
            etag: value(&meta.etag),
            last_modified: value(&httpdate::fmt_http_date(meta.last_modified())),
            content_type: value(&meta.content_type),
            length: HeaderValue::from(meta.length),
            replay,
            stored_at: meta.stored_at(),
        }
    }

    /// `Content-Length` of the whole body.
    pub(crate) fn full_length(&self) -> HeaderValue {
        self.length.clone()
    }

    /// `Content-Type` and the origin headers kept with the copy.
    pub(crate) fn content(&self, hm: &mut HeaderMap) {
        hm.insert(header::CONTENT_TYPE, self.content_type.clone());
        for (k, v) in &self.replay {
            hm.insert(k.clone(), v.clone());
        }
    }

    /// `ETag`, `Last-Modified`, `Accept-Ranges`, `X-Cache` and `Age`.
    pub(crate) fn validators(&self, hm: &mut HeaderMap, cache: &'static str) {
        hm.insert(header::ETAG, self.etag.clone());
        hm.insert(header::LAST_MODIFIED, self.last_modified.clone());
        hm.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        hm.insert("x-cache", HeaderValue::from_static(cache));
        let age = httpdns_core::clock::now().duration_since(self.stored_at).map_or(0, |d| d.as_secs());
        hm.insert(header::AGE, HeaderValue::from(age));
    }
}

/// The origin header lines kept with a copy, as header values. Lines that are not valid
/// header values (only a corrupted store holds such) are dropped rather than sent broken.
pub(crate) fn replayed(headers: &[(String, String)]) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
    headers.iter().filter_map(|(k, v)| {
        Some((HeaderName::from_bytes(k.as_bytes()).ok()?, HeaderValue::from_str(v).ok()?))
    })
}

/// A header value from text we produced or stored; text that cannot be one (it was checked
/// on the way in, so only a corrupted store) becomes `invalid` rather than a panic.
pub(crate) fn value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_match_the_metadata() {
        let mut meta = StoredMeta::for_body("image/png", b"12345");
        meta.origin_last_modified = Some("Wed, 21 Oct 2015 07:28:00 GMT".into());
        meta.headers = vec![("cache-control".into(), "max-age=60".into()), ("bad name".into(), "x".into())];
        let h = CopyHeaders::new(&meta);
        let mut hm = HeaderMap::new();
        h.content(&mut hm);
        h.validators(&mut hm, "HIT");
        assert_eq!(hm["content-type"], "image/png");
        assert_eq!(hm["cache-control"], "max-age=60");
        assert_eq!(hm["etag"], meta.etag.as_str());
        assert_eq!(hm["last-modified"], "Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(hm["x-cache"], "HIT");
        assert_eq!(hm["accept-ranges"], "bytes");
        assert!(hm["age"].to_str().unwrap().parse::<u64>().unwrap() < 5);
        assert_eq!(h.full_length(), "5");
        assert_eq!(hm.len(), 7, "the header with a bad name is dropped: {hm:?}");
    }
}
