//! Image styles in force: named chains (`x-oss-process=style/<name>`), an admin resource like
//! mirror rules (`/admin/v1/mirror/styles/{name}`; the spec is
//! `httpdns_core::model::style::StyleSpec`). A style's variants are stored under the chain's
//! canonical form, not under the style's name, so changing a style never serves a variant of
//! its old chain.

use std::collections::HashMap;

use httpdns_core::model::style::StyleSpec;
use httpdns_image::{ImageProcess, ProcessError};

/// The compiled styles in force. Specs that no longer parse (stored by another version) are
/// skipped loudly rather than taking the others down.
pub(crate) fn compile_all(specs: &[(String, StyleSpec)]) -> HashMap<String, ImageProcess> {
    let mut out = HashMap::new();
    for (name, spec) in specs {
        match spec.compile() {
            Ok(ops) => {
                out.insert(name.clone(), ops);
            }
            Err(e) => {
                tracing::error!(style = %name, error = %e, "Skipping an image style that does not parse.");
            }
        }
    }
    out
}

/// The `x-oss-process` value of a request: `image/...` as given, or `style/<name>` looked up.
pub(crate) fn resolve(
    raw: &str,
    styles: &HashMap<String, ImageProcess>,
) -> Result<ImageProcess, ProcessError> {
    match raw.strip_prefix("style/") {
        Some(name) => styles.get(name).cloned().ok_or_else(|| ProcessError {
            param: "style".into(),
            message: "names no image style (PUT /admin/v1/mirror/styles/{name} defines one)",
        }),
        None => httpdns_image::parse(raw),
    }
}

#[cfg(test)]
mod tests {
    use httpdns_core::model::style::validate_style_name;

    use super::*;

    #[test]
    fn styles_resolve_to_their_chain_and_unknown_ones_are_refused() {
        let spec = StyleSpec { process: "image/resize,w_100/quality,q_80".into() };
        spec.validate().unwrap();
        let styles = compile_all(&[
            ("thumb".into(), spec),
            ("broken".into(), StyleSpec { process: "image/x".into() }),
        ]);
        assert_eq!(styles.len(), 1, "the broken stored spec is skipped");
        let ops = resolve("style/thumb", &styles).unwrap();
        assert_eq!(ops, httpdns_image::parse("image/quality,q_80/resize,w_100").unwrap());
        assert_eq!(resolve("style/none", &styles).unwrap_err().param, "style");
        assert_eq!(resolve("image/resize,w_0", &styles).unwrap_err().param, "w");
        let bad = StyleSpec { process: "image/resize,w_0".into() }.validate().unwrap_err();
        assert_eq!(bad.field, "process");
        assert!(validate_style_name("thumb_2.x").is_ok());
        for name in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(validate_style_name(name).is_err(), "{name:?}");
        }
    }
}
