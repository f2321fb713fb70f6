//! Lowercase tokens naming an ISP, a region or a pool.
//!
//! Operators type these into the admin API and GeoIP data produces them, so both sides must
//! agree on one spelling: ASCII lowercase letters, digits, `-` and `_`, 1..=64 characters.
//! Comparing two tokens is then a plain string comparison.

use std::fmt;
use std::sync::Arc;

/// Maximum length of a token.
pub const MAX_TOKEN_LEN: usize = 64;

/// A validated lowercase token (`telecom`, `beijing`, `edge`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(Arc<str>);

/// Why a string is not a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to {MAX_TOKEN_LEN} characters of lowercase letters, digits, '-' or '_'")]
pub struct TokenError;

impl Token {
    /// Accepts `input` only if it already is a valid token; no case folding, so that what an
    /// operator stores is exactly what they read back.
    pub fn parse(input: &str) -> Result<Self, TokenError> {
        let valid = !input.is_empty()
            && input.len() <= MAX_TOKEN_LEN
            && input.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if valid {
            Ok(Self(input.into()))
        } else {
            Err(TokenError)
        }
    }

    /// Folds free text (a GeoIP subdivision name such as "Inner Mongolia") into a token by
    /// lowercasing and dropping everything that is not a letter or digit. Returns `None` when
    /// nothing is left.
    pub fn fold(input: &str) -> Option<Self> {
        let folded: String = input
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .take(MAX_TOKEN_LEN)
            .collect();
        (!folded.is_empty()).then(|| Self(folded.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl serde::Serialize for Token {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Token {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_lowercase_tokens_only() {
        for ok in ["telecom", "beijing", "edge-1", "cn_north", "a"] {
            assert_eq!(Token::parse(ok).unwrap().as_str(), ok);
        }
        for bad in ["", "Telecom", "bei jing", "x.y", "中国", &"a".repeat(65)] {
            assert!(Token::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn folds_free_text() {
        assert_eq!(Token::fold("Inner Mongolia").unwrap().as_str(), "innermongolia");
        assert_eq!(Token::fold("Beijing").unwrap().as_str(), "beijing");
        assert!(Token::fold("  ").is_none());
    }
}
