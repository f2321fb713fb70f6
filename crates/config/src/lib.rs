//! The config center's pure logic: the app config document of seed `000`, its validation,
//! gray-release hashing, change summaries and Ed25519 signatures. No IO.
//!
//! # Layout
//!
//! * [`document`]: [`ConfigDocument`] and how it is rendered for apps.
//! * [`guard`]: guarded rollouts' spec and each tick's decision from both sides' rates.
//! * [`host`]: [`Host`], a domain name or IP literal with an optional port.
//! * [`policy`]: `resolutionPolicy` and the per-device `resolution` decision.
//! * [`rollout`]: the documented `sha256(host + "." + deviceId)` bucketing.
//! * [`summary`]: a one-line description of what a publish changes.
//! * [`signing`]: signing served bodies and verifying them.
//! * [`sketch`]: distinct devices in bounded memory (HyperLogLog), for adoption.
//! * [`target`]: targeting, overrides of the document by platform, app version, place, labels.

pub mod document;
pub mod guard;
pub mod host;
pub mod policy;
pub mod rollout;
pub mod signing;
pub mod sketch;
pub mod summary;
pub mod target;

pub use document::ConfigDocument;
pub use host::Host;
pub use signing::Signer;

/// A config module name: 1–64 characters of lowercase letters, digits, `-`, `_` (a token).
pub fn validate_module(name: &str) -> Result<(), httpdns_core::model::FieldError> {
    httpdns_core::Token::parse(name)
        .map(|_| ())
        .map_err(|e| httpdns_core::model::FieldError::new("module", e.to_string()))
}
