//! Placeholder secrets: the values shipped in `deploy/.env` and `deploy/kubernetes/` so that a
//! first local run works. A server that would run with one of them refuses to start (naming
//! the setting) unless `HTTPDNS_ALLOW_DEMO_SECRETS` is on: `docker compose up` on a public
//! host must not serve an admin API whose token is in a public repository.

/// The config signing seed shipped in `deploy/.env` (the bytes 0, 1, ..., 31). It is a valid
/// key, so the demo runs with it; anyone can sign documents with it, so nothing else may.
pub const DEMO_SIGNING_SEED: [u8; 32] = {
    let mut seed = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        seed[i] = i as u8;
        i += 1;
    }
    seed
};

/// Whether a secret's text is a shipped placeholder: every shipped password and token contains
/// `change-me` (any case, with or without the dash), so an operator's edit of any part of it
/// that keeps those words is still refused.
pub fn is_placeholder(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    lower.contains("change-me") || lower.contains("changeme") || lower.contains("change_me")
}

/// Whether a config signing key is a placeholder: the shipped demo seed, in any accepted
/// spelling (base64 or hex), or a placeholder text.
pub fn is_placeholder_signing_key(text: &str) -> bool {
    if is_placeholder(text) {
        return true;
    }
    let demo = httpdns_config::Signer::from_seed(DEMO_SIGNING_SEED);
    httpdns_config::Signer::from_text(text).is_ok_and(|s| s.public_key_base64() == demo.public_key_base64())
}

/// The password of a `postgres://user:password@host/db` URL, percent-decoded.
pub fn database_password(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    // The authority ends at the first '/', '?' or '#'; the user info at its last '@'.
    let authority = rest.split(['/', '?', '#']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    let password = userinfo.split_once(':')?.1;
    Some(percent_encoding::percent_decode_str(password).decode_utf8_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_recognised() {
        for p in ["change-me-postgres", "CHANGE-ME", "my-changeme-token-123", "change_me_now"] {
            assert!(is_placeholder(p), "{p}");
        }
        for s in ["3f9a0c77e1d24b6c8a5e", "change-log-0123456789", ""] {
            assert!(!is_placeholder(s), "{s}");
        }
    }

    #[test]
    fn the_demo_seed_is_a_placeholder_in_both_spellings() {
        assert!(is_placeholder_signing_key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="));
        let hex: String = DEMO_SIGNING_SEED.iter().map(|b| format!("{b:02x}")).collect();
        assert!(is_placeholder_signing_key(&hex));
        assert!(is_placeholder_signing_key("change-me-config-signing-key"));
        let own = httpdns_config::Signer::from_seed([7; 32]).seed_base64();
        assert!(!is_placeholder_signing_key(&own));
    }

    #[test]
    fn database_passwords_are_found() {
        assert_eq!(
            database_password("postgres://httpdns:change-me-postgres@postgres:5432/httpdns").as_deref(),
            Some("change-me-postgres")
        );
        assert_eq!(database_password("postgresql://u:p%40ss@h/db?sslmode=require").as_deref(), Some("p@ss"));
        assert_eq!(database_password("postgres://u:a@b@h/db").as_deref(), Some("a@b"));
        assert_eq!(database_password("postgres://httpdns@h/db"), None);
        assert_eq!(database_password("sqlite://./data/httpdns.db"), None);
    }
}
