//! The config document on the device (seed `000` §2.4, §3.2, §4.4).
//!
//! The app ships with a default document; the last good document is kept on disk; the config
//! center is polled every `configRequestInterval` with a conditional GET (`If-None-Match` with
//! the version held). Every body must carry a valid Ed25519 signature (`X-Config-Signature`)
//! under the pinned public key, and must parse and validate as a document. Of every source
//! (default, file, service, a document pushed by another channel) the one with the larger
//! `configVersion` wins, so an old response from a lagging replica or a stale push never
//! rolls a device back.

use parking_lot::{Mutex, RwLock};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use httpdns_config::ConfigDocument;
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Default)]
pub struct ConfigOptions {
    /// `http://host/app/config-center/module-config?module=cdn`.
    pub url: Option<Url>,
    /// The config center's Ed25519 public key (base64), pinned in the app. Without it the key
    /// is fetched once from the server (`/app/config-center/public-key`), which protects
    /// against corruption but not against an attacker in the path.
    pub public_key: Option<String>,
    /// Where the last good document is kept.
    pub state_file: Option<PathBuf>,
    /// The document shipped with the app.
    pub default: Option<ConfigDocument>,
    pub timeout: Option<Duration>,
    /// Never hold a long poll, even where the server offers one: poll every
    /// `configRequestInterval` only.
    pub poll_only: bool,
}

/// The longest this client asks the server to hold a long poll: below common idle timeouts of
/// carrier NATs and proxies (often 60 s or less), so a held request is not cut silently.
pub const LONG_POLL: Duration = Duration::from_secs(30);
/// The header by which the server offers long polls (the longest wait, in seconds).
pub const LONG_POLL_HEADER: &str = "x-config-long-poll";

/// Where the document in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    Default,
    File,
    Service,
    Pushed,
}

#[derive(Debug, Clone)]
pub struct ActiveConfig {
    pub doc: ConfigDocument,
    pub version: u64,
    pub origin: Origin,
}

/// The outcome of one poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// `304`: what we hold is current.
    NotModified,
    /// A newer version is now in force.
    Updated(u64),
    /// The server answered a version not newer than ours; ours stays.
    NotNewer(u64),
}

#[derive(Serialize, Deserialize)]
struct StateFile {
    origin: Origin,
    /// The exact signed body, as text (documents are JSON).
    body: String,
    signature: String,
}

#[derive(Debug)]
pub struct ConfigStore {
    opts: ConfigOptions,
    http: reqwest::Client,
    key: Mutex<Option<String>>,
    current: RwLock<Option<Arc<ActiveConfig>>>,
    /// The longest wait the server last offered, in seconds (0: it holds no requests).
    offered: std::sync::atomic::AtomicU64,
}

impl ConfigStore {
    /// Starts from the larger of the shipped default and the kept file.
    pub fn new(opts: ConfigOptions) -> Self {
        let http = crate::http::client_builder()
            .no_proxy()
            .timeout(opts.timeout.unwrap_or(Duration::from_secs(10)))
            .build()
            .expect("a reqwest client with static settings");
        let current = opts
            .default
            .clone()
            .map(|doc| Arc::new(ActiveConfig { version: doc.config_version, doc, origin: Origin::Default }));
        let store = Self {
            key: Mutex::new(opts.public_key.clone()),
            opts,
            http,
            current: RwLock::new(current),
            offered: std::sync::atomic::AtomicU64::new(0),
        };
        if let Some(path) = &store.opts.state_file {
            match std::fs::read(path).map(|b| serde_json::from_slice::<StateFile>(&b)) {
                Ok(Ok(state)) => {
                    // Verified before it was written; verified again when the key is pinned.
                    let key = store.opts.public_key.as_deref();
                    let trusted = key.is_none_or(|k| {
                        httpdns_config::signing::verify(k, state.body.as_bytes(), &state.signature)
                    });
                    match parse(state.body.as_bytes()) {
                        Ok(doc) if trusted => {
                            store.install(doc, Origin::File, None);
                        }
                        _ => {
                            tracing::warn!(path = %path.display(), "Ignoring a kept config document that does not verify.");
                        }
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(path = %path.display(), error = %e, "Ignoring an unreadable config file.");
                }
                Err(_) => {}
            }
        }
        store
    }

    pub fn current(&self) -> Option<Arc<ActiveConfig>> {
        self.current.read().clone()
    }

    /// Installs `doc` if its version is larger than the one in force, and keeps its signed
    /// body on disk (when it came with one) under the same lock, so the file always holds the
    /// version in force, never an older one written late.
    fn install(&self, doc: ConfigDocument, origin: Origin, signed: Option<(&[u8], &str)>) -> bool {
        let mut cur = self.current.write();
        if cur.as_ref().is_some_and(|c| c.version >= doc.config_version) {
            return false;
        }
        *cur = Some(Arc::new(ActiveConfig { version: doc.config_version, doc, origin }));
        if let Some((body, signature)) = signed {
            self.keep(origin, body, signature);
        }
        true
    }

    /// A signed document from another channel (a push, a file shipped with an update).
    /// Returns whether it is now in force.
    pub async fn offer(&self, body: &[u8], signature: &str) -> Result<bool> {
        self.verify(body, signature).await?;
        let doc = parse(body)?;
        Ok(self.install(doc, Origin::Pushed, Some((body, signature))))
    }

    /// One conditional GET of the config center.
    pub async fn refresh(&self) -> Result<Refresh> {
        self.get(None).await
    }

    /// How long the server offers to hold a long poll (its last answer's
    /// [`LONG_POLL_HEADER`]), capped at [`LONG_POLL`]; `None` where it holds none, or the
    /// options say poll only.
    pub fn long_poll(&self) -> Option<Duration> {
        let offered = self.offered.load(std::sync::atomic::Ordering::Relaxed);
        (!self.opts.poll_only && offered > 0).then(|| Duration::from_secs(offered).min(LONG_POLL))
    }

    /// One long poll: the server answers when a version newer than ours is served, else `304`
    /// after `wait`.
    pub async fn wait_for_change(&self, wait: Duration) -> Result<Refresh> {
        self.get(Some(wait)).await
    }

    async fn get(&self, wait: Option<Duration>) -> Result<Refresh> {
        let mut url =
            self.opts.url.clone().ok_or_else(|| Error::Config("no config URL configured".into()))?;
        let mut req = match wait {
            None => self.http.get(url),
            Some(w) => {
                url.query_pairs_mut().append_pair("wait", &w.as_secs().to_string());
                // The request is held up to `w`: its own bound is that plus the usual one.
                self.http.get(url).timeout(w + self.opts.timeout.unwrap_or(Duration::from_secs(10)))
            }
        };
        if let Some(cur) = self.current() {
            req = req.header("If-None-Match", format!("\"{}\"", cur.version));
        }
        let resp = req.send().await.map_err(Error::ConfigFetch)?;
        let offered = resp
            .headers()
            .get(LONG_POLL_HEADER)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            .unwrap_or(0);
        self.offered.store(offered, std::sync::atomic::Ordering::Relaxed);
        match resp.status() {
            StatusCode::NOT_MODIFIED => return Ok(Refresh::NotModified),
            StatusCode::OK => {}
            s => return Err(Error::Config(format!("config center answered {s}"))),
        }
        let signature = resp
            .headers()
            .get("x-config-signature")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| Error::Config("unsigned config document".into()))?;
        let body = resp.bytes().await.map_err(Error::ConfigFetch)?;
        self.verify(&body, &signature).await?;
        let doc = parse(&body)?;
        let version = doc.config_version;
        if self.install(doc, Origin::Service, Some((&body, &signature))) {
            Ok(Refresh::Updated(version))
        } else {
            Ok(Refresh::NotNewer(version))
        }
    }

    /// The config center's answer rendered for this device (`POST` with `deviceId`): the
    /// signed body as JSON, with the `resolution` the server decided for the device's place,
    /// segment and bucket. Not installed: the document in force comes from the conditional
    /// GET; this is for the per-device fields.
    pub async fn device_answer(&self, device_id: &str, segment: Option<&str>) -> Result<serde_json::Value> {
        let url = self.opts.url.clone().ok_or_else(|| Error::Config("no config URL configured".into()))?;
        let module = url
            .query_pairs()
            .find(|(k, _)| k == "module")
            .map(|(_, v)| v.into_owned())
            .ok_or_else(|| Error::Config("the config URL names no module".into()))?;
        let mut body = serde_json::json!({
            "module": module, "deviceId": device_id, "platform": "rust",
            "configVersion": self.current().map_or(0, |c| c.version),
        });
        if let Some(s) = segment {
            body["segment"] = serde_json::Value::from(s);
        }
        let resp = self.http.post(url).json(&body).send().await.map_err(Error::ConfigFetch)?;
        if !resp.status().is_success() {
            return Err(Error::Config(format!("config center answered {}", resp.status())));
        }
        let signature = resp
            .headers()
            .get("x-config-signature")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| Error::Config("unsigned config answer".into()))?;
        let bytes = resp.bytes().await.map_err(Error::ConfigFetch)?;
        self.verify(&bytes, &signature).await?;
        serde_json::from_slice(&bytes)
            .map_err(|source| Error::ConfigParse { what: "malformed answer", source })
    }

    async fn verify(&self, body: &[u8], signature: &str) -> Result<()> {
        let pinned = self.key.lock().clone();
        let key = match pinned {
            Some(k) => k,
            None => {
                let k = self.fetch_key().await?;
                *self.key.lock() = Some(k.clone());
                k
            }
        };
        if httpdns_config::signing::verify(&key, body, signature) {
            Ok(())
        } else {
            Err(Error::Config("the document's signature does not verify".into()))
        }
    }

    async fn fetch_key(&self) -> Result<String> {
        #[derive(Deserialize)]
        struct Key {
            public_key: String,
        }
        let mut url =
            self.opts.url.clone().ok_or_else(|| Error::Config("no public key and no config URL".into()))?;
        url.set_path("/app/config-center/public-key");
        url.set_query(None);
        let resp = self.http.get(url).send().await.map_err(Error::ConfigFetch)?;
        if !resp.status().is_success() {
            return Err(Error::Config(format!("public key: status {}", resp.status())));
        }
        let key: Key = resp.json().await.map_err(Error::ConfigKey)?;
        Ok(key.public_key)
    }

    fn keep(&self, origin: Origin, body: &[u8], signature: &str) {
        let Some(path) = &self.opts.state_file else { return };
        let state = StateFile {
            origin,
            body: String::from_utf8_lossy(body).into_owned(),
            signature: signature.to_owned(),
        };
        let bytes = serde_json::to_vec(&state).expect("serialisable");
        if let Err(e) = crate::fsutil::write_atomic(path, &bytes) {
            tracing::warn!(path = %path.display(), error = %e, "Could not keep the config document.");
        }
    }
}

/// Parses and validates a served document (with its `configVersion`).
pub fn parse(body: &[u8]) -> Result<ConfigDocument> {
    let doc: ConfigDocument = serde_json::from_slice(body)
        .map_err(|source| Error::ConfigParse { what: "malformed document", source })?;
    doc.validate().map_err(|e| Error::Config(format!("{}: {}", e.field, e.message)))?;
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use httpdns_config::Signer;

    fn body(version: u64, host: &str) -> Vec<u8> {
        format!(
            r#"{{"mergeHostConfigs":[],"hostListConfig":[{{"host":"{host}","rate":1}}],
            "reviveProbeInterval":600000,"configRequestInterval":600000,"configVersion":{version},"publicIpList":[]}}"#
        )
        .into_bytes()
    }

    #[tokio::test]
    async fn larger_version_wins_and_bad_signatures_are_refused() {
        let signer = Signer::from_seed([7; 32]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        let default = parse(&body(2, "default.cdn.com")).unwrap();
        let opts = ConfigOptions {
            public_key: Some(signer.public_key_base64()),
            state_file: Some(file.clone()),
            default: Some(default),
            ..Default::default()
        };
        let store = ConfigStore::new(opts.clone());
        assert_eq!(store.current().unwrap().origin, Origin::Default);
        // Older than the default: not taken.
        let b1 = body(1, "one.cdn.com");
        assert!(!store.offer(&b1, &signer.sign(&b1)).await.unwrap());
        // Tampered: refused.
        let b5 = body(5, "five.cdn.com");
        let mut tampered = b5.clone();
        tampered[30] ^= 1;
        assert!(store.offer(&tampered, &signer.sign(&b5)).await.is_err());
        let other = Signer::from_seed([8; 32]);
        assert!(store.offer(&b5, &other.sign(&b5)).await.is_err());
        assert!(store.offer(&b5, &signer.sign(&b5)).await.unwrap());
        assert_eq!(store.current().unwrap().version, 5);
        // A restart starts from the kept file, which beats the older default.
        let again = ConfigStore::new(opts.clone());
        let cur = again.current().unwrap();
        assert_eq!((cur.version, cur.origin), (5, Origin::File));
        assert_eq!(cur.doc.host_list_config[0].host.to_string(), "five.cdn.com");
        // A kept file that no longer verifies (edited on disk) is ignored.
        let text = std::fs::read_to_string(&file).unwrap().replace("five.cdn.com", "evil.cdn.com");
        std::fs::write(&file, text).unwrap();
        assert_eq!(ConfigStore::new(opts).current().unwrap().origin, Origin::Default);
    }

    #[test]
    fn invalid_documents_name_the_field() {
        let err = parse(br#"{"mergeHostConfigs":[],"hostListConfig":[],"reviveProbeInterval":600000,"configRequestInterval":600000}"#)
            .unwrap_err();
        assert!(err.to_string().contains("hostListConfig"), "{err}");
    }
}
