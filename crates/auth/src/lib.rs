//! Request authentication of the HTTPDNS APIs, as the official SDKs speak it.
//!
//! * DNSPod (Tencent) enterprise `/d`: `dn` and `ip` are encrypted with the account's key and
//!   sent as lowercase hex; the response body is encrypted the same way.
//!   - DES: `DES/ECB/PKCS5Padding`, key = the first 8 bytes of the key text.
//!   - AES: `AES/CBC/PKCS7Padding`, key = the key text right-padded with `'0'` to 16 bytes
//!     (its first 16 bytes if longer), a random 16-byte IV sent before the ciphertext.
//! * Alibaba `sign_d` / `sign_resolve`: `s = md5_hex(host + "-" + secret + "-" + t)`, `t` the
//!   expiry time in Unix seconds.
//!
//! Published test vectors are in the tests below.

use aes::Aes128;
use cipher::block_padding::Pkcs7;
use cipher::{BlockDecrypt, BlockDecryptMut, BlockEncrypt, BlockEncryptMut, KeyInit, KeyIvInit};
use des::Des;
use md5::{Digest, Md5};

pub mod aliyun_v2;
mod unpad;

/// The cipher of a DNSPod request (`alg=des|aes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    Des,
    Aes,
}

/// Why decryption failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CryptoError {
    /// The key is too short for the cipher (DES needs 8 bytes).
    Key,
    /// Not hex, wrong length, bad padding or not UTF-8.
    Data,
}

/// HMAC-SHA256 of `message` under `key` (RFC 2104), for signed tokens of our own (the
/// console's session cookies).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::Mac as _;
    let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// This process's name among replicas sharing a store (rows it writes as its own, leases it
/// holds): `HOSTNAME` when set, the process id and 48 random bits, so two processes never
/// share one, even in containers that all run as pid 1 on hosts of the same name.
pub fn instance_id() -> String {
    let mut id = [0u8; 6];
    // Without randomness the host and the pid still tell replicas on different hosts apart.
    let _ = getrandom::fill(&mut id);
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    format!("{host}-{}-{}", std::process::id(), hex(&id))
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Decodes hex (either case). Like the Tencent SDK, a trailing odd nibble is ignored.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    (0..b.len() / 2).map(|i| Some(nibble(b[2 * i])? << 4 | nibble(b[2 * i + 1])?)).collect()
}

fn des_key(key: &str) -> Result<Des, CryptoError> {
    let k = key.as_bytes();
    if k.len() < 8 {
        return Err(CryptoError::Key);
    }
    Des::new_from_slice(&k[..8]).map_err(|_| CryptoError::Key)
}

fn aes_key(key: &str) -> [u8; 16] {
    let mut k = [b'0'; 16];
    let src = key.as_bytes();
    let n = src.len().min(16);
    k[..n].copy_from_slice(&src[..n]);
    k
}

/// Encrypts `plain` to the hex wire form.
pub fn encrypt(alg: Alg, key: &str, plain: &[u8]) -> Result<String, CryptoError> {
    match alg {
        Alg::Des => Ok(hex(&des_key(key)?.encrypt_padded_vec::<Pkcs7>(plain))),
        Alg::Aes => {
            let mut iv = [0u8; 16];
            getrandom::fill(&mut iv).map_err(|_| CryptoError::Key)?;
            let ct = cbc::Encryptor::<Aes128>::new(&aes_key(key).into(), &iv.into())
                .encrypt_padded_vec_mut::<Pkcs7>(plain);
            let mut out = iv.to_vec();
            out.extend_from_slice(&ct);
            Ok(hex(&out))
        }
    }
}

/// Decrypts the hex wire form to text.
pub fn decrypt(alg: Alg, key: &str, wire: &str) -> Result<String, CryptoError> {
    decrypt_with(alg, key, wire, |text| Some(text.to_owned()))
}

/// Decrypts the hex wire form and reads the text with `accept` as one step that fails one way:
/// a bad padding, text that is not UTF-8 and text `accept` refuses are the same
/// [`CryptoError::Data`], and `accept` runs on the text whether the padding was valid or not,
/// so neither the answer nor its time tells a client which (no padding oracle). Only the
/// length of the input (public) changes what is done.
pub fn decrypt_with<T>(
    alg: Alg,
    key: &str,
    wire: &str,
    accept: impl FnOnce(&str) -> Option<T>,
) -> Result<T, CryptoError> {
    let mut data = unhex(wire).ok_or(CryptoError::Data)?;
    let (plain, block): (&mut [u8], u8) = match alg {
        Alg::Des => {
            if data.is_empty() || data.len() % 8 != 0 {
                return Err(CryptoError::Data);
            }
            let cipher = des_key(key)?;
            for chunk in data.chunks_exact_mut(8) {
                cipher.decrypt_block(chunk.into());
            }
            (&mut data[..], 8)
        }
        Alg::Aes => {
            if data.len() < 32 || data.len() % 16 != 0 {
                return Err(CryptoError::Data);
            }
            let (iv, ct) = data.split_at_mut(16);
            let iv: [u8; 16] = (&*iv).try_into().map_err(|_| CryptoError::Data)?;
            cbc::Decryptor::<Aes128>::new(&aes_key(key).into(), &iv.into())
                .decrypt_padded_mut::<cipher::block_padding::NoPadding>(ct)
                .map_err(|_| CryptoError::Data)?;
            (ct, 16)
        }
    };
    let (len, padded) = unpad::unpad(plain, block);
    // Text that is not UTF-8 is read as empty, which `accept` refuses like any other bad text.
    let accepted = accept(std::str::from_utf8(&plain[..len]).unwrap_or(""));
    match accepted {
        Some(v) if bool::from(padded) => Ok(v),
        _ => Err(CryptoError::Data),
    }
}

/// The Alibaba signature `md5_hex(content + "-" + secret + "-" + t)`.
pub fn alibaba_signature(content: &str, secret: &str, t: &str) -> String {
    let mut h = Md5::new();
    h.update(content.as_bytes());
    h.update(b"-");
    h.update(secret.as_bytes());
    h.update(b"-");
    h.update(t.as_bytes());
    hex(&h.finalize())
}

/// Compares without an early exit.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dnspod_des_vectors() {
        // The DNSPod documentation's vector (the key is truncated to "dnspodpa").
        assert_eq!(
            encrypt(Alg::Des, "dnspodpass", b"www.dnspod.cn").unwrap(),
            "87ae992c1321f299da3c0210a9900ae7"
        );
        assert_eq!(
            decrypt(Alg::Des, "dnspodpass", "87ae992c1321f299da3c0210a9900ae7").unwrap(),
            "www.dnspod.cn"
        );
        // lua-resty-des.
        assert_eq!(
            encrypt(Alg::Des, "weijianliao", b"www.google.com").unwrap(),
            "cd52888ecabcac455a14ddbac7f03d97"
        );
        // A response body, computed with openssl (reference/httpdns-api.md §1.5).
        assert_eq!(
            encrypt(Alg::Des, "dnspodpa", b"121.12.53.35;106.227.19.35,120|1.2.3.4").unwrap(),
            "144e9041e2ae827f20be462611a716c681f90c862ccdf0b3f63cef16b6b8db88fc16b1f2174a6659"
        );
        assert_eq!(
            decrypt(Alg::Des, "dnspodpa", "87AE992C1321F299DA3C0210A9900AE7").unwrap(),
            "www.dnspod.cn"
        );
    }

    #[test]
    fn des_refuses_bad_input() {
        assert_eq!(encrypt(Alg::Des, "short", b"x"), Err(CryptoError::Key));
        assert_eq!(decrypt(Alg::Des, "dnspodpass", "zz"), Err(CryptoError::Data));
        assert_eq!(
            decrypt(Alg::Des, "dnspodpass", "87ae992c1321f299"),
            Err(CryptoError::Data),
            "bad padding"
        );
        assert_ne!(
            decrypt(Alg::Des, "otherkey", "87ae992c1321f299da3c0210a9900ae7").ok().as_deref(),
            Some("www.dnspod.cn")
        );
    }

    #[test]
    fn aes_round_trips_with_a_random_iv() {
        let a = encrypt(Alg::Aes, "mykey", b"www.dnspod.cn").unwrap();
        let b = encrypt(Alg::Aes, "mykey", b"www.dnspod.cn").unwrap();
        assert_ne!(a, b, "fresh IV each time");
        assert_eq!(a.len(), 64, "IV + one block, hex");
        assert_eq!(decrypt(Alg::Aes, "mykey", &a).unwrap(), "www.dnspod.cn");
        // The key is padded with '0': "mykey" and "mykey00000000000" are the same key.
        assert_eq!(decrypt(Alg::Aes, "mykey00000000000", &b).unwrap(), "www.dnspod.cn");
        assert_ne!(decrypt(Alg::Aes, "otherkey", &a).ok().as_deref(), Some("www.dnspod.cn"));
        assert_eq!(decrypt(Alg::Aes, "mykey", "00"), Err(CryptoError::Data));
    }

    #[test]
    fn aes_matches_an_independent_implementation() {
        // openssl enc -aes-128-cbc -K <hex("mykey00000000000")> -iv 000102030405060708090a0b0c0d0e0f
        //   <<< "www.dnspod.cn" (no newline)
        let wire = "000102030405060708090a0b0c0d0e0f".to_owned() + OPENSSL_AES;
        assert_eq!(decrypt(Alg::Aes, "mykey", &wire).unwrap(), "www.dnspod.cn");
    }

    const OPENSSL_AES: &str = "55544a19690fd1f3664286ccf0e5559a";

    #[test]
    fn alibaba_signature_vectors() {
        assert_eq!(
            alibaba_signature("www.aliyun.com", "IAmASecret", "1534316400"),
            "60c71e98b6d7fcbb366243e224eab457"
        );
        assert_eq!(
            alibaba_signature("www.aliyun.com,www.taobao.com", "IAmASecret", "1534316400"),
            "12a3f6b1b14a46ca813ca6439beb59a4"
        );
    }

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn hex_helpers() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(unhex("000FfF"), Some(vec![0, 15, 255]));
        assert_eq!(unhex("abc"), Some(vec![0xab]), "odd nibble ignored, as the SDK does");
        assert_eq!(unhex("zz"), None);
    }
}
