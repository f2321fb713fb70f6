//! The authentication of `/d` (and of `/conf`, which shares its parameters): an account's
//! `id=` with `dn` (and `ip`) encrypted by its key, or its `token=` over HTTPS, or nothing
//! when unauthenticated requests are allowed.

use std::borrow::Cow;
use std::net::IpAddr;

use http::StatusCode;
use httpdns_live::Published;

use crate::{Guard, Refusal};

/// How a `/d` request authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    /// `id=`: `dn` came encrypted, the answer goes back encrypted the same way.
    Encrypted(httpdns_auth::Alg, String),
    /// `token=` over HTTPS: plain text both ways.
    Token,
}

/// The credentials a request carries, as sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Credentials<'c> {
    pub token: Option<&'c str>,
    pub id: Option<&'c str>,
    pub alg: Option<&'c str>,
}

/// The parameters that may come encrypted with the account's key, replaced in place by
/// their plain text once they decrypted.
#[derive(Debug)]
pub struct SealedFields<'r, 'a> {
    pub dn: &'r mut Option<Cow<'a, str>>,
    pub ip: &'r mut Option<Cow<'a, str>>,
}

/// A parameter that may come encrypted with the account's key: `dn` or `ip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealed {
    Dn,
    Ip,
}

impl Sealed {
    pub fn field(self) -> &'static str {
        match self {
            Sealed::Dn => "dn",
            Sealed::Ip => "ip",
        }
    }
}

impl Guard {
    /// For a request with `id=`: checks the account and replaces `dn` and `ip` (when it is
    /// encrypted: the SDKs send it in plain text) by their decrypted values, which `valid`
    /// must accept, returning the cipher and key to encrypt the answer with. With `token=`
    /// (HTTPS only): checks the account. Without either, passes when unauthenticated
    /// requests are allowed. The account's quota is charged once it authenticated.
    pub fn authenticate_d<'a>(
        &self,
        snapshot: &Published,
        peer: IpAddr,
        secure: bool,
        creds: Credentials<'_>,
        sealed: SealedFields<'_, 'a>,
        valid: impl Fn(Sealed, &str) -> bool,
    ) -> Result<Auth, Refusal> {
        if let Some(token) = creds.token.filter(|t| !t.is_empty()) {
            if !secure {
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    "HttpsRequired",
                    "token= is accepted over HTTPS only (it is a secret sent in the clear)",
                )
                .with_field("token"));
            }
            // An address out of wrong tries is refused before its token is read: otherwise a
            // guesser would still learn which guess is right.
            if !self.token_misses.peek(&peer) {
                return Err(Refusal::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Throttled",
                    "too many wrong tokens from this address; try again in a minute",
                )
                .with_field("token"));
            }
            let (id, account) =
                snapshot.account_by_token(token).filter(|(_, a)| a.enabled).ok_or_else(|| {
                    self.token_misses.allow(peer);
                    Refusal::new(StatusCode::UNAUTHORIZED, "InvalidAccount", "no such token")
                        .with_field("token")
                })?;
            self.charge_account(id, account.rate_limit_qps)?;
            return Ok(Auth::Token);
        }
        let Some(id) = creds.id else {
            if self.settings.auth_required {
                return Err(Refusal::new(
                    StatusCode::UNAUTHORIZED,
                    "Unauthorized",
                    "this server answers authenticated requests only: send id= with dn encrypted, or token= over HTTPS",
                ));
            }
            return Ok(Auth::None);
        };
        let invalid =
            || Refusal::new(StatusCode::UNAUTHORIZED, "InvalidAccount", "no such account").with_field("id");
        let id = httpdns_core::model::parse_account_id(id).map_err(|_| invalid())?;
        let account = snapshot.account(id).filter(|a| a.enabled).ok_or_else(invalid)?;
        let alg = match creds.alg {
            None | Some("") => httpdns_auth::Alg::Des,
            Some(a) if a.eq_ignore_ascii_case("des") => httpdns_auth::Alg::Des,
            Some(a) if a.eq_ignore_ascii_case("aes") => httpdns_auth::Alg::Aes,
            Some(_) => return Err(Refusal::bad_request("InvalidArgument", "alg", "alg must be des or aes")),
        };
        let secret = account.secret.clone();
        for (which, slot) in [(Sealed::Dn, sealed.dn), (Sealed::Ip, sealed.ip)] {
            let Some(v) = slot.as_deref().filter(|v| !v.is_empty()) else { continue };
            // The official SDKs send `ip` in plain text although the document says it is
            // encrypted: an address as it is stays as it is.
            if which == Sealed::Ip && v.parse::<IpAddr>().is_ok() {
                continue;
            }
            // Decrypted and checked as one step with one failure: a padding error answered
            // apart from a bad name would be a padding oracle on AES-CBC (docs/api.md).
            let accept = |text: &str| valid(which, text).then(|| text.to_owned());
            let field = which.field();
            let plain = httpdns_auth::decrypt_with(alg, &secret, v, accept).map_err(|_| {
                Refusal::bad_request(
                    "InvalidArgument",
                    field,
                    format!("{field} does not decrypt with the account's key to a valid value"),
                )
            })?;
            *slot = Some(Cow::Owned(plain));
        }
        // Charged once the parameters decrypted with the account's key: requests that merely
        // name a public account id must not spend the app's quota.
        self.charge_account(id, account.rate_limit_qps)?;
        Ok(Auth::Encrypted(alg, secret))
    }
}
