//! The guards in front of every product, in one place: per-key rate limits
//! ([`RateLimiter`]), the client's address behind trusted proxies ([`client_address`]), the
//! budget of wrong `token=` tries, and the account checks of the answer routes ([`d`]: `/d`'s
//! `id=`/`token=`; [`signature`]: Alibaba's signed account routes). A guard says yes, or
//! why not ([`Refusal`]); the HTTP edge answers that.
//!
//! # Invariants
//!
//! * No axum: requests come in as `http` headers and plain values (test
//!   `tests::depends_on_no_framework`).
//! * An account's quota is charged only once the request proved it holds the account's
//!   secret, so requests naming a public account id spend nothing (tests `auth` in
//!   `tests/integration`).

pub mod client;
pub mod d;
pub mod ratelimit;
pub mod refusal;
pub mod signature;

use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;
use httpdns_core::cidr::CidrTable;
use prometheus::{IntCounterVec, Opts, Registry};

pub use client::{client_address, is_secure};
pub use ratelimit::RateLimiter;
pub use refusal::Refusal;

/// Wrong `token=` tries an address may make per minute (and at once); past them, its token
/// requests are refused unread until the budget refills.
pub const TOKEN_MISSES_PER_MINUTE: f64 = 10.0;

/// What the guards are configured with.
#[derive(Debug, Clone, Default)]
pub struct GuardSettings {
    /// Proxies whose `X-Forwarded-For` / `X-Real-IP` / `X-Forwarded-Proto` are believed.
    /// Empty: none.
    pub trusted_proxies: CidrTable<()>,
    /// Requests per second and burst allowed to one client address on the unauthenticated
    /// endpoints (`/d`, `/resolve`, `/dns-query`). `None`: no per-address limit, the default,
    /// because carrier-grade NAT puts many users behind one address; accounts have their own.
    pub client_rate_limit: Option<(f64, f64)>,
    /// Only authenticated requests are answered: `/d` needs `id=` (DES/AES) or `token=`, and
    /// Alibaba's account API only its signed endpoints.
    pub auth_required: bool,
}

/// The shared guards of the answer routes: settings, the limiters, and `rate_limited_total`.
#[derive(Debug)]
pub struct Guard {
    settings: GuardSettings,
    /// Per-account request limits (`rate_limit_qps`).
    account_limits: RateLimiter<u32>,
    /// Per-address limits of unauthenticated calls ([`GuardSettings::client_rate_limit`]).
    client_limits: RateLimiter<IpAddr>,
    /// Per-address budget of wrong `token=` tries ([`TOKEN_MISSES_PER_MINUTE`]): a numeric
    /// Tencent token has few digits, so guessing must stay slow.
    token_misses: RateLimiter<IpAddr>,
    /// Requests answered 429, by who was over the limit (`account`, `client`).
    rate_limited: IntCounterVec,
}

impl Guard {
    /// The guards of `settings`, their series registered into `registry`.
    pub fn new(settings: GuardSettings, registry: &Registry) -> Self {
        let rate_limited = IntCounterVec::new(
            Opts::new("rate_limited_total", "Requests refused with 429, by scope (account, client)."),
            &["scope"],
        )
        .expect("valid metric");
        for scope in ["account", "client"] {
            rate_limited.with_label_values(&[scope]);
        }
        registry.register(Box::new(rate_limited.clone())).expect("unique metric");
        let client = settings.client_rate_limit.unwrap_or((1.0, 1.0));
        Self {
            settings,
            // Every account has its own rate (`allow_at`); these are placeholders.
            account_limits: RateLimiter::new(1.0, 1.0),
            client_limits: RateLimiter::new(client.0, client.1),
            token_misses: RateLimiter::new(TOKEN_MISSES_PER_MINUTE / 60.0, TOKEN_MISSES_PER_MINUTE),
            rate_limited,
        }
    }

    pub fn settings(&self) -> &GuardSettings {
        &self.settings
    }

    /// Whether only authenticated requests are answered.
    pub fn auth_required(&self) -> bool {
        self.settings.auth_required
    }

    /// The client of a connection from `peer` whose request carries `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        client_address(peer, headers, &self.settings.trusted_proxies)
    }

    /// Whether the request reached us over TLS (see [`is_secure`]).
    pub fn secure(&self, tls: bool, peer: Option<SocketAddr>, headers: &HeaderMap) -> bool {
        is_secure(tls, peer, headers, &self.settings.trusted_proxies)
    }

    /// Applies an account's `rate_limit_qps` (a burst of one second's worth).
    pub fn allow_account(&self, id: u32, qps: Option<u32>) -> bool {
        let ok = qps.is_none_or(|q| self.account_limits.allow_at(id, f64::from(q), f64::from(q)));
        if !ok {
            self.rate_limited.with_label_values(&["account"]).inc();
        }
        ok
    }

    /// [`Guard::allow_account`] as a result: the account's 429 when over its limit.
    pub fn charge_account(&self, id: u32, qps: Option<u32>) -> Result<(), Refusal> {
        if self.allow_account(id, qps) {
            Ok(())
        } else {
            Err(Refusal::account_throttled())
        }
    }

    /// The per-address limit of unauthenticated calls, keyed by the connection's client (the
    /// peer, or what a trusted proxy said), never by the `ip=` a request names.
    pub fn allow_client(&self, peer: IpAddr) -> bool {
        let Some((rate, burst)) = self.settings.client_rate_limit else { return true };
        let ok = self.client_limits.allow_at(peer, rate, burst);
        if !ok {
            self.rate_limited.with_label_values(&["client"]).inc();
        }
        ok
    }

    /// [`Guard::allow_client`] as a result: the address's 429 when over its limit.
    pub fn charge_client(&self, peer: IpAddr) -> Result<(), Refusal> {
        if self.allow_client(peer) {
            Ok(())
        } else {
            Err(Refusal::client_throttled())
        }
    }
}

#[cfg(test)]
mod tests {
    /// The guards take `http` types, never a web framework's.
    #[test]
    fn depends_on_no_framework() {
        let manifest = include_str!("../Cargo.toml");
        let deps = manifest.split("[dependencies]").nth(1).and_then(|s| s.split("\n[").next()).unwrap();
        for edge in ["axum", "tower", "httpdns-api", "httpdns-catalog", "httpdns-answer"] {
            assert!(!deps.lines().any(|l| l.starts_with(edge)), "{edge} in [dependencies]");
        }
    }
}
