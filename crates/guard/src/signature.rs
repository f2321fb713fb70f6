//! Alibaba's signature of its account routes: `s = md5(content-secret-t)` with its expiry `t`.

use crate::Refusal;

/// Largest signature validity accepted: a `t` further ahead is `InvalidDuration`.
pub const MAX_SIGNATURE_VALIDITY_S: i64 = 86_400;

/// Checks `s` against `secret` for `content` with its expiry `t` (Unix seconds, in the future
/// and at most a day ahead), the codes as Alibaba's service answers them.
pub fn verify(secret: &str, content: &str, t: Option<&str>, s: Option<&str>) -> Result<(), Refusal> {
    let t = t.ok_or_else(|| Refusal::bad_request("MissingArgument", "t", "missing t: the expiry time"))?;
    let s = s.ok_or_else(|| Refusal::bad_request("MissingArgument", "s", "missing s: the signature"))?;
    let expiry: i64 =
        t.parse().map_err(|_| Refusal::bad_request("InvalidArgument", "t", "t must be Unix seconds"))?;
    let now = httpdns_core::clock::unix_s() as i64;
    if expiry < now {
        return Err(Refusal::forbidden("SignatureExpired", "the signature's expiry time has passed"));
    }
    if expiry - now > MAX_SIGNATURE_VALIDITY_S {
        return Err(Refusal::forbidden(
            "InvalidDuration",
            "the signature is valid for too long (at most one day)",
        ));
    }
    let expected = httpdns_auth::alibaba_signature(content, secret, t);
    if !httpdns_auth::constant_time_eq(expected.as_bytes(), s.to_ascii_lowercase().as_bytes()) {
        return Err(Refusal::forbidden("InvalidSignature", "the signature does not match"));
    }
    Ok(())
}
