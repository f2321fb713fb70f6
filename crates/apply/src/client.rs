//! The admin API as `apply` and `export` use it: read the whole state, write one change.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use httpdns_catalog::KINDS;

use super::{Change, Section, StateFile};

#[derive(Debug)]
pub struct AdminClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// The current state, with the config versions read (for `If-Match`).
#[derive(Debug)]
pub struct Current {
    pub state: StateFile,
    pub config_versions: BTreeMap<String, i64>,
}

impl AdminClient {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        // reqwest comes without a bundled TLS provider (the workspace uses ring, not aws-lc-rs):
        // ring becomes the process default unless the embedding program installed another.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The user agent names `apply` in the server's audit log (beside the token's name).
        let http = reqwest::Client::builder()
            .no_proxy()
            .user_agent(concat!("httpdns-apply/", env!("CARGO_PKG_VERSION")))
            .timeout(std::time::Duration::from_secs(30))
            .build()?;
        Ok(Self { http, base: base.trim_end_matches('/').to_owned(), token: token.to_owned() })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<String>,
    ) -> anyhow::Result<(StatusCode, String)> {
        let mut req =
            self.http.request(method.clone(), format!("{}{path}", self.base)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        if let Some(m) = if_match {
            req = req.header("if-match", m);
        }
        let resp = req.send().await.with_context(|| format!("{method} {path}"))?;
        let status = resp.status();
        Ok((status, resp.text().await?))
    }

    async fn get_json<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let (status, text) = self.send(Method::GET, path, None, None).await?;
        if !status.is_success() {
            bail!("GET {path}: {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("GET {path}: unexpected body"))
    }

    /// Every resource of a kind, following the pages.
    async fn list<T: DeserializeOwned>(&self, kind: Section) -> anyhow::Result<BTreeMap<String, T>> {
        #[derive(Deserialize)]
        struct Page {
            items: Vec<Item>,
            next: Option<String>,
        }
        #[derive(Deserialize)]
        struct Item {
            name: String,
            spec: Value,
        }
        let mut out = BTreeMap::new();
        let mut after: Option<String> = None;
        loop {
            let mut path = format!("{}?limit=1000", kind.base());
            if let Some(a) = &after {
                path.push_str(&format!("&after={}", a.replace('/', "%2F")));
            }
            let page: Page = self.get_json(&path).await?;
            for item in page.items {
                let spec = serde_json::from_value(item.spec).with_context(|| {
                    format!("{}/{}: the server's spec does not parse", kind.name(), item.name)
                })?;
                out.insert(item.name, spec);
            }
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
    }

    pub async fn current(&self) -> anyhow::Result<Current> {
        #[derive(Deserialize)]
        struct Modules {
            items: Vec<Module>,
        }
        #[derive(Deserialize)]
        struct Module {
            module: String,
            version: i64,
        }
        let mut state = StateFile::default();
        for info in KINDS.iter().filter(|k| k.declarative) {
            let specs = self.list(Section::Resource(info.kind)).await?;
            state
                .set_section(info.kind, specs)
                .map_err(|e| anyhow::anyhow!("{e}: the server's spec does not parse"))?;
        }
        let mut config_versions = BTreeMap::new();
        let modules: Modules = self.get_json(Section::Config.base()).await?;
        for m in modules.items {
            let doc: httpdns_config::ConfigDocument = self.get_json(&Section::Config.path(&m.module)).await?;
            state.config.insert(m.module.clone(), doc.content());
            config_versions.insert(m.module, m.version);
        }
        Ok(Current { state, config_versions })
    }

    /// Carries out one change.
    pub async fn apply(&self, change: &Change, current: &Current) -> anyhow::Result<()> {
        let path = change.kind().path(change.name());
        let (status, text) = match change {
            Change::Create { kind, spec, .. } | Change::Update { kind, spec, .. } => {
                // Config modules: replace exactly the version the plan was made from.
                let if_match = (*kind == Section::Config)
                    .then(|| current.config_versions.get(change.name()).map(|v| format!("\"{v}\"")))
                    .flatten();
                self.send(Method::PUT, &path, Some(spec), if_match).await?
            }
            Change::Delete { .. } => {
                let (status, text) = self.send(Method::DELETE, &path, None, None).await?;
                // A pool that only exists because nodes name it has nothing stored to delete.
                if status == StatusCode::NOT_FOUND {
                    return Ok(());
                }
                (status, text)
            }
        };
        if !status.is_success() {
            bail!("{change}: {status}: {text}");
        }
        Ok(())
    }
}
