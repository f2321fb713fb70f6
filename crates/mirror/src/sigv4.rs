//! AWS Signature Version 4 for origin `GET`s and `HEAD`s to a private S3-compatible bucket
//! (`origin_auth`). Only what an unsigned-body read needs: the empty payload's hash, the
//! headers `host`, `range` (when sent), `x-amz-content-sha256` and `x-amz-date`. Built on the
//! `sha2` the crate already has (HMAC is a few lines); checked against AWS's published example.

use sha2::{Digest as _, Sha256};
use url::Url;

/// SHA-256 of an empty body: what a `GET` signs as its payload.
pub(crate) const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| k.map(|b| b ^ byte);
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(data).finalize();
    Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize().into()
}

/// `YYYYMMDDTHHMMSSZ` of a unix time.
pub(crate) fn amz_date(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let secs = unix_secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Percent-encodes everything but the unreserved characters (and `/` when `slash`), as SigV4's
/// canonical forms want.
fn encode(raw: &[u8], slash: bool) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The credentials and place of a signed request.
pub(crate) struct Signer<'a> {
    pub(crate) access_key_id: &'a str,
    pub(crate) secret_access_key: &'a str,
    pub(crate) region: &'a str,
}

impl Signer<'_> {
    /// The `Authorization` value of `method url` at `date` (`amz_date`), with `range` when the
    /// request carries one. The caller sends `x-amz-date: date` and
    /// `x-amz-content-sha256: EMPTY_SHA256` with it.
    pub(crate) fn authorization(&self, method: &str, url: &Url, date: &str, range: Option<&str>) -> String {
        let host = match url.port() {
            Some(p) => format!("{}:{p}", url.host_str().unwrap_or("")),
            None => url.host_str().unwrap_or("").to_owned(),
        };
        // The path as the server decodes it, encoded once the canonical way.
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(url.path()).collect();
        let path = encode(&decoded, true);
        let mut query: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| (encode(k.as_bytes(), false), encode(v.as_bytes(), false)))
            .collect();
        query.sort();
        let query: Vec<String> = query.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut headers = vec![("host", host.as_str())];
        if let Some(r) = range {
            headers.push(("range", r));
        }
        headers.push(("x-amz-content-sha256", EMPTY_SHA256));
        headers.push(("x-amz-date", date));
        let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{}\n", v.trim())).collect();
        let signed: Vec<&str> = headers.iter().map(|(k, _)| *k).collect();
        let signed = signed.join(";");
        let canonical =
            format!("{method}\n{path}\n{}\n{canonical_headers}\n{signed}\n{EMPTY_SHA256}", query.join("&"));
        let day = &date[..8];
        let scope = format!("{day}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let key = [self.region.as_bytes(), b"s3", b"aws4_request"]
            .iter()
            .fold(hmac(format!("AWS4{}", self.secret_access_key).as_bytes(), day.as_bytes()), |k, part| {
                hmac(&k, part)
            });
        let signature = hex::encode(hmac(&key, to_sign.as_bytes()));
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope},SignedHeaders={signed},Signature={signature}",
            self.access_key_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's example "GET Object" (Amazon S3 API reference, "Signature Calculations for the
    /// Authorization Header: Transferring Payload in a Single Chunk").
    #[test]
    fn aws_get_object_example() {
        let signer = Signer {
            access_key_id: "AKIAIOSFODNN7EXAMPLE",
            secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            region: "us-east-1",
        };
        let url = Url::parse("https://examplebucket.s3.amazonaws.com/test.txt").unwrap();
        let auth = signer.authorization("GET", &url, "20130524T000000Z", Some("bytes=0-9"));
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,\
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        assert_eq!(
            hex::encode(hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn dates() {
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(951_782_400 + 3_661), "20000229T010101Z");
    }
}
