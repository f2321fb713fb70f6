//! `httpdns apply -f FILE` and `httpdns export`: the admin state (networks, pools, nodes,
//! domains, mirror rules, image styles, config modules) as one declarative YAML, TOML or JSON file,
//! reconciled through the admin API.
//!
//! The file is parsed into the same spec types the server stores, so it is validated (unknown
//! fields refused, types checked) before anything is sent, and both sides are compared with
//! their defaults filled in: a file that omits a default and a server that filled it in agree.
//! [`plan`] is pure; [`client`] does the HTTP. Creates and updates go in dependency order
//! (networks, pools, nodes, domains, mirror rules, image styles, config), deletes (only with `--prune`) in
//! the reverse order. Config modules are published with `If-Match` on the version read, so a
//! publish that raced the plan fails instead of overwriting it.

pub mod client;
mod plan;

use std::collections::BTreeMap;

use httpdns_catalog::kinds::{Domains, ImageStyles, MirrorRules, Networks, Nodes, Pools};
use httpdns_catalog::{ResourceKind, Validation};
use httpdns_config::ConfigDocument;
use httpdns_core::model::mirror::RuleSpec;
use httpdns_core::model::style::StyleSpec;
use httpdns_core::model::{DomainSpec, NetworkSpec, NodeSpec, PoolSpec};
use serde::{Deserialize, Serialize};

pub use plan::{plan, Change, Section};

/// The whole declarative state. Missing sections are empty. One field per declarative kind of
/// `httpdns_catalog::KINDS`, named by its `section` (a test checks the two agree).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateFile {
    pub networks: BTreeMap<String, NetworkSpec>,
    pub pools: BTreeMap<String, PoolSpec>,
    pub nodes: BTreeMap<String, NodeSpec>,
    pub domains: BTreeMap<String, DomainSpec>,
    pub mirror_rules: BTreeMap<String, RuleSpec>,
    pub image_styles: BTreeMap<String, StyleSpec>,
    pub config: BTreeMap<String, ConfigDocument>,
}

/// File formats, chosen by extension (`.toml`; `.json`; anything else is YAML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Yaml,
    Toml,
    Json,
}

impl Format {
    pub fn of_path(path: &std::path::Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => Format::Toml,
            Some("json") => Format::Json,
            _ => Format::Yaml,
        }
    }
}

impl StateFile {
    pub fn parse(text: &str, format: Format) -> Result<Self, String> {
        let mut state: StateFile = match format {
            Format::Yaml => serde_norway::from_str(text).map_err(|e| e.to_string())?,
            Format::Toml => toml::from_str(text).map_err(|e| e.to_string())?,
            Format::Json => serde_json::from_str(text).map_err(|e| e.to_string())?,
        };
        state.canonicalize()?;
        state.validate()?;
        for doc in state.config.values_mut() {
            *doc = doc.content();
        }
        Ok(state)
    }

    /// Names as the server stores them (`Www.Example.com.` is `www.example.com`, IPv6 CIDRs
    /// compressed), so the plan compares like with like; two keys naming one resource are an
    /// error.
    fn canonicalize(&mut self) -> Result<(), String> {
        fn keys<T, R: ResourceKind>(m: &mut BTreeMap<String, T>) -> Result<(), String> {
            let section = R::info().section;
            let mut out = BTreeMap::new();
            for (raw, v) in std::mem::take(m) {
                let name = R::canonical_name(&raw).map_err(|e| format!("{section}.{raw}: {}", e.message))?;
                if out.insert(name.clone(), v).is_some() {
                    return Err(format!("{section}.{raw}: names the same resource as another key ({name})"));
                }
            }
            *m = out;
            Ok(())
        }
        keys::<_, Networks>(&mut self.networks)?;
        keys::<_, Pools>(&mut self.pools)?;
        keys::<_, Nodes>(&mut self.nodes)?;
        keys::<_, Domains>(&mut self.domains)?;
        keys::<_, MirrorRules>(&mut self.mirror_rules)?;
        keys::<_, ImageStyles>(&mut self.image_styles)?;
        for module in self.config.keys() {
            httpdns_config::validate_module(module).map_err(|e| format!("config.{module}: {}", e.message))?;
        }
        Ok(())
    }

    /// What the server would refuse, found before anything is sent. What depends on the
    /// server's settings (private node addresses, local origins) is allowed here and checked
    /// there.
    fn validate(&self) -> Result<(), String> {
        fn check<R: ResourceKind>(m: &BTreeMap<String, R::Spec>) -> Result<(), String> {
            for (n, s) in m {
                R::validate(s, &Validation::PERMISSIVE)
                    .map_err(|e| format!("{}.{n}.{}: {}", R::info().section, e.field, e.message))?;
            }
            Ok(())
        }
        check::<Networks>(&self.networks)?;
        check::<Pools>(&self.pools)?;
        check::<Domains>(&self.domains)?;
        check::<MirrorRules>(&self.mirror_rules)?;
        check::<ImageStyles>(&self.image_styles)?;
        for (n, s) in &self.config {
            s.validate().map_err(|e| format!("config.{n}.{}: {}", e.field, e.message))?;
        }
        check::<Nodes>(&self.nodes)?;
        Ok(())
    }

    pub fn render(&self, format: Format) -> Result<String, String> {
        let mut value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        // `configVersion` belongs to the server's history, not to the declared content.
        if let Some(cfg) = value.get_mut("config").and_then(|c| c.as_object_mut()) {
            for doc in cfg.values_mut() {
                if let Some(d) = doc.as_object_mut() {
                    d.remove("configVersion");
                }
            }
        }
        strip_nulls(&mut value);
        match format {
            Format::Yaml => serde_norway::to_string(&value).map_err(|e| e.to_string()),
            Format::Toml => toml::to_string_pretty(&value).map_err(|e| e.to_string()),
            Format::Json => serde_json::to_string_pretty(&value).map(|s| s + "\n").map_err(|e| e.to_string()),
        }
    }
}

/// TOML has no null; absent and null mean the same to every spec.
fn strip_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}
