//! TLS for every listener: certificates from PEM files, chosen by SNI, reloaded without a
//! restart, with their expiry exported.
//!
//! The certificate file may hold several chains one after another (the HTTPDNS name, the
//! mirror's CDN name, an IP certificate for SDKs that connect to a bare address); the key file
//! holds their private keys. Each key finds its leaf by public key, and a chain is its leaf
//! with the certificates that follow it up to the next leaf. A client's SNI name picks the
//! chain whose leaf names it (exactly, or by a `*.` wildcard); no SNI, or a name nobody
//! covers, gets the first chain.
//!
//! A reload (files changed, or SIGHUP) parses everything first and swaps only a complete,
//! consistent set in; if anything fails, the set in service stays and the failure is logged
//! and counted. New handshakes see a new set at once; connections already open keep theirs.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use prometheus::{IntCounter, IntGaugeVec, Opts, Registry};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::http::Secure;

/// Why a certificate set could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{0}")]
    Config(String),
}

fn file_error(path: &Path, message: impl std::fmt::Display) -> TlsError {
    TlsError::File { path: path.to_owned(), message: message.to_string() }
}

/// One chain and what it answers for.
#[derive(Debug)]
struct Chain {
    key: Arc<CertifiedKey>,
    /// DNS names of the leaf (lowercase; `*.x` wildcards kept as written).
    names: Vec<String>,
    /// The leaf's notAfter, seconds since the epoch.
    not_after: i64,
    /// How the expiry metric names it: the first DNS or IP name, else the subject.
    label: String,
}

/// A loaded, consistent set of chains.
#[derive(Debug)]
struct CertSet {
    chains: Vec<Chain>,
    exact: HashMap<String, usize>,
}

impl CertSet {
    fn choose(&self, sni: Option<&str>) -> Arc<CertifiedKey> {
        let found = sni.and_then(|name| {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if let Some(i) = self.exact.get(&name) {
                return Some(*i);
            }
            let parent = name.split_once('.')?.1;
            self.exact.get(&format!("*.{parent}")).copied()
        });
        self.chains[found.unwrap_or(0)].key.clone()
    }
}

/// Parses a certificate file and a key file into a set, checking every key against its leaf.
fn load_set(cert_path: &Path, key_path: &Path) -> Result<CertSet, TlsError> {
    let cert_pem = std::fs::read(cert_path).map_err(|e| file_error(cert_path, e))?;
    let key_pem = std::fs::read(key_path).map_err(|e| file_error(key_path, e))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(cert_path, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(cert_path, "holds no certificate"));
    }
    let keys: Vec<PrivateKeyDer<'static>> = PrivateKeyDer::pem_slice_iter(&key_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(key_path, format!("not PEM private keys: {e}")))?;
    if keys.is_empty() {
        return Err(file_error(key_path, "holds no private key"));
    }
    let provider = rustls::crypto::ring::default_provider();
    let parsed: Vec<x509_parser::certificate::X509Certificate<'_>> = certs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            x509_parser::parse_x509_certificate(c.as_ref())
                .map(|(_, x)| x)
                .map_err(|e| file_error(cert_path, format!("certificate {}: {e}", i + 1)))
        })
        .collect::<Result<_, _>>()?;
    // Which certificate each key belongs to.
    let mut leaves = Vec::new();
    for (k, key) in keys.into_iter().enumerate() {
        let signer = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| file_error(key_path, format!("private key {}: {e}", k + 1)))?;
        let spki = signer
            .public_key()
            .ok_or_else(|| file_error(key_path, format!("private key {}: no public key", k + 1)))?;
        let leaf = parsed
            .iter()
            .position(|c| c.public_key().raw == spki.as_ref())
            .ok_or_else(|| file_error(cert_path, format!("no certificate matches private key {}", k + 1)))?;
        leaves.push((leaf, signer));
    }
    leaves.sort_by_key(|(leaf, _)| *leaf);
    let mut chains = Vec::new();
    for (n, (leaf, signer)) in leaves.iter().enumerate() {
        let end = leaves.get(n + 1).map_or(certs.len(), |(next, _)| *next);
        let key = Arc::new(CertifiedKey::new(certs[*leaf..end].to_vec(), signer.clone()));
        key.keys_match().map_err(|e| TlsError::Config(format!("certificate {}: {e}", leaf + 1)))?;
        let x = &parsed[*leaf];
        let mut names = Vec::new();
        let mut ips = Vec::new();
        if let Ok(Some(san)) = x.subject_alternative_name() {
            for g in &san.value.general_names {
                match g {
                    x509_parser::extensions::GeneralName::DNSName(d) => names.push(d.to_ascii_lowercase()),
                    x509_parser::extensions::GeneralName::IPAddress(b) => ips.push(ip_text(b)),
                    _ => {}
                }
            }
        }
        let label = names.first().or(ips.first()).cloned().unwrap_or_else(|| x.subject().to_string());
        chains.push(Chain { key, names, not_after: x.validity().not_after.timestamp(), label });
    }
    let mut exact = HashMap::new();
    for (i, c) in chains.iter().enumerate() {
        for n in &c.names {
            exact.entry(n.clone()).or_insert(i);
        }
    }
    Ok(CertSet { chains, exact })
}

fn ip_text(bytes: &[u8]) -> String {
    match bytes.len() {
        4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(bytes).expect("4 bytes")).to_string(),
        16 => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).expect("16 bytes")).to_string(),
        _ => "ip".to_owned(),
    }
}

/// What the files looked like when last read: a reload happens when this changes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Vec<Option<(SystemTime, u64)>>);

fn stamp(paths: &[&Path]) -> Stamp {
    Stamp(
        paths
            .iter()
            .map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len()))))
            .collect(),
    )
}

/// The certificates of the process, shared by every TLS listener.
pub struct TlsCerts {
    cert_path: PathBuf,
    key_path: PathBuf,
    set: ArcSwap<CertSet>,
    stamp: Mutex<Stamp>,
    expiry: IntGaugeVec,
    reload_errors: IntCounter,
    reloads: IntCounter,
}

impl std::fmt::Debug for TlsCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsCerts").field("cert", &self.cert_path).field("key", &self.key_path).finish()
    }
}

impl TlsCerts {
    /// Loads the files (a startup error names the file) and registers the metrics.
    pub fn load(cert_path: &Path, key_path: &Path, registry: &Registry) -> Result<Arc<Self>, TlsError> {
        let set = load_set(cert_path, key_path)?;
        let expiry = IntGaugeVec::new(
            Opts::new(
                "tls_certificate_expiry_seconds",
                "When each served certificate expires (notAfter), seconds since the epoch",
            ),
            &["name"],
        )
        .expect("metric");
        let reload_errors = IntCounter::new(
            "tls_reload_errors_total",
            "Certificate reloads that failed; the certificates in service were kept",
        )
        .expect("metric");
        let reloads =
            IntCounter::new("tls_reloads_total", "Certificate sets loaded after start").expect("metric");
        registry.register(Box::new(expiry.clone())).expect("unique metric");
        registry.register(Box::new(reload_errors.clone())).expect("unique metric");
        registry.register(Box::new(reloads.clone())).expect("unique metric");
        let certs = Self {
            stamp: Mutex::new(stamp(&[cert_path, key_path])),
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            set: ArcSwap::from_pointee(set),
            expiry,
            reload_errors,
            reloads,
        };
        certs.export();
        for c in &certs.set.load().chains {
            tracing::info!(name = %c.label, names = ?c.names, not_after = c.not_after, "TLS certificate loaded.");
        }
        Ok(Arc::new(certs))
    }

    fn export(&self) {
        self.expiry.reset();
        for c in &self.set.load().chains {
            self.expiry.with_label_values(&[c.label.as_str()]).set(c.not_after);
        }
    }

    /// Reloads when the files changed since the last look (or always, when `force`: SIGHUP).
    /// `Ok(true)`: a new set is in service. On error the set in service stays.
    pub fn reload(&self, force: bool) -> Result<bool, TlsError> {
        let now = stamp(&[&self.cert_path, &self.key_path]);
        {
            let mut seen = self.stamp.lock();
            if !force && *seen == now {
                return Ok(false);
            }
            // Remembered even when the load fails, so a broken file is reported once, not on
            // every look; fixing it changes the stamp again.
            *seen = now;
        }
        match load_set(&self.cert_path, &self.key_path) {
            Ok(set) => {
                for c in &set.chains {
                    tracing::info!(name = %c.label, names = ?c.names, not_after = c.not_after, "TLS certificate reloaded.");
                }
                self.set.store(Arc::new(set));
                self.export();
                self.reloads.inc();
                Ok(true)
            }
            Err(e) => {
                self.reload_errors.inc();
                tracing::error!(error = %e, "TLS certificate reload failed; the certificates in service stay.");
                Err(e)
            }
        }
    }

    /// Earliest expiry of the set in service, seconds since the epoch.
    pub fn earliest_expiry(&self) -> i64 {
        self.set.load().chains.iter().map(|c| c.not_after).min().unwrap_or(0)
    }
}

impl ResolvesServerCert for TlsCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.set.load().choose(hello.server_name()))
    }
}

/// One TLS listener: the shared certificates with this listener's protocols (ALPN).
pub struct TlsServer {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer").finish_non_exhaustive()
    }
}

/// ALPN of HTTPS listeners: HTTP/2 preferred, HTTP/1.1 for the rest.
pub const ALPN_HTTP: &[&[u8]] = &[b"h2", b"http/1.1"];
/// ALPN of DNS over TLS (RFC 7858 registers `dot`); clients that send none are served too.
pub const ALPN_DOT: &[&[u8]] = &[b"dot"];

impl TlsServer {
    /// TLS 1.2 and 1.3 with the `ring` provider, session resumption by tickets (stateless,
    /// keys rotated) and by session id (a bounded in-memory cache).
    pub fn new(certs: Arc<TlsCerts>, alpn: &[&[u8]]) -> Result<Arc<Self>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(certs);
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config.ticketer =
            rustls::crypto::ring::Ticketer::new().map_err(|e| TlsError::Config(e.to_string()))?;
        config.session_storage = rustls::server::ServerSessionMemoryCache::new(16_384);
        Ok(Arc::new(Self { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)) }))
    }

    /// Runs the handshake (the caller bounds its time).
    pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        io: S,
    ) -> std::io::Result<(tokio_rustls::server::TlsStream<S>, Secure)> {
        let stream = self.acceptor.accept(io).await?;
        let server_name = stream.get_ref().1.server_name().map(str::to_owned);
        Ok((stream, Secure { server_name }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn several_chains_are_chosen_by_server_name() {
        let dir = tempfile::tempdir().unwrap();
        let (c1, k1) = chain(&["httpdns.example.com", "203.107.1.1"]);
        let (c2, k2) = chain(&["*.cdn.example.com"]);
        // Keys in the other order than their certificates: matched by public key.
        let cert = write(dir.path(), "cert.pem", &format!("{c1}{c2}"));
        let key = write(dir.path(), "key.pem", &format!("{k2}{k1}"));
        let set = load_set(&cert, &key).unwrap();
        assert_eq!(set.chains.len(), 2);
        assert_eq!(set.chains[0].label, "httpdns.example.com");
        let first = set.chains[0].key.clone();
        let second = set.chains[1].key.clone();
        assert!(Arc::ptr_eq(&set.choose(Some("httpdns.example.com")), &first));
        assert!(Arc::ptr_eq(&set.choose(Some("HTTPDNS.example.com.")), &first));
        assert!(Arc::ptr_eq(&set.choose(Some("img.cdn.example.com")), &second));
        assert!(Arc::ptr_eq(&set.choose(Some("a.b.cdn.example.com")), &first), "wildcards cover one label");
        assert!(Arc::ptr_eq(&set.choose(None), &first), "no SNI: the first chain");
    }

    #[test]
    fn bad_files_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let (c1, _) = chain(&["a.example.com"]);
        let (_, k2) = chain(&["b.example.com"]);
        let cert = write(dir.path(), "cert.pem", &c1);
        let other_key = write(dir.path(), "key.pem", &k2);
        let e = load_set(&cert, &other_key).unwrap_err().to_string();
        assert!(e.contains("cert.pem") && e.contains("no certificate matches private key 1"), "{e}");
        let empty = write(dir.path(), "empty.pem", "not a pem file\n");
        let e = load_set(&empty, &other_key).unwrap_err().to_string();
        assert!(e.contains("empty.pem") && e.contains("no certificate"), "{e}");
        let e = load_set(&dir.path().join("missing.pem"), &other_key).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
    }

    #[test]
    fn a_broken_reload_keeps_the_certificates_in_service() {
        let dir = tempfile::tempdir().unwrap();
        let (c1, k1) = chain(&["a.example.com"]);
        let cert = write(dir.path(), "cert.pem", &c1);
        let key = write(dir.path(), "key.pem", &k1);
        let registry = Registry::new();
        let certs = TlsCerts::load(&cert, &key, &registry).unwrap();
        assert!(!certs.reload(false).unwrap(), "unchanged files: nothing to do");
        std::fs::write(&cert, "garbage").unwrap();
        assert!(certs.reload(true).is_err());
        assert_eq!(certs.set.load().chains[0].label, "a.example.com");
        assert_eq!(certs.reload_errors.get(), 1);
        let (c2, k2) = chain(&["b.example.com"]);
        std::fs::write(&key, k2).unwrap();
        std::fs::write(&cert, c2).unwrap();
        assert!(certs.reload(true).unwrap());
        assert_eq!(certs.set.load().chains[0].label, "b.example.com");
        let text = {
            let mut out = Vec::new();
            prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &registry.gather(), &mut out)
                .unwrap();
            String::from_utf8(out).unwrap()
        };
        assert!(text.contains("tls_certificate_expiry_seconds{name=\"b.example.com\"}"), "{text}");
        assert!(!text.contains("name=\"a.example.com\""), "the replaced certificate's series is gone");
    }
}
