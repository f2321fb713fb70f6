//! Alibaba's `/v2/d` authentication, as the official SDKs speak it (Android 2.6.x, iOS 3.x,
//! Node.js 1.x).
//!
//! * Signature: `s = hex(HMAC-SHA256(key = hex_decode(secret), canonical))`, `canonical` the
//!   non-empty parameters among `id, m, dn, cip, q, enc, exp, tags, v` and every `sdns-*`,
//!   sorted by name, joined `k=v&k=v` with the values as sent (decoded, never re-encoded).
//! * Encryption: `enc` is `hex(IV ‖ ciphertext)` of the JSON of the hidden parameters; the
//!   answer's `data` is `base64(IV ‖ ciphertext)` of the answer's JSON. Mode 1 is AES-CBC with
//!   PKCS#7 padding and a 16-byte IV; mode 2 AES-GCM with a 12-byte nonce and the 16-byte tag
//!   after the ciphertext, no associated data. The key is the account's AES key, 16, 24 or
//!   32 bytes.

use aes::{Aes128, Aes192, Aes256};
use aes_gcm::aead::{Aead, KeyInit as _};
use aes_gcm::{AesGcm, Nonce};
use base64::Engine as _;
use cipher::block_padding::Pkcs7;
use cipher::consts::U12;
use cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::{hex, unhex, CryptoError};

/// The parameters a `/v2/d` signature covers besides every `sdns-*`.
pub const SIGNED: [&str; 9] = ["id", "m", "dn", "cip", "q", "enc", "exp", "tags", "v"];

/// Whether parameter `name` is part of the signed text.
pub fn is_signed(name: &str) -> bool {
    SIGNED.contains(&name) || name.starts_with("sdns-")
}

/// The signed text of a request's parameters: the signed, non-empty ones, sorted by name
/// (byte order, which is Java's `String.compareTo` for these ASCII names). A name sent twice
/// counts once, with its first value, as the handler reads it: an empty first value leaves the
/// name out even when a later one is not (`m=&m=1` is signed, and read, as mode 0).
pub fn canonical<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut first: Vec<(&str, &str)> = Vec::new();
    for (k, v) in pairs {
        if is_signed(k) && !first.iter().any(|(n, _)| *n == k) {
            first.push((k, v));
        }
    }
    first.retain(|(_, v)| !v.is_empty());
    first.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = String::new();
    for (i, (k, v)) in first.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out
}

/// The HMAC key of a secret: its hex decoding, as the SDKs' `decodeHex` (whitespace dropped,
/// an odd length padded with a leading `0`). A secret that is not hex cannot be used by the
/// SDKs (they then send no signature); other clients get its bytes as they are.
pub fn signing_key(secret: &str) -> Vec<u8> {
    let mut digits: String = secret.chars().filter(|c| !c.is_whitespace()).collect();
    if digits.len() % 2 == 1 {
        digits.insert(0, '0');
    }
    match unhex(&digits) {
        Some(k) if !k.is_empty() && digits.bytes().all(|b| b.is_ascii_hexdigit()) => k,
        _ => secret.as_bytes().to_vec(),
    }
}

/// `hex(HMAC-SHA256(signing_key(secret), canonical))`.
pub fn signature(secret: &str, canonical: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&signing_key(secret))
        .expect("HMAC takes keys of any length");
    mac.update(canonical.as_bytes());
    hex(&mac.finalize().into_bytes())
}

/// The cipher of an encrypted request (`m=1|2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `m=1`: AES-CBC, PKCS#7, 16-byte IV (iOS, old Android).
    Cbc,
    /// `m=2`: AES-GCM, 12-byte nonce, 16-byte tag (Android on API 21 and later).
    Gcm,
}

/// An AES key of a valid length.
#[derive(Clone)]
pub struct AesKey(Vec<u8>);

impl std::fmt::Debug for AesKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AesKey({} bytes)", self.0.len())
    }
}

impl AesKey {
    /// Parses the hex text of a 16-, 24- or 32-byte key.
    pub fn from_hex(text: &str) -> Result<Self, CryptoError> {
        let bytes = if text.bytes().all(|b| b.is_ascii_hexdigit()) { unhex(text) } else { None };
        match bytes {
            Some(b) if text.len() % 2 == 0 && [16, 24, 32].contains(&b.len()) => Ok(Self(b)),
            _ => Err(CryptoError::Key),
        }
    }
}

fn cbc_encrypt(key: &[u8], iv: &[u8; 16], plain: &[u8]) -> Vec<u8> {
    macro_rules! enc {
        ($aes:ty) => {
            cbc::Encryptor::<$aes>::new_from_slices(key, iv)
                .expect("key length checked by AesKey")
                .encrypt_padded_vec_mut::<Pkcs7>(plain)
        };
    }
    match key.len() {
        16 => enc!(Aes128),
        24 => enc!(Aes192),
        _ => enc!(Aes256),
    }
}

/// CBC without the padding check: the caller checks it in constant time ([`open_with`]).
fn cbc_decrypt_raw(key: &[u8], iv: &[u8], ct: &mut [u8]) -> Result<(), CryptoError> {
    if ct.is_empty() || ct.len() % 16 != 0 {
        return Err(CryptoError::Data);
    }
    macro_rules! dec {
        ($aes:ty) => {
            cbc::Decryptor::<$aes>::new_from_slices(key, iv)
                .map_err(|_| CryptoError::Data)?
                .decrypt_padded_mut::<cipher::block_padding::NoPadding>(ct)
                .map(|_| ())
                .map_err(|_| CryptoError::Data)
        };
    }
    match key.len() {
        16 => dec!(Aes128),
        24 => dec!(Aes192),
        _ => dec!(Aes256),
    }
}

fn gcm_seal(key: &[u8], nonce: &[u8; 12], plain: &[u8]) -> Vec<u8> {
    macro_rules! seal {
        ($aes:ty) => {
            AesGcm::<$aes, U12>::new_from_slice(key)
                .expect("key length checked by AesKey")
                .encrypt(&Nonce::<U12>::from(*nonce), plain)
                .expect("GCM seals any message this size")
        };
    }
    match key.len() {
        16 => seal!(Aes128),
        24 => seal!(Aes192),
        _ => seal!(Aes256),
    }
}

fn gcm_open(key: &[u8], nonce: &[u8], sealed: &[u8]) -> Result<Vec<u8>, CryptoError> {
    let nonce: [u8; 12] = nonce.try_into().map_err(|_| CryptoError::Data)?;
    macro_rules! open {
        ($aes:ty) => {
            AesGcm::<$aes, U12>::new_from_slice(key)
                .map_err(|_| CryptoError::Key)?
                .decrypt(&Nonce::<U12>::from(nonce), sealed)
                .map_err(|_| CryptoError::Data)
        };
    }
    match key.len() {
        16 => open!(Aes128),
        24 => open!(Aes192),
        _ => open!(Aes256),
    }
}

/// `IV ‖ ciphertext[‖ tag]` of `plain` under a given IV (tests pin it; [`seal`] draws one).
pub fn seal_with_iv(mode: Mode, key: &AesKey, iv: &[u8], plain: &[u8]) -> Result<Vec<u8>, CryptoError> {
    let mut out = iv.to_vec();
    match mode {
        Mode::Cbc => {
            let iv: &[u8; 16] = iv.try_into().map_err(|_| CryptoError::Data)?;
            out.extend(cbc_encrypt(&key.0, iv, plain));
        }
        Mode::Gcm => {
            let nonce: &[u8; 12] = iv.try_into().map_err(|_| CryptoError::Data)?;
            out.extend(gcm_seal(&key.0, nonce, plain));
        }
    }
    Ok(out)
}

/// Encrypts an answer: `base64(IV ‖ ciphertext[‖ tag])` with a fresh random IV.
pub fn seal(mode: Mode, key: &AesKey, plain: &[u8]) -> Result<String, CryptoError> {
    let mut iv = [0u8; 16];
    let iv = match mode {
        Mode::Cbc => &mut iv[..],
        Mode::Gcm => &mut iv[..12],
    };
    getrandom::fill(iv).map_err(|_| CryptoError::Key)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(seal_with_iv(mode, key, iv, plain)?))
}

/// Decrypts a request's `enc` (`hex(IV ‖ ciphertext[‖ tag])`, either case).
pub fn open(mode: Mode, key: &AesKey, enc_hex: &str) -> Result<Vec<u8>, CryptoError> {
    open_with(mode, key, enc_hex, |plain| Some(plain.to_vec()))
}

/// Decrypts a request's `enc` and reads it with `accept` as one step that fails one way: in
/// CBC mode a bad padding and a message `accept` refuses are the same [`CryptoError::Data`],
/// and `accept` runs whether the padding was valid or not (no padding oracle; see
/// `crate::unpad`). GCM authenticates before anything is read.
pub fn open_with<T>(
    mode: Mode,
    key: &AesKey,
    enc_hex: &str,
    accept: impl FnOnce(&[u8]) -> Option<T>,
) -> Result<T, CryptoError> {
    if enc_hex.len() % 2 == 1 {
        return Err(CryptoError::Data);
    }
    let mut data = unhex(enc_hex).ok_or(CryptoError::Data)?;
    match mode {
        Mode::Cbc if data.len() >= 32 => {
            let (iv, ct) = data.split_at_mut(16);
            cbc_decrypt_raw(&key.0, iv, ct)?;
            let (len, padded) = crate::unpad::unpad(ct, 16);
            match accept(&ct[..len]) {
                Some(v) if bool::from(padded) => Ok(v),
                _ => Err(CryptoError::Data),
            }
        }
        Mode::Gcm if data.len() >= 12 + 16 => {
            let plain = gcm_open(&key.0, &data[..12], &data[12..])?;
            accept(&plain).ok_or(CryptoError::Data)
        }
        _ => Err(CryptoError::Data),
    }
}

/// Decrypts an answer's `data` (what a client does; tests and our own client use it).
pub fn open_base64(mode: Mode, key: &AesKey, data: &str) -> Result<Vec<u8>, CryptoError> {
    let raw = base64::engine::general_purpose::STANDARD.decode(data).map_err(|_| CryptoError::Data)?;
    open(mode, key, &hex(&raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789ABCDEF0123456789ABCDEF";

    #[test]
    fn signature_vector() {
        // Computed with openssl and Python's hmac (the SDK ships no fixed vector).
        let canon = canonical([
            ("id", "100000"),
            ("m", "0"),
            ("dn", "www.aliyun.com"),
            ("q", "4,6"),
            ("v", "1.0"),
            ("exp", "1700000600"),
            ("sdk", "android_2.6.7"),
            ("sid", "Ab3dE"),
            ("s", "ignored"),
        ]);
        assert_eq!(canon, "dn=www.aliyun.com&exp=1700000600&id=100000&m=0&q=4,6&v=1.0");
        assert_eq!(
            signature(KEY, &canon),
            "9a0f42ce6de8662fac159f2c5efa79766291a05b6b3b53a0e4a907224e01a7c1"
        );
    }

    #[test]
    fn canonical_keeps_sdns_and_drops_empties() {
        let c = canonical([("tags", ""), ("sdns-b", "2"), ("id", "1"), ("sdns-a", "x=y"), ("id", "2")]);
        assert_eq!(c, "id=1&sdns-a=x=y&sdns-b=2");
    }

    #[test]
    fn a_name_sent_twice_is_signed_with_its_first_value_even_when_empty() {
        // The handler reads `m=&m=1` as mode 0: a signature over `m=1` must not pass for it.
        let c = canonical([("id", "1"), ("m", ""), ("m", "1"), ("dn", "a.com"), ("dn", "b.com")]);
        assert_eq!(c, "dn=a.com&id=1");
    }

    #[test]
    fn signing_key_is_hex_like_the_sdk() {
        assert_eq!(signing_key("0a0B"), vec![0x0a, 0x0b]);
        assert_eq!(signing_key("abc"), vec![0x0a, 0xbc], "odd length gets a leading 0");
        assert_eq!(signing_key("not-hex!"), b"not-hex!".to_vec());
    }

    fn key() -> AesKey {
        AesKey::from_hex(KEY).unwrap()
    }

    #[test]
    fn cbc_and_gcm_match_an_independent_implementation() {
        // Python `cryptography`, the IV / nonce 00 01 02 ...
        let iv: Vec<u8> = (0..16).collect();
        let plain = br#"{"dn":"www.aliyun.com","q":"4,6"}"#;
        let cbc = "000102030405060708090a0b0c0d0e0fac7b07eb57fcd89d208d42bdb9dff8a01fdf5e7dee5087ce031c2b318e45bfe07dc2e7b64fe57abac9d275397e38ae80";
        let gcm = "000102030405060708090a0b2ccb88158fd707939661b2a8acb33afdd9ba706083c1068ae35e4da3b6c987568d9a9d18a1f8fef8945cd84dd833f9e79f";
        assert_eq!(hex(&seal_with_iv(Mode::Cbc, &key(), &iv, plain).unwrap()), cbc);
        assert_eq!(hex(&seal_with_iv(Mode::Gcm, &key(), &iv[..12], plain).unwrap()), gcm);
        assert_eq!(open(Mode::Cbc, &key(), cbc).unwrap(), plain);
        assert_eq!(open(Mode::Gcm, &key(), &gcm.to_uppercase()).unwrap(), plain);
        let answer =
            br#"{"cip":"1.2.3.4","answers":[{"dn":"www.aliyun.com","v4":{"ips":["1.1.1.1"],"ttl":60}}]}"#;
        let b64 = |raw: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(raw);
        assert_eq!(
            b64(seal_with_iv(Mode::Cbc, &key(), &iv, answer).unwrap()),
            "AAECAwQFBgcICQoLDA0OD+CUkP8/zlaWBN1EvqFqPxWs3KWGyhEfYQpBSFSN0gkPJdloVC5CzNfiU/7dc0bCt1lOymooJXMVA0/ONNFfNIvNiRmZ8/00Pw3OmJpvYUhcuE+un/ea3WWwpLbinWbhgA=="
        );
        assert_eq!(
            b64(seal_with_iv(Mode::Gcm, &key(), &iv[..12], answer).unwrap()),
            "AAECAwQFBgcICQoLLMuPEt3PH8bQOK7n8/R3qpu2cmGdlE/a4V5N2vnH1RrSY8yquPlk9Tn4kSRJMlXMs2UOZLTo+Biy9vRDZ99rC2QDzHNny+LLCvZTQwJZLAa6MssLQ0blPit3XF4DNCU4YsWDCzPt0Q=="
        );
    }

    #[test]
    fn sealed_answers_round_trip_with_fresh_ivs() {
        for mode in [Mode::Cbc, Mode::Gcm] {
            let a = seal(mode, &key(), b"hello").unwrap();
            let b = seal(mode, &key(), b"hello").unwrap();
            assert_ne!(a, b, "{mode:?}: a fresh IV each time");
            assert_eq!(open_base64(mode, &key(), &a).unwrap(), b"hello");
        }
        for len in [48, 64] {
            let k = AesKey::from_hex(&"ab".repeat(len / 2)).unwrap();
            let s = seal(Mode::Gcm, &k, b"x").unwrap();
            assert_eq!(open_base64(Mode::Gcm, &k, &s).unwrap(), b"x");
        }
    }

    #[test]
    fn refuses_bad_keys_and_data() {
        assert!(AesKey::from_hex("00").is_err());
        assert!(AesKey::from_hex(&"zz".repeat(16)).is_err());
        assert!(AesKey::from_hex(&"0".repeat(33)).is_err());
        assert_eq!(open(Mode::Cbc, &key(), "00"), Err(CryptoError::Data));
        assert_eq!(open(Mode::Gcm, &key(), &"00".repeat(40)), Err(CryptoError::Data), "bad tag");
        assert_eq!(open(Mode::Cbc, &key(), &"0".repeat(65)), Err(CryptoError::Data), "odd length");
        let other = AesKey::from_hex(&"11".repeat(16)).unwrap();
        let sealed = seal(Mode::Gcm, &key(), b"secret").unwrap();
        assert!(open_base64(Mode::Gcm, &other, &sealed).is_err());
    }
}
