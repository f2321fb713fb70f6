//! Domain names, validated once at the edge.
//!
//! A [`DomainName`] is always lowercase, ASCII (IDN labels are converted to punycode), has no
//! trailing dot, is at most 253 octets in its textual form, and every label is 1..=63 octets of
//! LDH (letters, digits, hyphen; no leading or trailing hyphen). An underscore is accepted as
//! the first character of a label because service names (`_sip._tcp.example.com`) are real
//! queries, but nowhere else. Code that holds a `DomainName` never re-checks any of this.

use std::fmt;
use std::str::FromStr;

/// Maximum length of a name in presentation format without the trailing dot (RFC 1035 §2.3.4:
/// 255 octets on the wire, which is 253 characters of text).
pub const MAX_NAME_LEN: usize = 253;
/// Maximum length of one label (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;

/// A validated, normalised domain name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainName(Box<str>);

/// Why a string is not a domain name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    #[error("domain name is empty")]
    Empty,
    #[error("domain name is longer than {MAX_NAME_LEN} characters")]
    TooLong,
    #[error("domain name has an empty label")]
    EmptyLabel,
    #[error("label {0:?} is longer than {MAX_LABEL_LEN} characters")]
    LabelTooLong(String),
    #[error("label {0:?} holds a character that is not a letter, digit or hyphen")]
    BadCharacter(String),
    #[error("label {0:?} starts or ends with a hyphen")]
    BadHyphen(String),
    #[error("internationalised name cannot be converted to punycode")]
    Idna,
    #[error("top-level label {0:?} is all digits")]
    NumericTld(String),
}

impl DomainName {
    /// Parses and normalises `input`: trims one trailing dot, lowercases, converts IDN labels to
    /// punycode and checks the length and character rules.
    pub fn parse(input: &str) -> Result<Self, NameError> {
        let trimmed = input.strip_suffix('.').unwrap_or(input);
        if trimmed.is_empty() {
            return Err(NameError::Empty);
        }
        let ascii: String = if trimmed.is_ascii() {
            trimmed.to_ascii_lowercase()
        } else {
            // UTS 46 processing lowercases and maps the Unicode form, then punycodes it.
            idna::domain_to_ascii_strict(trimmed).map_err(|_| NameError::Idna)?
        };
        Self::check(&ascii)?;
        Ok(Self(ascii.into_boxed_str()))
    }

    /// [`parse`](Self::parse), also accepting a wildcard: `*.` followed by a name of at least
    /// two labels (`*.img.example.com`; `*.com` would capture a whole TLD). A wildcard stands
    /// for exactly one label (see [`wildcard_parent`](Self::wildcard_parent)).
    pub fn parse_pattern(input: &str) -> Result<Self, NameError> {
        let Some(rest) = input.strip_prefix("*.") else { return Self::parse(input) };
        let parent = Self::parse(rest)?;
        if !parent.as_str().contains('.') {
            return Err(NameError::BadCharacter("*".to_owned()));
        }
        Ok(Self(format!("*.{parent}").into_boxed_str()))
    }

    /// For a wildcard `*.img.example.com`, the name its label stands under: `img.example.com`.
    pub fn wildcard_parent(&self) -> Option<&str> {
        self.0.strip_prefix("*.")
    }

    fn check(name: &str) -> Result<(), NameError> {
        // One pass over the bytes for the common valid name; only a refused one walks the
        // labels again to say why.
        if is_valid(name.as_bytes()) {
            return Ok(());
        }
        Self::why_invalid(name)
    }

    fn why_invalid(name: &str) -> Result<(), NameError> {
        if name.is_empty() {
            return Err(NameError::Empty);
        }
        if name.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong);
        }
        let mut last = "";
        for label in name.split('.') {
            if label.is_empty() {
                return Err(NameError::EmptyLabel);
            }
            if label.len() > MAX_LABEL_LEN {
                return Err(NameError::LabelTooLong(label.to_owned()));
            }
            let body = label.strip_prefix('_').unwrap_or(label);
            if body.is_empty()
                || !body.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(NameError::BadCharacter(label.to_owned()));
            }
            if body.starts_with('-') || body.ends_with('-') {
                return Err(NameError::BadHyphen(label.to_owned()));
            }
            last = label;
        }
        // An all-numeric last label would make `1.2.3.4` a "domain"; no TLD is numeric.
        if last.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NameError::NumericTld(last.to_owned()));
        }
        Ok(())
    }

    /// The name without a trailing dot, lowercase ASCII.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The labels from left to right.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.0.split('.')
    }
}

/// Whether [`DomainName::check`] accepts `name` (lowercase ASCII), in one pass over its bytes
/// with no per-label searches (it runs for every name of every `/d` request).
fn is_valid(name: &[u8]) -> bool {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return false;
    }
    // The current label: its length (with a leading underscore), whether its body (after the
    // underscore) is still empty, its body's last byte, and whether it is all digits so far.
    let (mut len, mut empty, mut last, mut digits) = (0usize, true, 0u8, true);
    for &b in name {
        match b {
            b'.' => {
                if empty || last == b'-' {
                    return false;
                }
                (len, empty, digits) = (0, true, true);
                continue;
            }
            b'_' if len == 0 => digits = false,
            b'a'..=b'z' | b'-' => {
                if empty && b == b'-' {
                    return false;
                }
                (empty, last, digits) = (false, b, false);
            }
            b'0'..=b'9' => (empty, last) = (false, b),
            _ => return false,
        }
        len += 1;
        if len > MAX_LABEL_LEN {
            return false;
        }
    }
    // No top-level label is all digits (that would make `1.2.3.4` a name).
    !empty && last != b'-' && !digits
}

impl FromStr for DomainName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DomainName({})", self.0)
    }
}

/// Maps keyed by `DomainName` can be asked with a `&str` (already lowercase, no trailing dot):
/// the name hashes and compares as its text does.
impl std::borrow::Borrow<str> for DomainName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for DomainName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for DomainName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for DomainName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(input: &str, expect: &str) {
        assert_eq!(DomainName::parse(input).unwrap().as_str(), expect, "{input}");
    }

    fn bad(input: &str) -> NameError {
        DomainName::parse(input).expect_err(input)
    }

    #[test]
    fn normalises_case_and_trailing_dot() {
        ok("WWW.Example.COM.", "www.example.com");
        ok("www.dnspod.cn.", "www.dnspod.cn");
        ok("a-b.c0.io", "a-b.c0.io");
        ok("_sip._tcp.example.com", "_sip._tcp.example.com");
        ok("xn--fiqs8s.cn", "xn--fiqs8s.cn");
    }

    #[test]
    fn converts_idn_to_punycode() {
        ok("中国.cn", "xn--fiqs8s.cn");
        ok("Bücher.example", "xn--bcher-kva.example");
    }

    #[test]
    fn rejects_malformed_names() {
        assert_eq!(bad(""), NameError::Empty);
        assert_eq!(bad("."), NameError::Empty);
        assert_eq!(bad("a..b"), NameError::EmptyLabel);
        assert_eq!(bad(".a"), NameError::EmptyLabel);
        assert_eq!(bad("a.b.."), NameError::EmptyLabel);
        assert!(matches!(bad("-a.com"), NameError::BadHyphen(_)));
        assert!(matches!(bad("a-.com"), NameError::BadHyphen(_)));
        assert!(matches!(bad("a b.com"), NameError::BadCharacter(_)));
        assert!(matches!(bad("a_b.com"), NameError::BadCharacter(_)));
        assert!(matches!(bad("a/b.com"), NameError::BadCharacter(_)));
        assert!(matches!(bad("a\0.com"), NameError::BadCharacter(_)));
        assert!(matches!(bad("1.2.3.4"), NameError::NumericTld(_)));
    }

    #[test]
    fn enforces_length_limits() {
        let label63 = "a".repeat(63);
        ok(&format!("{label63}.com"), &format!("{label63}.com"));
        assert!(matches!(bad(&format!("{label63}a.com")), NameError::LabelTooLong(_)));

        // 4 labels of 63 + 3 dots = 255 > 253.
        let long = [label63.as_str(); 4].join(".");
        assert_eq!(bad(&long), NameError::TooLong);
        // Exactly 253 characters is allowed: 63+1+63+1+63+1+61.
        let exact = format!("{l}.{l}.{l}.{}", "b".repeat(61), l = label63);
        assert_eq!(exact.len(), 253);
        ok(&exact, &exact);
        ok(&format!("{exact}."), &exact);
        assert_eq!(bad(&"a".repeat(300)), NameError::TooLong);
    }

    #[test]
    fn wildcards_only_where_asked_and_only_whole_leading_labels() {
        let w = DomainName::parse_pattern("*.IMG.example.com.").unwrap();
        assert_eq!((w.as_str(), w.wildcard_parent()), ("*.img.example.com", Some("img.example.com")));
        assert_eq!(DomainName::parse_pattern("a.example.com").unwrap().wildcard_parent(), None);
        assert!(DomainName::parse("*.example.com").is_err());
        for bad in ["*.com", "a.*.example.com", "*a.example.com", "*.*.example.com", "*"] {
            assert!(DomainName::parse_pattern(bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        /// The one-pass check accepts exactly what the label-by-label one does.
        #[test]
        fn one_pass_check_agrees(name in "([a-z0-9_\\-]{0,4}\\.?){0,6}|[a-z0-9.\\-_A/ ]{0,300}|(a{60,66}\\.){3,4}a{0,66}") {
            proptest::prop_assert_eq!(is_valid(name.as_bytes()), DomainName::why_invalid(&name).is_ok(), "{:?}", name);
        }
    }
}
