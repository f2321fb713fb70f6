//! The console's sessions: a signed cookie, so any replica sharing the admin token accepts it
//! and none has to keep a table. Pure: the clock and randomness are passed in.
//!
//! Cookie value: `v2.<expiry>.<role>.<name>.<token id>.<nonce>.<mac>`, the MAC an HMAC-SHA256
//! under a key derived from the admin token (rotating the token ends every session). `name` is
//! the signed-in token's name (`admin` for `HTTPDNS_ADMIN_TOKEN`) and `token id` the first hex
//! digits of its stored hash, so the admin guard can refuse a session whose named token was
//! revoked or replaced since. The CSRF token of a
//! session is a second HMAC over its nonce: the page reads it from `GET /console/session` and
//! sends it as `X-CSRF-Token` with every change; a cross-site page can neither read it nor set
//! the header.

use httpdns_auth::hmac_sha256;

/// What a token (and a console session signed in with it) may do; ordered, each role can do
/// what the ones below it can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads (`GET`, `HEAD`), except the routes that show secrets.
    Viewer,
    /// Changes resources, config and rollouts; not tokens.
    Operator,
    /// Everything, tokens included.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// A verified session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The role the token had at sign-in (the guard reads the token's current role).
    pub role: Role,
    /// The token's name (`admin` for the bootstrap token).
    pub name: String,
    /// The first hex digits of the token's stored hash (empty for the bootstrap token).
    pub token_id: String,
    /// Unix seconds.
    pub expires: u64,
    pub nonce: String,
}

/// Who signs in: what a session records of its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder<'a> {
    pub role: Role,
    pub name: &'a str,
    pub token_id: &'a str,
}

/// A token name or id fits a cookie part: 1 to 64 of `a-z`, `0-9`, `-`, `_` (empty for an id).
fn cookie_safe(s: &str, may_be_empty: bool) -> bool {
    (may_be_empty || !s.is_empty())
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Signs and checks sessions under one admin token.
#[derive(Clone)]
pub struct Sessions {
    key: [u8; 32],
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sessions")
    }
}

impl Sessions {
    pub fn new(admin_token: &str) -> Self {
        Self { key: hmac_sha256(b"httpdns console session v1", admin_token.as_bytes()) }
    }

    fn mac(&self, parts: &[&str]) -> String {
        // NUL-separated: no part can contain one (they are digits, hex and fixed words).
        httpdns_auth::hex(&hmac_sha256(&self.key, parts.join("\0").as_bytes()))
    }

    /// A new session's cookie value; `nonce` is random bytes from the caller. `None` when the
    /// holder's name or id would not fit a cookie (the token API never makes such names).
    pub fn issue(&self, holder: &Holder<'_>, now: u64, lifetime: u64, nonce: &[u8; 16]) -> Option<String> {
        if !cookie_safe(holder.name, false) || !cookie_safe(holder.token_id, true) {
            return None;
        }
        let expires = (now + lifetime).to_string();
        let nonce = httpdns_auth::hex(nonce);
        let role = holder.role.as_str();
        let mac = self.mac(&["session", &expires, role, holder.name, holder.token_id, &nonce]);
        Some(format!("v2.{expires}.{role}.{}.{}.{nonce}.{mac}", holder.name, holder.token_id))
    }

    /// The session a cookie value names, if it is ours, intact and not expired.
    pub fn verify(&self, value: &str, now: u64) -> Option<Session> {
        let parts: Vec<&str> = value.split('.').collect();
        let [v, expires, role, name, token_id, nonce, mac] = parts.as_slice() else { return None };
        if *v != "v2" || nonce.len() != 32 {
            return None;
        }
        let want = self.mac(&["session", expires, role, name, token_id, nonce]);
        if !httpdns_auth::constant_time_eq(want.as_bytes(), mac.as_bytes()) {
            return None;
        }
        let expires: u64 = expires.parse().ok()?;
        let role = Role::parse(role)?;
        (expires > now).then(|| Session {
            role,
            name: (*name).to_owned(),
            token_id: (*token_id).to_owned(),
            expires,
            nonce: (*nonce).to_owned(),
        })
    }

    /// A device cookie's value: a browser that once signed in keeps a budget of failed
    /// sign-ins of its own (OWASP's device cookies), so failures from its address cannot lock it
    /// out. `nonce` is random bytes from the caller.
    pub fn device(&self, nonce: &[u8; 16]) -> String {
        let nonce = httpdns_auth::hex(nonce);
        let mac = self.mac(&["device", &nonce]);
        format!("d1.{nonce}.{mac}")
    }

    /// The device a device cookie names, if it is ours and intact.
    pub fn verify_device(&self, value: &str) -> Option<String> {
        let mut it = value.split('.');
        let (v, nonce, mac) = (it.next()?, it.next()?, it.next()?);
        if v != "d1" || it.next().is_some() || nonce.len() != 32 {
            return None;
        }
        let want = self.mac(&["device", nonce]);
        httpdns_auth::constant_time_eq(want.as_bytes(), mac.as_bytes()).then(|| nonce.to_owned())
    }

    /// The CSRF token of a session.
    pub fn csrf(&self, session: &Session) -> String {
        self.mac(&["csrf", &session.nonce])
    }

    pub fn csrf_ok(&self, session: &Session, presented: &str) -> bool {
        httpdns_auth::constant_time_eq(self.csrf(session).as_bytes(), presented.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADMIN: Holder<'static> = Holder { role: Role::Admin, name: "admin", token_id: "" };

    #[test]
    fn device_cookies_verify_and_are_not_sessions() {
        let s = Sessions::new("token-0123456789abcdef");
        let d = s.device(&[7; 16]);
        assert_eq!(s.verify_device(&d).as_deref(), Some("07".repeat(16).as_str()));
        assert!(s.verify(&d, 0).is_none(), "a device cookie is no session");
        assert!(Sessions::new("another-token-0123456").verify_device(&d).is_none());
        let session = s.issue(&ADMIN, 0, 60, &[7; 16]).unwrap();
        assert!(s.verify_device(&session).is_none(), "a session is no device cookie");
        let mut forged = d.clone();
        forged.replace_range(3..4, "1");
        assert!(s.verify_device(&forged).is_none());
    }

    #[test]
    fn issued_sessions_verify_until_they_expire() {
        let s = Sessions::new("token-a-0123456789");
        let cookie = s.issue(&ADMIN, 1000, 3600, &[7; 16]).unwrap();
        let got = s.verify(&cookie, 1001).unwrap();
        assert_eq!((got.role, got.expires, got.name.as_str()), (Role::Admin, 4600, "admin"));
        assert!(s.verify(&cookie, 4600).is_none(), "expired");
        assert!(Sessions::new("token-b-0123456789").verify(&cookie, 1001).is_none(), "another token");
        let forged = cookie.replace(".4600.", ".9999999999.");
        assert!(s.verify(&forged, 1001).is_none(), "the expiry is signed");
        assert!(s.verify("v1.x", 1001).is_none());
        assert!(s.verify(&format!("{cookie}.extra"), 1001).is_none());
        let csrf = s.csrf(&got);
        assert!(s.csrf_ok(&got, &csrf));
        assert!(!s.csrf_ok(&got, "0"));
        let other = s.verify(&s.issue(&ADMIN, 1000, 3600, &[8; 16]).unwrap(), 1001).unwrap();
        assert!(!s.csrf_ok(&other, &csrf), "a token is its session's only");
    }

    #[test]
    fn a_session_names_its_token_and_role_under_the_mac() {
        let s = Sessions::new("token-a-0123456789");
        let viewer = Holder { role: Role::Viewer, name: "alice", token_id: "0123abcd" };
        let cookie = s.issue(&viewer, 1000, 3600, &[7; 16]).unwrap();
        let got = s.verify(&cookie, 1001).unwrap();
        assert_eq!((got.role, got.name.as_str(), got.token_id.as_str()), (Role::Viewer, "alice", "0123abcd"));
        assert!(s.verify(&cookie.replace(".viewer.", ".admin."), 1001).is_none(), "the role is signed");
        assert!(s.verify(&cookie.replace(".alice.", ".bob."), 1001).is_none(), "the name is signed");
        let odd = Holder { role: Role::Viewer, name: "a.b", token_id: "" };
        assert!(s.issue(&odd, 1000, 3600, &[7; 16]).is_none(), "a dot would split the cookie");
        assert_eq!(Role::ALL.map(|r| Role::parse(r.as_str())), Role::ALL.map(Some));
        assert!(Role::Viewer < Role::Operator && Role::Operator < Role::Admin);
    }
}
