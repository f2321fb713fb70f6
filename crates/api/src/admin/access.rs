//! Who is asking the admin API and what they may do (docs/config-center.md, "Roles").
//!
//! A request is made by a [`Principal`]: the bootstrap token (`HTTPDNS_ADMIN_TOKEN`, always an
//! admin, named `admin`), a named token (`/admin/v1/tokens/{name}`, found by the SHA-256 of
//! the presented secret), or a console session signed in with either. [`may`] is the one
//! place a role meets a route.

use axum::http::Method;
use httpdns_store::teams::TokenRow;
use httpdns_store::Store;
use sha2::{Digest, Sha256};

pub use crate::console::session::Role;
use crate::error::ApiError;

/// The actor name of the bootstrap token in the audit log and the console.
pub const BOOTSTRAP: &str = "admin";
/// Actor names that automatic changes use: no token may take them, so the audit log's actor
/// always says who (or what) it was.
pub const RESERVED: [&str; 3] = [BOOTSTRAP, "controller", "rollout"];
/// How many hex digits of a token's hash a console session keeps to notice a replaced token.
pub const TOKEN_ID_LEN: usize = 16;
/// Routes whose reads show secrets (account secrets): viewers may not read them.
const SECRET_READS: [&str; 1] = ["/admin/v1/accounts"];
/// Routes only admins may change.
const ADMIN_WRITES: [&str; 1] = ["/admin/v1/tokens"];

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// Through a console session (else a bearer token).
    pub console: bool,
}

impl Principal {
    pub fn bootstrap(console: bool) -> Self {
        Self { name: BOOTSTRAP.to_owned(), role: Role::Admin, console }
    }

    fn of_row(row: &TokenRow, console: bool) -> Option<Self> {
        Some(Self { name: row.name.clone(), role: Role::parse(&row.role)?, console })
    }
}

/// Whether a method changes something. Every admin route that changes state uses one of
/// these; reads are `GET` and `HEAD`.
pub fn is_change(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a change is written to the audit log: every one but the node agents' measurement
/// reports (`POST /admin/v1/metrics`, `/admin/v1/nodes/{id}/metrics`), which arrive every few
/// seconds per node and change live inputs, not what operators configure.
pub fn is_audited(method: &Method, path: &str) -> bool {
    is_change(method)
        && !(path == "/admin/v1/metrics"
            || (path.starts_with("/admin/v1/nodes/") && path.ends_with("/metrics")))
}

fn under(path: &str, base: &str) -> bool {
    path.strip_prefix(base).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Whether `role` may call `method` on `path`: viewers read (but not secrets), operators also
/// change everything but tokens, admins everything.
pub fn may(role: Role, method: &Method, path: &str) -> bool {
    let needed = if ADMIN_WRITES.iter().any(|b| under(path, b)) && is_change(method) {
        Role::Admin
    } else if is_change(method) || SECRET_READS.iter().any(|b| under(path, b)) {
        Role::Operator
    } else {
        Role::Viewer
    };
    role >= needed
}

/// The hex SHA-256 of a token's secret, as stored. A plain hash is enough: the secrets are 256
/// random bits (nothing to guess from a dictionary), and an unsalted hash lets the guard find
/// a token by one indexed lookup instead of trying every stored one.
pub fn token_hash(secret: &str) -> String {
    httpdns_auth::hex(&Sha256::digest(secret.as_bytes()))
}

/// A new token's secret: 32 random bytes, URL-safe base64, with a prefix that says what it is
/// (and that secret scanners can look for).
pub fn new_secret() -> Result<String, ApiError> {
    use base64::Engine as _;
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|_| ApiError::internal(&"no randomness for a token"))?;
    Ok(format!("hdns_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)))
}

/// The named token whose secret is `secret`, if any.
pub async fn named_token(store: &Store, secret: &str) -> Result<Option<Principal>, ApiError> {
    let row = store.token_by_hash(&token_hash(secret)).await.map_err(|e| ApiError::unavailable(&e))?;
    Ok(row.as_ref().and_then(|r| Principal::of_row(r, false)))
}

/// The principal of a console session: the bootstrap admin, or the named token it was signed
/// in with, if that token still exists with the same secret (its current role applies).
pub async fn session_holder(
    store: &Store,
    session: &crate::console::session::Session,
) -> Result<Option<Principal>, ApiError> {
    if session.name == BOOTSTRAP && session.token_id.is_empty() {
        return Ok(Some(Principal::bootstrap(true)));
    }
    let row = store.token_by_name(&session.name).await.map_err(|e| ApiError::unavailable(&e))?;
    Ok(row
        .filter(|r| r.token_sha256.get(..TOKEN_ID_LEN) == Some(session.token_id.as_str()))
        .and_then(|r| Principal::of_row(&r, true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_meet_routes_in_one_place() {
        let put = Method::PUT;
        let get = Method::GET;
        for role in Role::ALL {
            assert!(may(role, &get, "/admin/v1/nodes/n1"), "{role:?} reads");
            assert!(may(role, &get, "/admin/v1/tokens"), "{role:?} lists tokens (no secrets)");
        }
        assert!(!may(Role::Viewer, &put, "/admin/v1/nodes/n1"));
        assert!(!may(Role::Viewer, &Method::POST, "/admin/v1/config/cdn/rollback"));
        assert!(!may(Role::Viewer, &Method::DELETE, "/admin/v1/nodes/n1"));
        assert!(!may(Role::Viewer, &get, "/admin/v1/accounts/1"), "account secrets");
        assert!(may(Role::Operator, &get, "/admin/v1/accounts"));
        assert!(may(Role::Operator, &put, "/admin/v1/config/cdn"));
        assert!(!may(Role::Operator, &put, "/admin/v1/tokens/bob"));
        assert!(!may(Role::Operator, &Method::DELETE, "/admin/v1/tokens/bob"));
        assert!(may(Role::Admin, &put, "/admin/v1/tokens/bob"));
        assert!(may(Role::Operator, &put, "/admin/v1/tokensmith"), "a prefix is not a route");
        assert!(is_audited(&put, "/admin/v1/nodes/n1") && !is_audited(&get, "/admin/v1/nodes/n1"));
        assert!(
            !is_audited(&Method::POST, "/admin/v1/nodes/n1/metrics")
                && !is_audited(&Method::POST, "/admin/v1/metrics")
        );
    }

    #[test]
    fn secrets_are_long_random_and_hash_to_hex() {
        let a = new_secret().unwrap();
        assert!(a.starts_with("hdns_") && a.len() == 5 + 43, "{a}");
        assert_ne!(a, new_secret().unwrap());
        assert_eq!(
            token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "FIPS 180-2's example"
        );
    }
}
