//! Ed25519 signatures over the exact bytes of a served document, so a client can refuse a
//! tampered host list even over plain HTTP or through a hostile proxy.
//!
//! The signature travels in the `X-Config-Signature` header as standard base64 of the 64-byte
//! signature; the public key is served at `GET /app/config-center/public-key` as standard
//! base64 of the 32-byte key.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};

/// The server's signing key.
#[derive(Clone)]
pub struct Signer {
    key: SigningKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("Signer").field("public_key", &self.public_key_base64()).finish()
    }
}

impl Signer {
    /// A signer from a 32-byte secret seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self { key: SigningKey::from_bytes(&seed) }
    }

    /// A signer from the base64 or hex text of a 32-byte seed (the key file's format).
    pub fn from_text(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let bytes = if t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..32).map(|i| u8::from_str_radix(&t[2 * i..2 * i + 2], 16).expect("hex")).collect()
        } else {
            STANDARD.decode(t).map_err(|_| "not base64 or hex".to_owned())?
        };
        let seed: [u8; 32] = bytes.try_into().map_err(|_| "the key must be 32 bytes".to_owned())?;
        Ok(Self::from_seed(seed))
    }

    /// The seed as base64, for the key file.
    pub fn seed_base64(&self) -> String {
        STANDARD.encode(self.key.to_bytes())
    }

    pub fn public_key_base64(&self) -> String {
        STANDARD.encode(self.key.verifying_key().to_bytes())
    }

    /// The base64 signature of `body`.
    pub fn sign(&self, body: &[u8]) -> String {
        STANDARD.encode(self.key.sign(body).to_bytes())
    }
}

/// Verifies a base64 signature of `body` against a base64 public key.
pub fn verify(public_key_b64: &str, body: &[u8], signature_b64: &str) -> bool {
    let Ok(key) = STANDARD.decode(public_key_b64) else { return false };
    let Ok(key): Result<[u8; 32], _> = key.try_into() else { return false };
    let Ok(key) = VerifyingKey::from_bytes(&key) else { return false };
    let Ok(sig) = STANDARD.decode(signature_b64) else { return false };
    let Ok(sig): Result<[u8; 64], _> = sig.try_into() else { return false };
    key.verify(body, &Signature::from_bytes(&sig)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify_and_detect_tampering() {
        let s = Signer::from_seed([7u8; 32]);
        let body = br#"{"hostListConfig":[{"host":"cdn.xxx.com","rate":1}]}"#;
        let sig = s.sign(body);
        assert!(verify(&s.public_key_base64(), body, &sig));
        let tampered = br#"{"hostListConfig":[{"host":"evil.example","rate":1}]}"#;
        assert!(!verify(&s.public_key_base64(), tampered, &sig));
        assert!(!verify(&s.public_key_base64(), body, "not base64!"));
        let other = Signer::from_seed([8u8; 32]);
        assert!(!verify(&other.public_key_base64(), body, &sig));
    }

    #[test]
    fn key_text_round_trips() {
        let s = Signer::from_seed([42u8; 32]);
        let again = Signer::from_text(&s.seed_base64()).unwrap();
        assert_eq!(again.public_key_base64(), s.public_key_base64());
        let hex: String = [42u8; 32].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(Signer::from_text(&hex).unwrap().public_key_base64(), s.public_key_base64());
        assert!(Signer::from_text("short").is_err());
    }

    #[test]
    fn rfc8032_test_vector_1() {
        // RFC 8032 §7.1, TEST 1: empty message.
        let seed_hex = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
        let s = Signer::from_text(seed_hex).unwrap();
        let pk: Vec<u8> = STANDARD.decode(s.public_key_base64()).unwrap();
        let pk_hex: String = pk.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(pk_hex, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
        let sig: Vec<u8> = STANDARD.decode(s.sign(b"")).unwrap();
        let sig_hex: String = sig.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            sig_hex,
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
    }
}
