//! Image styles as operators write them (`/admin/v1/mirror/styles/{name}`): a named
//! `x-oss-process` chain for `x-oss-process=style/<name>`. The chain is checked by the
//! grammar of `httpdns-image` built without its codecs (no renderer in this crate).

use httpdns_image::{ImageProcess, ProcessError};
use serde::{Deserialize, Serialize};

use crate::model::FieldError;

/// One style as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StyleSpec {
    /// The chain, as `x-oss-process` takes it: `image/resize,w_200/quality,q_80`.
    pub process: String,
}

impl StyleSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        self.compile().map(|_| ()).map_err(|e| FieldError::new("process", e.to_string()))
    }

    pub fn compile(&self) -> Result<ImageProcess, ProcessError> {
        httpdns_image::parse(&self.process)
    }
}

/// Style names as OSS allows them: 1 to 64 letters, digits, `-`, `_` and `.`.
pub fn validate_style_name(name: &str) -> Result<(), FieldError> {
    let ok = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(FieldError::new("name", "must be 1 to 64 letters, digits, '-', '_' or '.'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn styles_validate_their_chain_and_names() {
        StyleSpec { process: "image/resize,w_100/quality,q_80".into() }.validate().unwrap();
        let bad = StyleSpec { process: "image/resize,w_0".into() }.validate().unwrap_err();
        assert_eq!(bad.field, "process");
        assert!(validate_style_name("thumb_2.x").is_ok());
        for name in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(validate_style_name(name).is_err(), "{name:?}");
        }
    }
}
