//! The console's sessions: a signed cookie, so any replica sharing the admin token accepts it
//! and none has to keep a table. Pure: the clock and randomness are passed in.
//!
//! Cookie value: `v1.<expiry>.<role>.<nonce>.<mac>`, the MAC an HMAC-SHA256 under a key
//! derived from the admin token (rotating the token ends every session). The CSRF token of a
//! session is a second HMAC over its nonce: the page reads it from `GET /console/session` and
//! sends it as `X-CSRF-Token` with every change; a cross-site page can neither read it nor set
//! the header.

use httpdns_auth::hmac_sha256;

/// What a session may do. Only `Admin` is issued today; a read-only role fits beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        (s == "admin").then_some(Role::Admin)
    }
}

/// A verified session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub role: Role,
    /// Unix seconds.
    pub expires: u64,
    pub nonce: String,
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

    /// A new session's cookie value; `nonce` is random bytes from the caller.
    pub fn issue(&self, role: Role, now: u64, lifetime: u64, nonce: &[u8; 16]) -> String {
        let expires = (now + lifetime).to_string();
        let nonce = httpdns_auth::hex(nonce);
        let mac = self.mac(&["session", &expires, role.as_str(), &nonce]);
        format!("v1.{expires}.{}.{nonce}.{mac}", role.as_str())
    }

    /// The session a cookie value names, if it is ours, intact and not expired.
    pub fn verify(&self, value: &str, now: u64) -> Option<Session> {
        let mut it = value.split('.');
        let (v, expires, role, nonce, mac) = (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
        if v != "v1" || it.next().is_some() || nonce.len() != 32 {
            return None;
        }
        let want = self.mac(&["session", expires, role, nonce]);
        if !httpdns_auth::constant_time_eq(want.as_bytes(), mac.as_bytes()) {
            return None;
        }
        let expires: u64 = expires.parse().ok()?;
        let role = Role::parse(role)?;
        (expires > now).then(|| Session { role, expires, nonce: nonce.to_owned() })
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

    #[test]
    fn device_cookies_verify_and_are_not_sessions() {
        let s = Sessions::new("token-0123456789abcdef");
        let d = s.device(&[7; 16]);
        assert_eq!(s.verify_device(&d).as_deref(), Some("07".repeat(16).as_str()));
        assert!(s.verify(&d, 0).is_none(), "a device cookie is no session");
        assert!(Sessions::new("another-token-0123456").verify_device(&d).is_none());
        let session = s.issue(Role::Admin, 0, 60, &[7; 16]);
        assert!(s.verify_device(&session).is_none(), "a session is no device cookie");
        let mut forged = d.clone();
        forged.replace_range(3..4, "1");
        assert!(s.verify_device(&forged).is_none());
    }

    #[test]
    fn issued_sessions_verify_until_they_expire() {
        let s = Sessions::new("token-a-0123456789");
        let cookie = s.issue(Role::Admin, 1000, 3600, &[7; 16]);
        let got = s.verify(&cookie, 1001).unwrap();
        assert_eq!((got.role, got.expires), (Role::Admin, 4600));
        assert!(s.verify(&cookie, 4600).is_none(), "expired");
        assert!(Sessions::new("token-b-0123456789").verify(&cookie, 1001).is_none(), "another token");
        let forged = cookie.replace(".4600.", ".9999999999.");
        assert!(s.verify(&forged, 1001).is_none(), "the expiry is signed");
        assert!(s.verify("v1.x", 1001).is_none());
        assert!(s.verify(&format!("{cookie}.extra"), 1001).is_none());
        let csrf = s.csrf(&got);
        assert!(s.csrf_ok(&got, &csrf));
        assert!(!s.csrf_ok(&got, "0"));
        let other = s.verify(&s.issue(Role::Admin, 1000, 3600, &[8; 16]), 1001).unwrap();
        assert!(!s.csrf_ok(&other, &csrf), "a token is its session's only");
    }
}
