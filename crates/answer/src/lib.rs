//! The answer engine: a question's names, families and client in, explicit per-name and
//! per-family outcomes out. Every resolution front-end answers through it: `/d`, `/resolve`,
//! `/v2/d` and the Alibaba account routes call [`Engine::answer`] and only format what it
//! returns; plain DNS and DoH resolve a managed name's family through [`family()`] on their
//! general path (the DNS fast path stays on the wire, byte-checked against the general one).
//!
//! # Layout
//!
//! * [`engine`]: [`Engine`], [`Question`] in, [`Answers`] out; the upstream step for names not
//!   managed here (concurrent, through `httpdns_upstream`).
//! * [`family`](mod@family): one family of one managed domain, aliases followed in the snapshot.
//! * [`outcome`]: [`Outcome`] of a name, [`Endpoint`] it is counted under.
//! * [`metrics`]: the engine's series (`answers_total`, `answer_duration_seconds`,
//!   `answers_by_client_total`).
//! * [`tally`]: per-domain query counts of every front-end, DNS and HTTP, by minute.
//!
//! # Invariants
//!
//! * No HTTP here: no axum, no `http` status codes, no application state, and nothing of
//!   `catalog`, `dns` or `api` above it (test `tests::depends_on_no_edge`).
//! * Answering reads one [`httpdns_live::Published`] and the GeoIP readers; it never awaits the
//!   database. Only names not managed here wait, on the upstream resolver.

pub mod engine;
pub mod family;
pub mod metrics;
pub mod outcome;
pub mod tally;

pub use engine::{client_attrs, Answers, Engine, NameAnswer, Question};
pub use family::{family, FamilyAnswer, Found, MAX_ALIASES};
pub use outcome::{Endpoint, Outcome};

#[cfg(test)]
mod tests {
    /// The engine sits below every front-end: its manifest names none of them, nor HTTP.
    #[test]
    fn depends_on_no_edge() {
        let manifest = include_str!("../Cargo.toml");
        let deps = manifest.split("[dependencies]").nth(1).and_then(|s| s.split("\n[").next()).unwrap();
        for edge in ["axum", "http.", "httpdns-api", "httpdns-dns", "httpdns-catalog", "httpdns-guard"] {
            assert!(!deps.lines().any(|l| l.starts_with(edge)), "{edge} in [dependencies]");
        }
    }
}
