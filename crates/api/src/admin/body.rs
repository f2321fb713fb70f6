//! Strict JSON bodies with errors that name the field.

use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Deserialises `bytes` as `T`, reporting the path of the field at fault.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // serde would also read a struct from a JSON array; only objects are meant.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::bad_request("InvalidBody", "body", "a JSON object body is required"));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let message = e.inner().to_string();
        let path = e.path().to_string();
        // For an unknown field the path already ends with it; for a missing one it is the
        // parent's path.
        let field = match named_field(&message) {
            Some(f) if path == "." || path.is_empty() => f.to_owned(),
            Some(f) if path == f || path.ends_with(&format!(".{f}")) => path,
            Some(f) => format!("{path}.{f}"),
            None if path == "." || path == "?" || e.inner().is_syntax() || e.inner().is_eof() => {
                "body".to_owned()
            }
            None => path,
        };
        ApiError::bad_request("InvalidBody", field, message)
    })
}

/// serde names the field itself in "unknown field `x`" and "missing field `x`".
fn named_field(message: &str) -> Option<&str> {
    for prefix in ["unknown field `", "missing field `"] {
        if let Some(rest) = message.strip_prefix(prefix) {
            return rest.split('`').next();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use httpdns_core::model::{NodeSpec, PoolSpec};

    use super::*;

    fn field_of<T: DeserializeOwned + std::fmt::Debug>(json: &str) -> String {
        parse::<T>(json.as_bytes()).unwrap_err().field.unwrap()
    }

    #[test]
    fn names_the_field() {
        assert_eq!(field_of::<NodeSpec>(r#"{"pool":"edge","isp":"telecom","region":"bj"}"#), "ip");
        assert_eq!(field_of::<NodeSpec>(r#"{"ip":"1.2.3.999","pool":"edge","isp":"t","region":"r"}"#), "ip");
        assert_eq!(field_of::<NodeSpec>(r#"{"ip":"1.2.3.4","pool":"Edge","isp":"t","region":"r"}"#), "pool");
        assert_eq!(field_of::<NodeSpec>(r#"{"ip":"1.2.3.4","pool":"e","isp":"t","region":"r","x":1}"#), "x");
        assert_eq!(field_of::<PoolSpec>(r#"{"health_check":{"kind":"udp","port":1}}"#), "health_check.kind");
        assert_eq!(field_of::<PoolSpec>(r#"{"health_check":{"kind":"tcp"}}"#), "health_check.port");
        assert_eq!(
            field_of::<PoolSpec>(r#"{"health_check":{"kind":"tcp","port":1,"x":2}}"#),
            "health_check.x"
        );
        assert_eq!(field_of::<PoolSpec>("[1]"), "body");
        assert_eq!(field_of::<PoolSpec>(""), "body");
        assert_eq!(field_of::<PoolSpec>("{"), "body");
    }
}
