//! Canonical object keys: the only way a request path becomes a store path or an origin path.
//!
//! A key is a list of segments, each percent-decoded exactly once and checked: no `.` or `..`
//! (also when spelled `%2e%2e`), no `/` or `\` inside a segment (an encoded `%2f` is not a
//! separator here and never becomes one later), no NUL or other control characters, valid
//! UTF-8, no empty segments (`a//b`, a trailing `/`). Keys are at most [`MAX_KEY_BYTES`]
//! (S3's limit). Whatever passes can only name a file below the store root, and the origin
//! path is rebuilt from the segments with a strict encoder, so what the origin sees is
//! exactly what is stored.

use std::fmt;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// S3's object key limit, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// A file name limit on common file systems.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// Everything but RFC 3986 unreserved characters is encoded in origin paths.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Why a path is not a key. The message is for the client's 400 body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(pub &'static str);

/// A canonical, validated object key (segments joined by `/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    segments: Vec<String>,
}

impl ObjectKey {
    /// Parses the still percent-encoded path after the rule's prefix (no leading `/`).
    pub fn parse(raw: &str) -> Result<Self, KeyError> {
        if raw.is_empty() {
            return Err(KeyError("the object key is empty"));
        }
        if raw.len() > MAX_KEY_BYTES * 3 {
            return Err(KeyError("the object key is too long"));
        }
        let mut segments = Vec::new();
        let mut total = 0usize;
        for part in raw.split('/') {
            let segment = decode_segment(part)?;
            total += segment.len() + usize::from(!segments.is_empty());
            if total > MAX_KEY_BYTES {
                return Err(KeyError("the object key is longer than 1024 bytes"));
            }
            segments.push(segment);
        }
        Ok(Self { segments })
    }

    /// Builds a key from already decoded segments (admin writes), with the same checks.
    pub fn from_segments<I: IntoIterator<Item = String>>(parts: I) -> Result<Self, KeyError> {
        let segments: Vec<String> = parts.into_iter().collect();
        if segments.is_empty() {
            return Err(KeyError("the object key is empty"));
        }
        for s in &segments {
            check_segment(s)?;
        }
        if segments.iter().map(|s| s.len() + 1).sum::<usize>() - 1 > MAX_KEY_BYTES {
            return Err(KeyError("the object key is longer than 1024 bytes"));
        }
        Ok(Self { segments })
    }

    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// The key percent-encoded for an origin URL path (no leading `/`).
    pub fn encoded(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.segments.iter().enumerate() {
            if i > 0 {
                out.push('/');
            }
            out.extend(utf8_percent_encode(s, SEGMENT));
        }
        out
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.segments.join("/"))
    }
}

fn decode_segment(part: &str) -> Result<String, KeyError> {
    if part.is_empty() {
        return Err(KeyError("the object key has an empty segment ('//' or a trailing '/')"));
    }
    let bytes: Vec<u8> = percent_decode_str(part).collect();
    let segment = String::from_utf8(bytes).map_err(|_| KeyError("the object key is not valid UTF-8"))?;
    check_segment(&segment)?;
    Ok(segment)
}

fn check_segment(segment: &str) -> Result<(), KeyError> {
    if segment.is_empty() {
        return Err(KeyError("the object key has an empty segment ('//' or a trailing '/')"));
    }
    if segment == "." || segment == ".." {
        return Err(KeyError("'.' and '..' segments are not allowed in object keys"));
    }
    if segment.len() > MAX_SEGMENT_BYTES {
        return Err(KeyError("an object key segment is longer than 255 bytes"));
    }
    if segment.contains(['/', '\\']) {
        return Err(KeyError("encoded '/' or '\\' is not allowed in object keys"));
    }
    if segment.chars().any(char::is_control) {
        return Err(KeyError("control characters (NUL included) are not allowed in object keys"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_keys_pass_and_decode_once() {
        let k = ObjectKey::parse("a/b%20c/d.jpg").unwrap();
        assert_eq!(k.segments(), ["a", "b c", "d.jpg"]);
        assert_eq!(k.to_string(), "a/b c/d.jpg");
        assert_eq!(k.encoded(), "a/b%20c/d.jpg");
        // Decoded once: "%2541" is the literal text "%41", never "A".
        assert_eq!(ObjectKey::parse("%2541").unwrap().segments(), ["%41"]);
        assert_eq!(ObjectKey::parse("%2541").unwrap().encoded(), "%2541");
        assert_eq!(ObjectKey::parse("%E4%B8%AD.png").unwrap().segments(), ["中.png"]);
    }

    #[test]
    fn traversal_and_aliases_are_refused() {
        for bad in [
            "..",
            "../x",
            "a/../b",
            "a/./b",
            "%2e%2e/x",
            "%2E%2E",
            ".%2e/etc/passwd",
            "a%2fb",
            "a%2F..%2Fb",
            "a%5cb",
            "a\\b",
            "a%00b",
            "a%0ab",
            "a//b",
            "a/",
            "/a",
            "",
            "%ff%fe",
        ] {
            assert!(ObjectKey::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn length_limits() {
        let long_segment = "a".repeat(256);
        assert!(ObjectKey::parse(&long_segment).is_err());
        let ok = vec!["a".repeat(200); 5].join("/");
        assert!(ObjectKey::parse(&ok).is_ok()); // 1004 bytes
        let too_long = vec!["a".repeat(200); 6].join("/");
        assert!(ObjectKey::parse(&too_long).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever the input, an accepted key has only safe segments, and re-parsing its
        /// encoded form gives the same key (the origin path and the store path agree).
        #[test]
        fn accepted_keys_are_safe_and_stable(raw in "[a-zA-Z0-9%./\\\\_ -]{0,40}|(%[0-9a-fA-F]{2}|[a./])*") {
            if let Ok(key) = ObjectKey::parse(&raw) {
                for s in key.segments() {
                    prop_assert!(s != "." && s != ".." && !s.is_empty());
                    prop_assert!(!s.contains('/') && !s.contains('\\') && !s.contains('\0'));
                }
                let again = ObjectKey::parse(&key.encoded()).unwrap();
                prop_assert_eq!(again, key);
            }
        }

        #[test]
        fn never_panics(raw in any::<String>()) {
            let _ = ObjectKey::parse(&raw);
        }
    }
}
